#!/usr/bin/env bash
# scripts/bench.sh: ferry against MirrorMaker 2 (MM2) and against what the brokers themselves can do,
# on the same clusters and data, one engine after the other, each into a fresh target.
#
#   scripts/bench.sh SCENARIO [--runs N] [--engines ferry,mm2,limit] [options]
#   scripts/bench.sh all [--runs N]              every scenario below, in this order
#   scripts/bench.sh profile [SCENARIO]          ferry under perf, flamegraph + summary in bench/
#   scripts/bench.sh [--mm2] [RECORDS] [BYTES] [PARTITIONS]
#                                                the old interface: one `copy` run of ferry (or MM2)
#
# Scenarios (default engines in brackets)
#   headline          1,000,000 records of 512 B, 8 partitions [ferry,mm2,limit]
#   small             1,000,000 records of 100 B, 8 partitions [ferry,mm2,limit]
#   lz4               like headline, the source batches lz4-compressed [ferry,mm2,limit]
#   latency           steady 20,000 records/s of 512 B for 60 s; p50/p90/p99 of (arrival on the target -
#                     record CreateTime), first 10 s skipped; limit = the same consumer on the source [ferry,mm2,limit]
#   partitions-2000   1,000,000 records of 100 B over 2,000 partitions (round robin) [ferry,mm2,limit]
#   partitions-10000  the same over 10,000 partitions [ferry,mm2,limit]
#   flows             idle flows eK->wK (aliases of the same two clusters), ferry at 1, 10, 50 and 100, MM2 at
#                     1, 10 and 50, each count for both engines back to back: threads, idle CPU over 30 s,
#                     wake-ups, RSS, and the idle CPU per kind of thread (names without the flow); MM2's
#                     herders' Connect topics are created before it starts (100 herders starting together
#                     time out waiting for their own topics on a loaded 2-core box) [ferry,mm2]
#   flows-busy        20 flows copying a topic each at once (1,000,000 records of 512 B over 20 topics of 4
#                     partitions) against one flow copying the same 20 topics: copy rate and CPU per record,
#                     whole copy and steady part (10-90 % of the records) [ferry]
#   checkpoint        1,000,000 offset syncs (MM2's format) on the offset-syncs topic, lagging groups on
#                     the source (1,000 and 100,000 records behind, half the history, and a deep one near
#                     upstream offset 1,000,000, in the oldest part of the history): time from start to
#                     the first checkpoint, to each group's, and the records a failover to the
#                     checkpointed offsets would re-read [ferry,mm2]
#   exactly-once      the headline's data (1,000,000 records of 512 B, 8 partitions) copied by ferry at least
#                     once, by ferry with delivery = "exactly_once" (transaction_interval_ms 100,
#                     transaction_max_bytes 16 MiB, the defaults) and by MM2 with exactly-once source
#                     support; the eos engines watched read_committed (below); ratios ferry-eos/ferry
#                     (goal >= 90 %) and ferry-eos/MM2-eos (goal > 1) [ferry,ferry-eos,mm2-eos]
#   schemas           the headline's data in the Confluent framing (schema ID 1 before every value), copied
#                     by ferry as it is and by ferry with schemas = "translate" (a registry per cluster,
#                     scripts/registry.sh; every value gets the target's ID 2): what translation costs
#                     [ferry,ferry-translate]
#   rules             the headline's data copied by ferry as it is and by ferry with two [[flows.filter]] rules
#                     checked on every record (none matches: the count stays whole) and a lineage header
#                     inserted into every record: what record rules cost [ferry,ferry-rules]
#   wan               200,000 records of 1 KiB, 8 partitions, the source behind a real TCP proxy that adds
#                     latency (Toxiproxy, scripts/toxiproxy.sh; half of the round trip each way) at 0, 100 and
#                     300 ms round trip (--rtts), optionally --bandwidth MBIT towards the replicator; every
#                     connection of the engine to the source crosses the link, the data is written direct.
#                     Ratios: each engine's rate against its own at 0 ms, ferry/MM2 per round trip [ferry,mm2]
#   limit             the headline copy done by producer-perf into the target and consumer-perf from the
#                     source, together: the box's copy limit (also an engine of every copy scenario)
#   copy              a custom copy: --records, --size, --partitions [ferry]
#
# Copy scenarios measure, per engine run: wall time from process start until the target holds every record,
# time to the first record on the target, copy rate (first to last record), MB/s, peak RSS (VmHWM), CPU
# (user+system of the process, all of it and while copying), MB per CPU-second, threads, and the load
# other processes put on the machine meanwhile. Progress is watched the same way for every engine: one
# admin client polls the target's log-end offsets every 0.1 s (0.5 s above 100 partitions). Transactional
# engines (ferry-eos, mm2-eos) are the exception: their log-end offsets also count a transaction marker per
# partition per transaction, so they reach the record count before the records do. Their watcher polls the
# last stable offsets (read_committed) instead and, once those reach the record count, counts the records
# with a read_committed consumer; the copy is complete at the first poll whose stable offsets cover the
# last counted record of every partition, and the final count (every committed record) and the offsets
# that are not records (markers) are recorded.
#
# Options
#   --runs N            rounds (default 3); each round runs every engine once, back to back; the table shows
#                       medians and the ratios are medians of the per-round ratios
#   --engines LIST      a subset of ferry, mm2, limit (and ferry-eos, mm2-eos: the exactly-once engines)
#   --records N, --size BYTES, --partitions P      override the scenario's data
#   --rate R, --duration S, --warmup S             latency: the steady load, seconds left out
#   --flows 1,10,50,100, --window S                flows: ferry's flow counts (MM2's too unless
#                                                  --mm2-flows), idle measurement window; flows-busy: --flows N
#   --mm2-flows 1,10,50                            flows: MM2's flow counts
#   --heartbeats-interval S                        flows: every flow's heartbeat interval, both engines
#                                                  (default 1 s, MM2's; with n flows from one source cluster
#                                                  every flow copies every reverse heartbeat: n²/S records/s)
#   --syncs N                                      checkpoint: offset syncs on the topic
#   --rtts 0,100,300, --bandwidth MBIT             wan: round trips in ms, a bandwidth limit
#   --timeout S         longest an engine run may take (default 900)
#   --note TEXT         recorded with the results (e.g. "machine busy: other engineers' tests")
#   --no-record         print the table only; --keep-clusters leaves the bench clusters running
#   --ferry-bin PATH    measure that binary (FERRY_BIN=PATH works too)
#   --ferry-source-client K=V,...  librdkafka properties for ferry's source cluster (e.g. fetch sizes)
#   --ferry-rev REV     build that git revision (git archive into ~/.cache/ferry-bench, its own target dir):
#                       an exact revision, whatever the working tree holds; default: cargo build --release
#                       of this tree (the results say when src/ had uncommitted changes)
#   --freq HZ           profile: perf's sampling frequency (default 499)
#
# Clusters and isolation. The bench has its own clusters, apart from the shell clusters east/west of the
# demo and the tests: scripts/kafka.sh with FERRY_KAFKA_RUN=/tmp/ferry-bench, `bsrc` on 127.0.0.1:39192
# (the source) and `bdst` on 127.0.0.1:39292 (the target; FERRY_BENCH_SRC_PORT / FERRY_BENCH_DST_PORT
# override). Each scenario starts a fresh source and writes its data once; every engine run gets a fresh
# target cluster and its own target alias (west1, west2, ...). MM2 and ferry use the same topic names
# (east.<topic>, mm2-offsets.east.internal, heartbeats, east.checkpoints.internal on the target;
# mm2-offset-syncs.<target>.internal on the source), so nothing one engine wrote is seen by the next.
# The flows scenario also restarts the source per run (its `heartbeats` topic collects reverse heartbeats).
# Flow scenarios name the clusters eK (the source) and wK (the target), K = 1..n, one alias per flow.
# Both clusters are stopped at the end.
#
# Engines. ferry: `ferry run` with a flow east -> westN for the scenario's topic, ferry's defaults (lz4,
# linger 50 ms, 1 MB batches). MM2: dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker from the
# same Kafka jars), heap -Xms256m -Xmx1g, tasks.max = 2, producer.override linger.ms = 20,
# batch.size = 262144, compression.type = lz4, INFO logging; heartbeat herders only for the flows and their
# reverse pairs. ferry-eos: ferry with delivery = "exactly_once" in the flow. mm2-eos: MM2 as above plus
# <target>.exactly.once.source.support = enabled (the target herder's Connect worker: MM2 passes the worker
# only target-prefixed and a few top-level keys), dedicated.mode.enable.internal.rest = true on a free port
# and the source read read_committed: a transactional producer per task, a transaction per poll. limit: kafka-producer-perf-test into a fresh topic on the target (acks=all, linger 20 ms,
# 256 KiB batches, lz4) and kafka-consumer-perf-test from the source topic, started together; the limit is
# the slower of the two rates.
#
# Data: producer-perf with --payload-file: 10,000 distinct JSON-like payloads of the record size (fixed
# seed, ~/.cache/ferry-bench/payload-SIZE.txt), so that batches are not one payload repeated.
#
# Output: a table on stdout; a section appended to bench/results.md (date, machine, ferry revision, the
# command) and every run's figures in bench/raw/<stamp>-<scenario>.json. Logs of each run (ferry, MM2,
# watcher) stay in the work dir printed at the start (/tmp/ferry-bench-*).
#
# Requirements: JDK 17+, Python 3.11 (standard library only), Rust for the build; profile also needs
# perf (Debian: linux-perf) and inferno (cargo install inferno).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec python3 "$ROOT/scripts/bench/bench.py" "$@"
