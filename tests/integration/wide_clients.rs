//! The clients of a wide flow, on the librdkafka that `vendor/patches/librdkafka-wide-partitions.patch`
//! changes: a producer's broker thread serves only the partitions with something to send (it used to
//! walk every partition of the broker after each produce response and each first record), a consumer's
//! wake-ups and version barriers no longer cost a pass each. What these tests hold to: a record to a
//! partition idle since long is sent at once, not by the producer's once-a-second scan of every
//! partition; transactions over many partitions commit and abort whole; a consumer given more
//! partitions while its queue is full reads every record once, in order.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use support::scenario::records;
use support::{Deliveries, client_config, consume_all, consume_all_as, create_topic, produce, shared_pair, unique};

fn producer(bootstrap: &str, extra: &[(&str, &str)]) -> BaseProducer<Deliveries> {
    let mut c = client_config(bootstrap, &[]);
    c.set("acks", "all").set("enable.idempotence", "true").set("linger.ms", "5");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create_with_context(Deliveries::default()).expect("producer")
}

fn send(p: &BaseProducer<Deliveries>, topic: &str, partition: i32, value: &str) {
    p.send(BaseRecord::<(), str>::to(topic).partition(partition).payload(value))
        .unwrap_or_else(|(e, _)| panic!("send to {topic}-{partition}: {e}"));
}

/// Polls `p` until `n` records were acknowledged in all (30 s at most); panics on a failed one.
fn acked(p: &BaseProducer<Deliveries>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while p.context().done.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} records acknowledged within 30 s",
            p.context().done.load(Ordering::Relaxed)
        );
        p.poll(Duration::from_millis(1));
    }
    let failed = p.context().failed.lock().unwrap();
    assert!(failed.is_empty(), "deliveries failed: {failed:?}");
}

/// Values per partition, in offset order.
fn by_partition(recs: &[support::Rec]) -> BTreeMap<i32, Vec<String>> {
    let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for r in recs {
        out.entry(r.partition)
            .or_default()
            .push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
    }
    out
}

#[test]
fn a_record_to_a_partition_idle_since_long_is_sent_at_once_not_at_the_next_scan() {
    let (east, _) = shared_pair();
    let topic = unique("wide-idle");
    let partitions = 300;
    create_topic(&east.bootstrap, &topic, partitions, &[]);
    let p = producer(&east.bootstrap, &[]);

    // Every partition once: each is now known to the broker thread, and idle.
    for part in 0..partitions {
        send(&p, &topic, part, &format!("first-{part}"));
    }
    acked(&p, partitions as usize);

    // Then one record at a time, each to a partition idle since, each waited for. A partition the
    // producer's passes did not list would wait for the scan of every partition (once a second):
    // about 30 s for these 60; listed, each takes the linger and a round trip.
    let start = Instant::now();
    let mut expected: BTreeMap<i32, Vec<String>> =
        (0..partitions).map(|part| (part, vec![format!("first-{part}")])).collect();
    for i in 0..60 {
        let part = (i * 7) % partitions;
        send(&p, &topic, part, &format!("then-{i}"));
        acked(&p, partitions as usize + i as usize + 1);
        expected.get_mut(&part).unwrap().push(format!("then-{i}"));
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "60 records to idle partitions, one at a time, took {took:?}: a record waited for the producer's scan"
    );

    let got = consume_all(&east.bootstrap, &topic, Duration::from_secs(60));
    assert_eq!(by_partition(&got), expected, "every record once, in order, in its partition");
}

