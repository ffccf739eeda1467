#!/usr/bin/env bash
# scripts/bench.sh: copy throughput and memory of ferry on this machine.
#
# Starts the shell clusters (scripts/kafka.sh up east west), writes N records of S bytes to a fresh
# topic on east with Kafka's producer-perf tool, then runs a release ferry on a flow for that topic and
# measures the wall time until west holds every record, ferry's peak RSS, and its CPU time. Figures go to
# stdout and to bench/results.md (appended, with the date and the machine's core count).
#
#   scripts/bench.sh [RECORDS] [RECORD_BYTES] [PARTITIONS]      defaults: 1000000 100 6
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
N=${1:-1000000}
SIZE=${2:-100}
PARTS=${3:-6}
TOPIC=bench-$(date +%s)
WORK=$(mktemp -d)
trap 'kill -TERM "$(cat "$WORK/pid" 2>/dev/null)" 2>/dev/null || true' EXIT

LIB=$(scripts/kafka.sh libdir)
scripts/kafka.sh up east west >/dev/null
tool() { java -cp "$LIB/*" -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.yaml" "$@"; }
PORT=${FERRY_BENCH_PORT:-19464}
# Acknowledged copies as ferry counts them (a JVM tool per poll would cost seconds of CPU each time).
count() {
  curl -s "http://127.0.0.1:$PORT/metrics" | awk -v t="topic=\"$TOPIC\"" \
    '/^ferry_records_copied_total/ && index($0, t) {s+=$2} END {print s+0}'
}

cargo build --release --quiet
tool org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:19092 --create --topic "$TOPIC" \
  --partitions "$PARTS" >/dev/null
echo "producing $N records of $SIZE bytes to $TOPIC ($PARTS partitions)"
tool org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records "$N" --record-size "$SIZE" \
  --throughput -1 --producer-props bootstrap.servers=127.0.0.1:19092 acks=1 linger.ms=20 batch.size=262144 \
  | tail -1

mkdir -p "$WORK/flows"
cp flows/clusters.toml "$WORK/flows/"
printf '[[flows]]\nsource = "east"\ntarget = "west"\ntopics = ["%s"]\n' "$TOPIC" >"$WORK/flows/flow.toml"

start=$(date +%s.%N)
target/release/ferry run --flows "$WORK/flows" --listen "127.0.0.1:$PORT" >"$WORK/ferry.log" 2>&1 &
echo $! >"$WORK/pid"
pid=$(cat "$WORK/pid")
peak=0
while :; do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
  ((rss > peak)) && peak=$rss
  c=$(count)
  ((c >= N)) && break
  kill -0 "$pid" 2>/dev/null || { cat "$WORK/ferry.log"; exit 1; }
  sleep 0.2
done
end=$(date +%s.%N)
cpu=$(awk '{print ($14+$15)/100}' "/proc/$pid/stat")
secs=$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')
rate=$(awk -v n="$N" -v s="$secs" 'BEGIN {print n / s}')
mb=$(awk -v n="$N" -v z="$SIZE" -v s="$secs" 'BEGIN {print n * z / s / 1048576}')
# Cross-check on the target itself once: every record is there.
on_target=$(tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server 127.0.0.1:29092 --topic "east.$TOPIC" \
  2>/dev/null | awk -F: '{s+=$3} END {print s+0}')
((on_target >= N)) || { echo "target holds $on_target of $N records" >&2; exit 1; }
line=$(printf '| %s | %s | %d | %d | %.1f s | %.0f rec/s | %.1f MiB/s | %.0f MiB | %.1f s |' \
  "$(date -u +%F)" "$(nproc) cores" "$N" "$SIZE" "$secs" "$rate" "$mb" "$((peak / 1024))" "$cpu")
echo "records | size | wall (incl. startup) | records/s | payload MiB/s | peak RSS | ferry CPU"
echo "$line"
mkdir -p bench
[[ -f bench/results.md ]] || printf '%s\n%s\n' \
  "| date | machine | records | bytes | wall (incl. startup) | records/s | payload MiB/s | ferry peak RSS | ferry CPU |" \
  "|---|---|---|---|---|---|---|---|---|" >bench/results.md
echo "$line" >>bench/results.md
