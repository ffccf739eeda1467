//! Long links: the source cluster behind a real TCP proxy that adds latency (a link between regions),
//! cut for a while as links are. The bench's `wan` scenario measures the speed over such a link; this
//! checks what must hold whatever the speed: every record once, in order, nothing lost to a cut.

use crate::support;

use std::time::{Duration, Instant};

use support::observe::{health, unhealthy};
use support::scenario::*;
use support::{Cluster, Ferry, consume_all, create_topic, produce, shared_pair, unique, wait_for};

/// The link's round trip: an intercontinental one is 150-300 ms.
const ROUND_TRIP: Duration = Duration::from_millis(200);
/// How long the link stays cut: the scenario.
const CUT: Duration = Duration::from_secs(20);

#[test]
fn a_flow_over_a_long_link_copies_every_record_in_order_and_a_cut_of_20_s_loses_nothing() {
    let east = Cluster::start_linked("far-east");
    let (_, west) = shared_pair();
    east.link().round_trip(ROUND_TRIP);
    let topic = unique("far");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 4, &[]);
    produce(&east.bootstrap, &topic, &records("a", 0..20_000, 4));
    // Every client of the flow's source (copier, offset syncs, checkpoints, admin) goes over the link.
    let dir = flows_dir(
        &[("east", &east.linked_bootstrap()), ("west", &west.bootstrap)],
        &flow("east", "west", &[&topic], ""),
    );
    let mut ferry = Ferry::start(dir.path(), &[]);
    let started = Instant::now();
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("a", 0..20_000));
    println!("20,000 records over a {ROUND_TRIP:?} link in {:?} from the start", started.elapsed());

    wait_healthy(&mut ferry, FLOW, Duration::from_secs(60));
    // Records keep coming on the source while the link is cut.
    let stream = Stream::start(&east.bootstrap, &topic, 4, "b", 200, Duration::from_millis(100));
    wait_for(ARRIVAL, "streamed records copied over the link", || total(&west.bootstrap, &remote) >= 21_000);
    east.link().cut();
    let cut = Instant::now();
    let mut seen = None;
    // Keeping the link cut is the scenario; meanwhile watch what an operator sees, and that nothing
    // copied arrives once the records in flight have landed.
    while cut.elapsed() < CUT {
        assert_alive(&mut ferry);
        if seen.is_none() && !unhealthy(&health(ferry.listen_addr()), FLOW).is_empty() {
            seen = Some(cut.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let during = total(&west.bootstrap, &remote);
    let produced_during = stream.produced();
    east.link().restore();
    let restored = Instant::now();
    println!("link cut for {CUT:?}: /health showed the flow degraded after {seen:?}");
    assert!(seen.is_some_and(|s| s < CUT), "the cut source never showed on /health within {CUT:?}");
    assert!(
        during < 20_000 + produced_during as i64,
        "records produced during the cut arrived through a cut link ({during} on the target of {})",
        20_000 + produced_during
    );
    wait_for(ARRIVAL, "copying resumed after the link came back", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) > during
    });
    println!("copying again {:?} after the link came back", restored.elapsed());
    let produced = stream.finish();
    let mut expected = values("a", 0..20_000);
    expected.extend(values("b", 0..produced));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &expected);
    println!(
        "{} records copied, {} duplicates; all there {:?} after the link came back",
        expected.len(),
        duplicates(&counts),
        restored.elapsed()
    );
    wait_healthy(&mut ferry, FLOW, Duration::from_secs(90));
    assert!(ferry.terminate(Duration::from_secs(30)).success());

    // Every record once, in its partition's order.
    let source = per_partition(consume_all(&east.bootstrap, &topic, READ));
    let copy = per_partition(consume_all(&west.bootstrap, &remote, READ));
    for (p, recs) in &source {
        let copied = copy.get(p).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            copied.len(),
            recs.len(),
            "partition {p}: {} records on the source, {} on the target",
            recs.len(),
            copied.len()
        );
        if let Some(i) = recs.iter().zip(copied).position(|(a, b)| a != b) {
            panic!("partition {p}: record #{i} differs: source {:?}, target {:?}", recs[i], copied[i]);
        }
    }
}
