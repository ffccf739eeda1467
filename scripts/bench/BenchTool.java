// scripts/bench/BenchTool.java: the Kafka-client side of the benchmark harness (scripts/bench/bench.py).
//
// One small program with subcommands, run on Kafka's own jars (the ones scripts/kafka.sh fetched), so that
// every measurement is taken the same way for ferry, MM2 and the brokers' own tools. bench.py compiles it
// once into ~/.cache/ferry-bench/classes. Output is one event per line, "EVENT EPOCH_MS [fields]", or a
// JSON object for results; bench.py reads them as they come.
//
//   watch BOOTSTRAP TOPIC[,TOPIC...] EXPECT INTERVAL_MS TIMEOUT_S [COUNT_EVERY_MS]
//       polls the topics' log-end offsets (one ListOffsets per interval) and prints
//       "exists MS PARTITIONS", "first MS COUNT" (first record seen), "count MS COUNT" (about every
//       COUNT_EVERY_MS, default 1000) and "done MS COUNT" once the topic holds EXPECT records. The same watcher measures ferry, MM2 and
//       the limit, so its cost (one small admin request per interval) is the same for all.
//   watch-committed BOOTSTRAP TOPIC[,TOPIC...] EXPECT INTERVAL_MS TIMEOUT_S
//       the watcher of a transactional copy (the exactly-once scenario's eos engines). Log-end offsets
//       count every transaction marker (one per partition per transaction) as an offset, so they reach
//       EXPECT before the records do and cannot say when the copy is complete. This one polls the
//       topics' last stable offsets (ListOffsets, read_committed) once per interval and keeps each
//       poll's offsets with its time; it prints "first MS SUM" (something committed), "count MS SUM"
//       (about once a second; SUM counts markers too: progress only) and, once SUM >= EXPECT (necessary:
//       SUM = committed records + markers), starts a read_committed consumer from the beginning that
//       counts the records themselves. When it has counted EXPECT, "done MS COUNT" carries the time of
//       the first poll whose stable offsets were above the last counted record of every partition: when
//       the last record was committed, to the poll's resolution, however long the counting took. Then
//       it reads on to the current stable offsets and prints a JSON line: committed (every committed
//       record, > EXPECT means duplicates), end_offsets (log-end offsets, records + markers + aborted
//       records), not_records (their difference), stable_offsets.
//   latency BOOTSTRAP TOPIC COUNT_FROM_MS STATS_FROM_MS EXPECT TIMEOUT_S
//       consumes every partition from the beginning (no group), prints "ready MS" once positioned, and
//       for each record with CreateTime >= COUNT_FROM_MS counts it; those with CreateTime >= STATS_FROM_MS
//       (after the warm-up) contribute (arrival wall clock - CreateTime) to the histogram. Ends when
//       EXPECT records were counted (or at the timeout) with a JSON line of percentiles.
//   syncs BOOTSTRAP SYNC_TOPIC DATA_TOPIC PARTITIONS COUNT STEP
//       writes COUNT offset syncs in MM2's format (mm2-reference.md section 1.3) to partition 0 of SYNC_TOPIC
//       (created compacted with one partition if missing): sync i is DATA_TOPIC partition i % PARTITIONS,
//       upstream = downstream = (i / PARTITIONS) * STEP, i.e. what MM2 writes for a topic copied
//       1:1 with a sync every STEP records.
//   commit BOOTSTRAP GROUP TOPIC PARTITIONS OFFSET
//       commits OFFSET for every partition of TOPIC to GROUP (Admin.alterConsumerGroupOffsets).
//   checkpoints BOOTSTRAP CHECKPOINT_TOPIC GROUP[,GROUP...] PARTITIONS TIMEOUT_S
//       reads the checkpoints topic (MM2's Checkpoint decoder) and prints "first MS GROUP TOPIC-PARTITION UP
//       DOWN" for the first checkpoint of any of the groups, "group MS GROUP" when a group first has one for
//       every partition, then "all MS N" once every group has one for all PARTITIONS, and a JSON line of each
//       group's latest checkpoint per partition.
//   heartbeats BOOTSTRAP PAIRS SINCE_MS TIMEOUT_S
//       reads `heartbeats` and prints "ready MS" once PAIRS distinct (source, target) pairs have written a
//       heartbeat stamped at or after SINCE_MS (every flow is running).
//   create BOOTSTRAP PARTITIONS [CONFIG=VALUE,...|-] TOPIC...
//       creates topics (replication factor 1) and waits until every partition has a leader.
//   produce BOOTSTRAP TOPIC[,TOPIC...] PARTITIONS COUNT PAYLOAD_FILE [PROP=VALUE...]
//       COUNT records spread evenly over the topics and their partitions (explicit partition numbers), each
//       value a line of PAYLOAD_FILE picked at random: producer-perf for several topics at once (the limit
//       of scenarios whose partitions do not fit one topic). Prints a JSON line with the rate.
//   produce-one BOOTSTRAP TOPIC
//       writes one small record (the primer of the latency scenario).
//   txn-probe BOOTSTRAP TOPIC PARTITIONS TXNS RECORDS SIZE [SIDE_TOPIC]
//       a transactional producer (linger 20 ms, as ferry's) writes TXNS transactions of RECORDS records of
//       SIZE bytes over PARTITIONS partitions of TOPIC (and, with SIDE_TOPIC, one small record per partition
//       to it at the end of each, as ferry's progress records), timing each commitTransaction (which
//       sends what is queued and waits for it). Prints a JSON line of the commit times: how long the broker
//       and the Java client take, to compare with ferry_transaction_commit_seconds.
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.mirror.Checkpoint;
import org.apache.kafka.connect.mirror.Heartbeat;