#[test]
fn transactions_over_many_partitions_commit_and_abort_whole() {
    let (east, _) = shared_pair();
    let topic = unique("wide-txn");
    let partitions = 400;
    create_topic(&east.bootstrap, &topic, partitions, &[]);
    let p = producer(&east.bootstrap, &[("transactional.id", &unique("wide-txn"))]);
    p.init_transactions(Duration::from_secs(30)).expect("init transactions");

    // Committed: five records in each partition.
    p.begin_transaction().expect("begin");
    for i in 0..(partitions * 5) {
        send(&p, &topic, i % partitions, &format!("c{i}"));
    }
    p.commit_transaction(Duration::from_secs(60)).expect("commit");
    // Aborted: one more in every other partition.
    p.begin_transaction().expect("begin");
    for part in (0..partitions).step_by(2) {
        send(&p, &topic, part, &format!("a{part}"));
    }
    // Sent before the abort (an abort with records not yet delivered fails)
    p.flush(Duration::from_secs(60)).expect("flush");
    p.abort_transaction(Duration::from_secs(60)).expect("abort");
    // Committed again, after the abort: a partition the abort left idle sends at once.
    p.begin_transaction().expect("begin");
    for part in 0..partitions {
        send(&p, &topic, part, &format!("z{part}"));
    }
    p.commit_transaction(Duration::from_secs(60)).expect("commit");

    let expected: BTreeMap<i32, Vec<String>> = (0..partitions)
        .map(|part| {
            let mut v: Vec<String> = (0..5).map(|k| format!("c{}", k * partitions + part)).collect();
            v.push(format!("z{part}"));
            (part, v)
        })
        .collect();
    let got = consume_all(&east.bootstrap, &topic, Duration::from_secs(60));
    assert_eq!(by_partition(&got), expected, "read_committed: both committed transactions, whole, in order");
    let all = consume_all_as(&east.bootstrap, &topic, Duration::from_secs(60), "read_uncommitted");
    assert_eq!(all.len(), partitions as usize * 6 + partitions as usize / 2, "the aborted records are in the log");
}

#[test]
fn a_consumer_given_more_partitions_while_its_queue_is_full_reads_every_record_once_in_order() {
    let (east, _) = shared_pair();
    let (a, b) = (unique("wide-assign-a"), unique("wide-assign-b"));
    let partitions = 500;
    create_topic(&east.bootstrap, &a, partitions, &[]);
    create_topic(&east.bootstrap, &b, partitions, &[]);
    produce(&east.bootstrap, &a, &records("a", 0..10_000, partitions));
    produce(&east.bootstrap, &b, &records("b", 0..5_000, partitions));

    let consumer: BaseConsumer = client_config(&east.bootstrap, &[])
        .set("group.id", unique("wide-assign"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for part in 0..partitions {
        tpl.add_partition_offset(&a, part, Offset::Beginning).expect("add");
    }
    consumer.assign(&tpl).expect("assign a");

    let mut got: BTreeMap<(String, i32), Vec<(i64, String)>> = BTreeMap::new();
    let mut take = |m: &rdkafka::message::BorrowedMessage<'_>| {
        got.entry((m.topic().to_string(), m.partition()))
            .or_default()
            .push((m.offset(), String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()));
    };
    // The first record: the queue now fills with a's records while b's partitions are added (their
    // version barriers are queued ahead of those records).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no record of {a} within 30 s");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                take(&m);
                break;
            }
            Some(Err(e)) => panic!("poll: {e}"),
            None => {}
        }
    }
    let mut more = TopicPartitionList::new();
    for part in 0..partitions {
        more.add_partition_offset(&b, part, Offset::Beginning).expect("add");
    }
    consumer.incremental_assign(&more).expect("assign b");

    let total = 15_000;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 1;
    while n < total {
        assert!(Instant::now() < deadline, "{n} of {total} records within 60 s");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                take(&m);
                n += 1;
            }
            Some(Err(e)) => panic!("poll: {e}"),
            None => {}
        }
    }
    // Nothing more arrives (no record twice).
    let quiet = Instant::now() + Duration::from_secs(1);
    while Instant::now() < quiet {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            panic!("a record beyond the {total}: {}-{} at {}", m.topic(), m.partition(), m.offset());
        }
    }
    for (topic, prefix, count) in [(&a, "a", 10_000), (&b, "b", 5_000)] {
        for part in 0..partitions {
            let want: Vec<(i64, String)> = (0..count)
                .filter(|i| i % partitions as usize == part as usize)
                .enumerate()
                .map(|(off, i)| (off as i64, format!("{prefix}{i}")))
                .collect();
            assert_eq!(got.get(&(topic.clone(), part)), Some(&want), "{topic}-{part}: every record once, in order");
        }
    }
}
