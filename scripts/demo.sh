#!/usr/bin/env bash
# scripts/demo.sh: ferry in two minutes.
#
# Starts two local Kafka clusters (east 127.0.0.1:19092, west 127.0.0.1:29092) with scripts/kafka.sh,
# writes sample orders (keys, headers, a tombstone) to `orders` on east, runs ferry with the flows in
# flows/, shows the records arriving on west as `east.orders` and the flows as `ferry status` shows them.
# Then stops ferry gracefully.
# The clusters keep running so you can look around; `scripts/kafka.sh down` stops them.
#
#   scripts/demo.sh            run the demo
#   scripts/demo.sh --keep     leave ferry running too (stop it with: kill $(cat /tmp/ferry-demo/ferry.pid))
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WORK=${FERRY_DEMO_DIR:-/tmp/ferry-demo}
KEEP=0
[[ ${1:-} == --keep ]] && KEEP=1
mkdir -p "$WORK"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Fetching Kafka (once) and starting clusters east and west"
LIB=$(scripts/kafka.sh libdir)
scripts/kafka.sh up east west
EAST=127.0.0.1:19092
WEST=127.0.0.1:29092
tool() { java -cp "$LIB/*" -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.yaml" "$@"; }

say "Building ferry (release)"
cargo build --release --quiet
FERRY=${CARGO_TARGET_DIR:-$ROOT/target}/release/ferry
"$FERRY" validate --flows flows

say "Writing 1,000 sample orders to east/orders (3 partitions)"
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$EAST" --create --if-not-exists \
  --topic orders --partitions 3 >/dev/null
before=$(tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$EAST" --topic orders \
  | awk -F: '{s+=$3} END {print s+0}')
{
  for i in $(seq 1 999); do
    printf 'source:web,trace:t%s\tcustomer-%s\t{"order":%s,"amount":%s}\n' "$i" $((i % 17)) "$i" $((i * 7 % 500))
  done
  printf 'source:web\tcustomer-3\tnull\n'   # a tombstone for customer-3
} | tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$EAST" --topic orders \
      --reader-property parse.key=true --reader-property parse.headers=true \
      --reader-property key.separator=$'\t' \
      --reader-property null.marker=null
expected=$((before + 1000))

say "Running ferry with flows/ (logs: $WORK/ferry.log, metrics: http://127.0.0.1:9464/metrics)"
"$FERRY" run --flows flows --listen 127.0.0.1:9464 >"$WORK/ferry.log" 2>&1 &
echo $! >"$WORK/ferry.pid"
trap '[[ $KEEP == 1 ]] || kill -TERM "$(cat "$WORK/ferry.pid")" 2>/dev/null || true' EXIT
sleep 1
kill -0 "$(cat "$WORK/ferry.pid")" 2>/dev/null || { cat "$WORK/ferry.log" >&2; echo "ferry did not start" >&2; exit 1; }

say "Waiting for $expected records on west/east.orders"
deadline=$((SECONDS + 120))
copied=0
while ((SECONDS < deadline)); do
  copied=$(tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$WEST" --topic east.orders 2>/dev/null \
    | awk -F: '{s+=$3} END {print s+0}')
  ((copied >= expected)) && break
  sleep 1
done
echo "west/east.orders holds $copied records (expected $expected)"
((copied >= expected)) || { echo "records did not arrive; see $WORK/ferry.log" >&2; exit 1; }

say "The first records on west, with their keys, headers and timestamps"
tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$WEST" --topic east.orders \
  --partition 0 --offset earliest --max-messages 5 \
  --formatter-property print.key=true --formatter-property print.headers=true \
  --formatter-property print.timestamp=true 2>/dev/null

say "Metrics (all of them: curl http://127.0.0.1:9464/metrics)"
curl -s http://127.0.0.1:9464/metrics | grep -E '^ferry_(records|bytes)_copied_total' || true

say "The flows, as ferry status shows them (ferry status --watch redraws every 2 s)"
# The lag is measured every 5 s: wait until it shows everything copied.
deadline=$((SECONDS + 30))
until "$FERRY" status -o json | grep -Eq '"lag_records": *0[,}[:space:]]' || ((SECONDS >= deadline)); do sleep 1; done
"$FERRY" status

if [[ $KEEP == 1 ]]; then
  say "ferry keeps running (pid $(cat "$WORK/ferry.pid")); stop the clusters with: scripts/kafka.sh down"
else
  say "Stopping ferry gracefully; stop the clusters with: scripts/kafka.sh down"
fi