public class BenchTool {
    static void out(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static long now() {
        return System.currentTimeMillis();
    }

    static Properties base(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "bench-tool");
        return p;
    }

    static Admin admin(String bootstrap) {
        Properties p = base(bootstrap);
        p.put("default.api.timeout.ms", "15000");
        p.put("request.timeout.ms", "10000");
        return Admin.create(p);
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap) {
        return consumer(bootstrap, "read_uncommitted");
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String isolation) {
        Properties p = base(bootstrap);
        p.put("isolation.level", isolation);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("fetch.min.bytes", "1");
        p.put("max.poll.records", "5000");
        return new KafkaConsumer<>(p);
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap) {
        Properties p = base(bootstrap);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("acks", "all");
        p.put("linger.ms", "20");
        p.put("batch.size", "262144");
        p.put("compression.type", "lz4");
        return new KafkaProducer<>(p);
    }

    /** Partitions of the topic, or null while it does not exist (or has partitions without a leader). */
    static List<TopicPartition> partitions(Admin admin, String topic) throws InterruptedException {
        try {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<TopicPartition> tps = new ArrayList<>();
            for (var p : d.partitions()) {
                if (p.leader() == null) return null;
                tps.add(new TopicPartition(topic, p.partition()));
            }
            return tps;
        } catch (ExecutionException e) {
            return null;
        }
    }

    static List<TopicPartition> awaitTopic(Admin admin, String topic, long deadline) throws InterruptedException {
        while (now() < deadline) {
            List<TopicPartition> tps = partitions(admin, topic);
            if (tps != null && !tps.isEmpty()) return tps;
            Thread.sleep(100);
        }
        return null;
    }

    static int watch(String[] a) throws Exception {
        String[] topics = a[1].split(",");
        long expect = Long.parseLong(a[2]);
        long interval = Long.parseLong(a[3]);
        long deadline = now() + Long.parseLong(a[4]) * 1000;
        long countEvery = a.length > 5 ? Long.parseLong(a[5]) : 1000;
        try (Admin admin = admin(a[0])) {
            Map<TopicPartition, OffsetSpec> spec = new HashMap<>();
            for (String topic : topics) {
                List<TopicPartition> tps = awaitTopic(admin, topic, deadline);
                if (tps == null) {
                    out("timeout " + now() + " 0");
                    return 2;
                }
                for (TopicPartition tp : tps) spec.put(tp, OffsetSpec.latest());
            }
            out("exists " + now() + " " + spec.size());
            boolean first = false;
            long lastPrint = 0, count = 0;
            while (now() < deadline) {
                long t0 = now();
                try {
                    count = 0;
                    for (var e : admin.listOffsets(spec).all().get().values()) count += e.offset();
                } catch (ExecutionException e) {
                    Thread.sleep(interval); // leader moving or the topic still being created: try again
                    continue;
                }
                long t = now();
                if (!first && count > 0) {
                    first = true;
                    out("first " + t + " " + count);
                }
                if (count >= expect) {
                    out("done " + t + " " + count);
                    return 0;
                }
                if (t - lastPrint >= countEvery) {
                    out("count " + t + " " + count);
                    lastPrint = t;
                }
                long sleep = interval - (now() - t0);
                if (sleep > 0) Thread.sleep(sleep);
            }
            out("timeout " + now() + " " + count);
            return 2;
        }
    }

