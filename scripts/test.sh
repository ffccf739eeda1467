#!/usr/bin/env bash
# scripts/test.sh: the whole test suite, as CI runs it.
#   1. fetch the Kafka jars once (scripts/kafka.sh fetch; a no-op when cached), and Keycloak, the OIDC
#      provider of the OIDC tests (scripts/oidc.sh fetch: download and build once, ~20 s)
#   2. lint: rustfmt and clippy with warnings as errors
#   3. cargo test: the unit tests beside the code, then the integration tests (one binary,
#      tests/integration/, a module per file) against real KRaft clusters that the harness starts and
#      stops by itself, FERRY_TEST_THREADS of them at a time (default 6: most of a test is waiting; at 4 the
#      tests kept one of the two cores busy on average)
#   4. a table of the ten slowest tests (also after a failure), what the harness noticed on the way (a
#      broker that answered late, target/test-notes.log), then, after a failure, each panic's first
#      lines (target/test-output.log holds the whole output)
#
# scripts/test.sh --quick: the inner loop, minutes instead of the suite's 25: format, lint, the unit
# tests and one end-to-end copy against real brokers.
#
# Other arguments filter the tests by name, as cargo test's filter does: `scripts/test.sh copy::` runs the
# module tests/integration/copy.rs (and the unit tests whose names contain it), `scripts/test.sh
# copy::ten_thousand` one test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=false
if [[ "${1:-}" == "--quick" ]]; then
  quick=true
  shift
fi

scripts/kafka.sh fetch
cargo fmt --check
cargo clippy --locked --all-targets --features failpoints -- -D warnings

if $quick; then
  cargo test --locked --features failpoints --lib
  exec cargo test --locked --features failpoints --test integration -- --exact copy::ten_thousand_records_arrive_byte_identical_in_partition_order
fi

scripts/oidc.sh fetch
times="${CARGO_TARGET_DIR:-target}/test-times.tsv"
[[ "$times" == /* ]] || times="$PWD/$times"
mkdir -p "$(dirname "$times")"
rm -f "$times"
out="$(dirname "$times")/test-output.log"
notes="$(dirname "$times")/test-notes.log"
rm -f "$notes"
status=0
FERRY_TEST_TIMES="$times" FERRY_TEST_NOTES="$notes" cargo test --locked --features failpoints -- --test-threads "${FERRY_TEST_THREADS:-6}" "$@" \
  2>&1 | tee "$out" || status=$?
if [[ -s "$times" ]]; then
  echo
  echo "the ten slowest tests (seconds, from their first use of the test harness):"
  # awk reads to the end: `head` would close the pipe early, and sort's SIGPIPE fails the script
  # under pipefail (it did once, with every test passed).
  sort -rn "$times" | awk -F'\t' 'NR <= 10 { printf "  %7.1f  %s\n", $1, $2 }'
  # The third column is when a test started (seconds from the first): test time over the span from the
  # first start to the last end is how many tests ran at once on average (at most the thread count).
  awk -F'\t' '{ n++; s += $1; if ($3 + $1 > last) last = $3 + $1 }
       END { printf "  %d tests timed, %.0f s of test time in all, over %.0f s: %.1f at a time on average\n", n, s, last, (last > 0 ? s / last : 0) }' "$times"
fi
if [[ -s "$notes" ]]; then
  echo
  echo "what the harness noticed on the way (first 40 lines of $notes):"
  awk 'NR <= 40 { print "  " substr($0, 1, 300) }' "$notes"
fi
if ((status != 0)); then
  # What failed, last: a CI log that keeps only its tail still says why (cargo prints a failed test's
  # panic before the ferry log its harness dumps while unwinding).
  echo
  echo "why the failed tests failed (the panics, first lines; the whole output is in $out):"
  awk 'n >= 80 { exit }
       / panicked at / { grab = 6; print "  " substr($0, 1, 300); n++; next }
       grab > 0 { if ($0 == "" || $0 ~ /^note: / || $0 ~ /^stack backtrace/) { grab = 0; next }
                  print "    " substr($0, 1, 300); n++; grab-- }' "$out"
fi
exit "$status"
