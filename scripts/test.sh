#!/usr/bin/env bash
# scripts/test.sh: the whole test suite, as CI runs it.
#   1. fetch the Kafka jars once (scripts/kafka.sh fetch; a no-op when cached), and Keycloak, the OIDC
#      provider of tests/oidc.rs (scripts/oidc.sh fetch: download and build once, ~20 s)
#   2. lint: rustfmt and clippy with warnings as errors
#   3. cargo test: unit tests beside the code, then integration tests in tests/ against real KRaft
#      clusters that the harness (tests/support) starts and stops by itself.
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh --test copy`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/kafka.sh fetch
scripts/oidc.sh fetch
cargo fmt --check
cargo clippy --locked --all-targets --features failpoints -- -D warnings
cargo test --locked --features failpoints "$@"