    static Map<TopicPartition, Long> offsets(Admin admin, Map<TopicPartition, OffsetSpec> spec, ListOffsetsOptions o)
            throws Exception {
        Map<TopicPartition, Long> m = new HashMap<>();
        for (var e : admin.listOffsets(spec, o).all().get().entrySet()) m.put(e.getKey(), e.getValue().offset());
        return m;
    }

    static long sum(Map<TopicPartition, Long> m) {
        long s = 0;
        for (long v : m.values()) s += v;
        return s;
    }

    static int watchCommitted(String[] a) throws Exception {
        String[] topics = a[1].split(",");
        long expect = Long.parseLong(a[2]);
        long interval = Long.parseLong(a[3]);
        long deadline = now() + Long.parseLong(a[4]) * 1000;
        ListOffsetsOptions stable = new ListOffsetsOptions(IsolationLevel.READ_COMMITTED);
        try (Admin admin = admin(a[0])) {
            Map<TopicPartition, OffsetSpec> spec = new HashMap<>();
            for (String topic : topics) {
                List<TopicPartition> tps = awaitTopic(admin, topic, deadline);
                if (tps == null) {
                    out("timeout " + now() + " 0");
                    return 2;
                }
                for (TopicPartition tp : tps) spec.put(tp, OffsetSpec.latest());
            }
            out("exists " + now() + " " + spec.size());
            List<Long> polledAt = new ArrayList<>();
            List<Map<TopicPartition, Long>> polled = new ArrayList<>();
            KafkaConsumer<byte[], byte[]> consumer = null;
            Map<TopicPartition, Long> lastRecord = new HashMap<>();
            long counted = 0, lastPoll = 0, lastPrint = 0;
            boolean first = false;
            try {
                while (now() < deadline) {
                    if (now() - lastPoll >= interval) {
                        lastPoll = now();
                        Map<TopicPartition, Long> lso;
                        try {
                            lso = offsets(admin, spec, stable);
                        } catch (ExecutionException e) {
                            Thread.sleep(interval); // leader moving: try again
                            continue;
                        }
                        long t = now();
                        polledAt.add(t);
                        polled.add(lso);
                        long s = sum(lso);
                        if (!first && s > 0) {
                            first = true;
                            out("first " + t + " " + s);
                        }
                        if (t - lastPrint >= 1000) {
                            out("count " + t + " " + s);
                            lastPrint = t;
                        }
                        if (consumer == null && s >= expect) {
                            Properties p = base(a[0]);
                            p.put("key.deserializer", ByteArrayDeserializer.class.getName());
                            p.put("value.deserializer", ByteArrayDeserializer.class.getName());
                            p.put("enable.auto.commit", "false");
                            p.put("isolation.level", "read_committed");
                            p.put("max.poll.records", "10000");
                            consumer = new KafkaConsumer<>(p);
                            consumer.assign(spec.keySet());
                            consumer.seekToBeginning(spec.keySet());
                            out("counting " + t + " " + s);
                        }
                    }
                    if (consumer == null) {
                        long sleep = interval - (now() - lastPoll);
                        if (sleep > 0) Thread.sleep(sleep);
                        continue;
                    }
                    long wait = Math.max(1, interval - (now() - lastPoll));
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(wait))) {
                        counted++;
                        lastRecord.put(new TopicPartition(r.topic(), r.partition()), r.offset());
                    }
                    if (counted < expect) continue;
                    // every record is committed: the first poll that saw them all committed
                    long doneAt = -1;
                    while (doneAt < 0) {
                        for (int i = 0; i < polled.size() && doneAt < 0; i++) {
                            boolean all = true;
                            for (var e : lastRecord.entrySet()) {
                                Long o = polled.get(i).get(e.getKey());
                                if (o == null || o <= e.getValue()) {
                                    all = false;
                                    break;
                                }
                            }
                            if (all) doneAt = polledAt.get(i);
                        }
                        if (doneAt < 0) { // counted beyond the newest poll: poll again
                            polled.add(offsets(admin, spec, stable));
                            polledAt.add(now());
                        }
                    }
                    out("done " + doneAt + " " + counted);
                    // read on to the stable offsets of now: every committed record (duplicates would show)
                    Map<TopicPartition, Long> lso = offsets(admin, spec, stable);
                    long drainUntil = now() + 60000;
                    while (now() < drainUntil) {
                        boolean behind = false;
                        for (var e : lso.entrySet()) if (consumer.position(e.getKey()) < e.getValue()) behind = true;
                        if (!behind) break;
                        counted += consumer.poll(Duration.ofMillis(200)).count();
                    }
                    Map<TopicPartition, Long> end = offsets(admin, spec, new ListOffsetsOptions());
                    out("{\"committed\":" + counted + ",\"end_offsets\":" + sum(end) + ",\"not_records\":"
                        + (sum(end) - counted) + ",\"stable_offsets\":" + sum(lso) + ",\"partitions\":" + spec.size() + "}");
                    return 0;
                }
            } finally {
                if (consumer != null) consumer.close();
            }
            out("timeout " + now() + " " + counted);
            return 2;
        }
    }

    static int produce(String[] a) throws Exception {
        String[] topics = a[1].split(",");
        int parts = Integer.parseInt(a[2]);
        long count = Long.parseLong(a[3]);
        List<byte[]> payloads = new ArrayList<>();
        for (String l : java.nio.file.Files.readAllLines(java.nio.file.Path.of(a[4]))) {
            if (!l.isEmpty()) payloads.add(l.getBytes(StandardCharsets.UTF_8));
        }
        Properties p = base(a[0]);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        for (int i = 5; i < a.length; i++) {
            String[] kv = a[i].split("=", 2);
            p.put(kv[0], kv[1]);
        }
        Random rnd = new Random(42);
        long t0 = now();
        try (KafkaProducer<byte[], byte[]> pr = new KafkaProducer<>(p)) {
            for (long i = 0; i < count; i++) {
                String t = topics[(int) (i % topics.length)];
                int part = (int) ((i / topics.length) % parts);
                pr.send(new ProducerRecord<>(t, part, null, payloads.get(rnd.nextInt(payloads.size()))));
            }
            pr.flush();
        }
        double s = (now() - t0) / 1000.0;
        out(String.format(Locale.ROOT, "{\"records\": %d, \"seconds\": %.2f, \"rate\": %.0f}", count, s, count / s));
        return 0;
    }

    static int latency(String[] a) throws Exception {
        String topic = a[1];
        long countFrom = Long.parseLong(a[2]);
        long statsFrom = Long.parseLong(a[3]);
        long expect = Long.parseLong(a[4]);
        long deadline = now() + Long.parseLong(a[5]) * 1000;
        List<TopicPartition> tps;
        try (Admin admin = admin(a[0])) {
            tps = awaitTopic(admin, topic, deadline);
        }
        if (tps == null) {
            out("{\"error\": \"topic " + topic + " never appeared\"}");
            return 2;
        }
        int[] lat = new int[1 << 20];
        int n = 0;
        long counted = 0, minTs = Long.MAX_VALUE, maxTs = 0;
        // read_committed: an exactly-once copy's records count when a reader may see them (the same as
        // read_uncommitted for records written outside transactions).
        KafkaConsumer<byte[], byte[]> committed = consumer(a[0], "read_committed");
        try (KafkaConsumer<byte[], byte[]> c = committed) {
            c.assign(tps);
            c.seekToBeginning(tps);
            for (TopicPartition tp : tps) c.position(tp);
            out("ready " + now());
            while (counted < expect && now() < deadline) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(200));
                long arrival = now();
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    long ts = r.timestamp();
                    if (ts < countFrom) continue;
                    counted++;
                    if (ts < statsFrom) continue;
                    if (n == lat.length) lat = Arrays.copyOf(lat, n * 2);
                    lat[n++] = (int) Math.max(0, arrival - ts);
                    minTs = Math.min(minTs, ts);
                    maxTs = Math.max(maxTs, ts);
                }
            }
        }
        int[] s = Arrays.copyOf(lat, n);
        Arrays.sort(s);
        double sum = 0;
        for (int v : s) sum += v;
        StringBuilder b = new StringBuilder("{");
        b.append("\"counted\": ").append(counted).append(", \"expected\": ").append(expect);
        b.append(", \"samples\": ").append(n);
        if (n > 0) {
            b.append(", \"p50_ms\": ").append(s[(int) Math.min(n - 1, Math.floor(0.50 * n))]);
            b.append(", \"p90_ms\": ").append(s[(int) Math.min(n - 1, Math.floor(0.90 * n))]);
            b.append(", \"p99_ms\": ").append(s[(int) Math.min(n - 1, Math.floor(0.99 * n))]);
            b.append(", \"p999_ms\": ").append(s[(int) Math.min(n - 1, Math.floor(0.999 * n))]);
            b.append(", \"max_ms\": ").append(s[n - 1]);
            b.append(", \"mean_ms\": ").append(String.format(Locale.ROOT, "%.1f", sum / n));
            b.append(", \"span_s\": ").append(String.format(Locale.ROOT, "%.1f", (maxTs - minTs) / 1000.0));
        }
        out(b.append("}").toString());
        return counted >= expect ? 0 : 2;
    }

    static byte[] syncKey(String topic, int partition) {
        byte[] t = topic.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(2 + t.length + 4).putShort((short) t.length).put(t).putInt(partition).array();
    }

    static int syncs(String[] a) throws Exception {
        String syncTopic = a[1], dataTopic = a[2];
        int parts = Integer.parseInt(a[3]);
        long count = Long.parseLong(a[4]);
        long step = Long.parseLong(a[5]);
        try (Admin admin = admin(a[0])) {
            if (partitions(admin, syncTopic) == null) {
                NewTopic t = new NewTopic(syncTopic, 1, (short) 1).configs(Map.of("cleanup.policy", "compact"));
                admin.createTopics(List.of(t)).all().get();
                awaitTopic(admin, syncTopic, now() + 30000);
            }
        }
        long t0 = now();
        byte[][] keys = new byte[parts][];
        for (int p = 0; p < parts; p++) keys[p] = syncKey(dataTopic, p);
        try (KafkaProducer<byte[], byte[]> pr = producer(a[0])) {
            for (long i = 0; i < count; i++) {
                int p = (int) (i % parts);
                long up = (i / parts) * step;
                byte[] v = ByteBuffer.allocate(16).putLong(up).putLong(up).array();
                pr.send(new ProducerRecord<>(syncTopic, 0, keys[p], v));
            }
            pr.flush();
        }
        long last = ((count - 1) / parts) * step;
        out("{\"syncs\": " + count + ", \"partitions\": " + parts + ", \"step\": " + step + ", \"last_upstream\": "
                + last + ", \"write_s\": " + String.format(Locale.ROOT, "%.1f", (now() - t0) / 1000.0) + "}");
        return 0;
    }

    static int commit(String[] a) throws Exception {
        String group = a[1], topic = a[2];
        int parts = Integer.parseInt(a[3]);
        long offset = Long.parseLong(a[4]);
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (int p = 0; p < parts; p++) offsets.put(new TopicPartition(topic, p), new OffsetAndMetadata(offset));
        try (Admin admin = admin(a[0])) {
            admin.alterConsumerGroupOffsets(group, offsets).all().get();
        }
        out("committed " + now() + " " + group + " " + offset);
        return 0;
    }

    static int checkpoints(String[] a) throws Exception {
        String topic = a[1];
        Set<String> groups = new TreeSet<>(Arrays.asList(a[2].split(",")));
        int parts = Integer.parseInt(a[3]);
        long deadline = now() + Long.parseLong(a[4]) * 1000;
        List<TopicPartition> tps;
        try (Admin admin = admin(a[0])) {
            tps = awaitTopic(admin, topic, deadline);
        }
        if (tps == null) {
            out("timeout " + now() + " no-topic");
            return 2;
        }
        Map<String, Map<Integer, Checkpoint>> latest = new TreeMap<>();
        int seen = 0;
        boolean first = false;
        try (KafkaConsumer<byte[], byte[]> c = consumer(a[0])) {
            c.assign(tps);
            c.seekToBeginning(tps);
            while (now() < deadline && seen < parts * groups.size()) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    Checkpoint cp;
                    try {
                        cp = Checkpoint.deserializeRecord(r);
                    } catch (RuntimeException e) {
                        continue;
                    }
                    if (!groups.contains(cp.consumerGroupId())) continue;
                    if (!first) {
                        first = true;
                        out("first " + now() + " " + cp.consumerGroupId() + " " + cp.topicPartition() + " "
                                + cp.upstreamOffset() + " " + cp.downstreamOffset());
                    }
                    Map<Integer, Checkpoint> mine = latest.computeIfAbsent(cp.consumerGroupId(), g -> new TreeMap<>());
                    boolean complete = mine.size() >= parts;
                    mine.put(cp.topicPartition().partition(), cp);
                    if (!complete && mine.size() >= parts) out("group " + now() + " " + cp.consumerGroupId());
                }
                seen = latest.values().stream().mapToInt(Map::size).sum();
            }
        }
        StringBuilder b = new StringBuilder("{\"checkpoints\": {");
        String gsep = "";
        for (var g : latest.entrySet()) {
            b.append(gsep).append('"').append(g.getKey()).append("\": [");
            gsep = ", ";
            String sep = "";
            for (Checkpoint cp : g.getValue().values()) {
                b.append(sep).append("{\"partition\": ").append(cp.topicPartition().partition())
                        .append(", \"upstream\": ").append(cp.upstreamOffset()).append(", \"downstream\": ")
                        .append(cp.downstreamOffset()).append("}");
                sep = ", ";
            }
            b.append("]");
        }
        b.append("}}");
        boolean all = seen >= parts * groups.size();
        out((all ? "all " : "timeout ") + now() + " " + seen);
        out(b.toString());
        return all ? 0 : 2;
    }

    static int heartbeats(String[] a) throws Exception {
        int pairs = Integer.parseInt(a[1]);
        long since = Long.parseLong(a[2]);
        long deadline = now() + Long.parseLong(a[3]) * 1000;
        List<TopicPartition> tps;
        try (Admin admin = admin(a[0])) {
            tps = awaitTopic(admin, "heartbeats", deadline);
        }
        if (tps == null) {
            out("timeout " + now() + " 0");
            return 2;
        }
        Set<String> seen = new HashSet<>();
        try (KafkaConsumer<byte[], byte[]> c = consumer(a[0])) {
            c.assign(tps);
            c.seekToBeginning(tps);
            while (now() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    try {
                        Heartbeat h = Heartbeat.deserializeRecord(r);
                        if (h.timestamp() >= since) seen.add(h.sourceClusterAlias() + "->" + h.targetClusterAlias());
                    } catch (RuntimeException e) {
                        // not a heartbeat
                    }
                }
                if (seen.size() >= pairs) {
                    out("ready " + now() + " " + seen.size());
                    return 0;
                }
            }
        }
        out("timeout " + now() + " " + seen.size());
        return 2;
    }

    static int create(String[] a) throws Exception {
        int parts = Integer.parseInt(a[1]);
        Map<String, String> configs = new HashMap<>();
        if (!a[2].equals("-")) {
            for (String kv : a[2].split(",")) {
                String[] x = kv.split("=", 2);
                configs.put(x[0], x[1]);
            }
        }
        List<NewTopic> topics = new ArrayList<>();
        for (int i = 3; i < a.length; i++) topics.add(new NewTopic(a[i], parts, (short) 1).configs(configs));
        long t0 = now();
        try (Admin admin = admin(a[0])) {
            // one request per topic: KRaft refuses an operation of more than 10,000 metadata records
            for (NewTopic t : topics) admin.createTopics(List.of(t)).all().get();
            for (NewTopic t : topics) {
                if (awaitTopic(admin, t.name(), now() + 300000) == null) throw new RuntimeException("no leaders: " + t.name());
            }
        }
        out("created " + now() + " " + topics.size() + " " + (now() - t0));
        return 0;
    }

    /**
     * Makes a fresh cluster one that has served clients: a group commit and a transaction create its
     * __consumer_offsets and __transaction_state (50 partitions each), which a cluster in use has. On a
     * fresh cluster their creation delays whichever client needs them first by seconds.
     */
    static int warm(String[] a) throws Exception {
        long t0 = now();
        String topic = "bench-warm";
        try (Admin admin = admin(a[0])) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            if (awaitTopic(admin, topic, now() + 60000) == null) throw new RuntimeException("no leader: " + topic);
            admin.alterConsumerGroupOffsets("bench-warm", Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(0)))
                .all().get();
        }
        Properties p = base(a[0]);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("transactional.id", "bench-warm");
        try (KafkaProducer<byte[], byte[]> tx = new KafkaProducer<>(p)) {
            tx.initTransactions();
            tx.beginTransaction();
            tx.send(new ProducerRecord<>(topic, 0, null, "warm".getBytes(StandardCharsets.UTF_8)));
            tx.commitTransaction();
        }
        out("warm " + now() + " " + (now() - t0));
        return 0;
    }

    static int produceOne(String[] a) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = producer(a[0])) {
            p.send(new ProducerRecord<>(a[1], 0, null, "primer".getBytes(StandardCharsets.UTF_8))).get();
        }
        out("produced " + now());
        return 0;
    }

    static int txnProbe(String[] a) throws Exception {
        String topic = a[1];
        int parts = Integer.parseInt(a[2]), txns = Integer.parseInt(a[3]), records = Integer.parseInt(a[4]);
        byte[] value = new byte[Integer.parseInt(a[5])];
        String side = a.length > 6 ? a[6] : null;
        Properties p = base(a[0]);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("transactional.id", "bench-txn-probe-" + now());
        p.put("linger.ms", "20");
        long[] ms = new long[txns];
        try (KafkaProducer<byte[], byte[]> tx = new KafkaProducer<>(p)) {
            tx.initTransactions();
            for (int t = 0; t < txns; t++) {
                tx.beginTransaction();
                for (int i = 0; i < records; i++) tx.send(new ProducerRecord<>(topic, i % parts, null, value));
                if (side != null)
                    for (int i = 0; i < parts; i++) tx.send(new ProducerRecord<>(side, i, null, value.length > 0 ? new byte[64] : value));
                long t0 = System.nanoTime();
                tx.commitTransaction();
                ms[t] = (System.nanoTime() - t0) / 1_000_000;
            }
        }
        long[] s2 = ms.clone();
        Arrays.sort(s2);
        out(String.format(Locale.ROOT, "{\"txns\": %d, \"commit_p50_ms\": %d, \"commit_p90_ms\": %d, \"commit_max_ms\": %d}",
                txns, s2[txns / 2], s2[(int) Math.min(txns - 1, Math.floor(0.9 * txns))], s2[txns - 1]));
        return 0;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: BenchTool watch|watch-committed|latency|syncs|commit|checkpoints|heartbeats|create|produce-one|warm ...");
            System.exit(2);
        }
        String[] rest = Arrays.copyOfRange(args, 1, args.length);
        int rc = switch (args[0]) {
            case "watch" -> watch(rest);
            case "watch-committed" -> watchCommitted(rest);
            case "latency" -> latency(rest);
            case "syncs" -> syncs(rest);
            case "commit" -> commit(rest);
            case "checkpoints" -> checkpoints(rest);
            case "heartbeats" -> heartbeats(rest);
            case "create" -> create(rest);
            case "produce-one" -> produceOne(rest);
            case "warm" -> warm(rest);
            case "produce" -> produce(rest);
            case "txn-probe" -> txnProbe(rest);
            default -> {
                System.err.println("unknown subcommand " + args[0]);
                yield 2;
            }
        };
        System.exit(rc);
    }
}
