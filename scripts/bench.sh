#!/usr/bin/env bash
# scripts/bench.sh: copy throughput and memory of ferry, and of MirrorMaker 2 on the same data.
#
# Starts the shell clusters (scripts/kafka.sh up east west), writes N records of S bytes to a fresh
# topic on east with Kafka's producer-perf tool, then runs the replicator on a flow east->west for that
# topic and measures: wall time from start until west holds every record (startup included), the time
# from the first copied record to the last (the copy rate), peak RSS and CPU time of the replicator.
# Figures go to stdout and are appended to bench/results.md.
#
#   scripts/bench.sh [--mm2] [RECORDS] [RECORD_BYTES] [PARTITIONS]     defaults: 1000000 100 6
#
# ferry's progress is read from its own /metrics (cheap, 0.2 s resolution); MM2's from west's log-end
# offsets with Kafka's GetOffsetShell (a JVM per poll: about 1.5 s resolution, and it costs CPU on this
# 2-core machine while MM2 runs, so MM2's figures are slightly pessimistic).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ENGINE=ferry
if [[ ${1:-} == --mm2 ]]; then
  ENGINE=mm2
  shift
fi
N=${1:-1000000}
SIZE=${2:-100}
PARTS=${3:-6}
TOPIC=bench-$ENGINE-$(date +%s)
PORT=${FERRY_BENCH_PORT:-19464}
WORK=$(mktemp -d)
trap 'kill -TERM "$(cat "$WORK/pid" 2>/dev/null)" 2>/dev/null || true' EXIT

LIB=$(scripts/kafka.sh libdir)
scripts/kafka.sh up east west >/dev/null
tool() { java -cp "$LIB/*" -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.yaml" "$@"; }
on_target() {  # 0 until the remote topic exists (the tool then fails)
  { tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server 127.0.0.1:29092 --topic "east.$TOPIC" 2>/dev/null \
    || true; } | awk -F: '{s+=$3} END {print s+0}'
}
count() {
  if [[ $ENGINE == ferry ]]; then
    curl -s "http://127.0.0.1:$PORT/metrics" | awk -v t="topic=\"$TOPIC\"" \
      '/^ferry_records_copied_total/ && index($0, t) {s+=$2} END {print s+0}'
  else
    on_target
  fi
}

tool org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:19092 --create --topic "$TOPIC" \
  --partitions "$PARTS" >/dev/null
echo "producing $N records of $SIZE bytes to $TOPIC ($PARTS partitions)"
tool org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records "$N" --record-size "$SIZE" \
  --throughput -1 --producer-props bootstrap.servers=127.0.0.1:19092 acks=1 linger.ms=20 batch.size=262144 \
  | tail -1

if [[ $ENGINE == ferry ]]; then
  cargo build --release --quiet
  mkdir -p "$WORK/flows"
  cp flows/clusters.toml "$WORK/flows/"
  printf '[[flows]]\nsource = "east"\ntarget = "west"\ntopics = ["%s"]\n' "$TOPIC" >"$WORK/flows/flow.toml"
  start=$(date +%s.%N)
  target/release/ferry run --flows "$WORK/flows" --listen "127.0.0.1:$PORT" >"$WORK/run.log" 2>&1 &
else
  cat >"$WORK/mm2.properties" <<EOF
clusters = east, west
east.bootstrap.servers = 127.0.0.1:19092
west.bootstrap.servers = 127.0.0.1:29092
east->west.enabled = true
west->east.enabled = false
topics = $TOPIC
tasks.max = 1
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
west.offset.storage.replication.factor = 1
west.status.storage.replication.factor = 1
west.config.storage.replication.factor = 1
sync.topic.acls.enabled = false
EOF
  start=$(date +%s.%N)
  java -Xms256m -Xmx1g -cp "$LIB/*" -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.yaml" \
    org.apache.kafka.connect.mirror.MirrorMaker "$WORK/mm2.properties" >"$WORK/run.log" 2>&1 &
fi
echo $! >"$WORK/pid"
pid=$(cat "$WORK/pid")
peak=0
first=""
while :; do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
  ((rss > peak)) && peak=$rss
  c=$(count)
  [[ -z $first ]] && ((c > 0)) && first=$(date +%s.%N)
  ((c >= N)) && break
  kill -0 "$pid" 2>/dev/null || { tail -50 "$WORK/run.log"; exit 1; }
  sleep 0.2
done
end=$(date +%s.%N)
cpu=$(awk '{print ($14+$15)/100}' "/proc/$pid/stat")
got=$(on_target)
((got >= N)) || { echo "target holds $got of $N records" >&2; exit 1; }
wall=$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')
copy=$(awk -v a="$first" -v b="$end" 'BEGIN {print b - a}')
rate=$(awk -v n="$N" -v s="$copy" 'BEGIN {print (s > 0 ? n / s : 0)}')
line=$(printf '| %s | %s | %s | %d | %d | %.1f s | %.1f s | %.0f rec/s | %d MiB | %.1f s |' \
  "$(date -u +%F)" "$ENGINE" "$(nproc) cores" "$N" "$SIZE" "$wall" "$copy" "$rate" "$((peak / 1024))" "$cpu")
echo "| date | engine | machine | records | bytes | wall incl. startup | first to last copy | copy rate | peak RSS | CPU |"
echo "$line"
mkdir -p bench
[[ -f bench/results.md ]] && head -1 bench/results.md | grep -q engine || printf '%s\n%s\n' \
  "| date | engine | machine | records | bytes | wall incl. startup | first to last copy | copy rate | peak RSS | CPU |" \
  "|---|---|---|---|---|---|---|---|---|---|" >bench/results.md
echo "$line" >>bench/results.md
