#!/usr/bin/env bash
# scripts/toxiproxy.sh: a real TCP proxy that adds latency, bandwidth limits and cuts (Toxiproxy) between
# ferry and a source cluster, for the long-link tests (tests/integration/links.rs) and the `wan` bench.
#
# Toxiproxy is built from the Go module proxy (the version below is the only pin; the module proxy here
# serves v2.5.0 as the newest of github.com/Shopify/toxiproxy/v2), once, into the cache. A latency toxic
# delays every chunk by its own arrival time plus the latency, so it is a pipe with a delay, not a
# bottleneck: what it slows is what waits for round trips.
#
# Subcommands
#   fetch                 build toxiproxy-server into the cache; a no-op once done (needs Go)
#   path                  print the server binary's path (fetching first if needed)
#   run PORT              exec the server with its HTTP API on 127.0.0.1:PORT
#
# By hand, e.g. a source cluster behind 300 ms of round trip (150 ms each way):
#   scripts/toxiproxy.sh run 8474 &
#   curl -s localhost:8474/proxies -d '{"name":"east","listen":"127.0.0.1:19192","upstream":"127.0.0.1:19094"}'
#   curl -s localhost:8474/proxies/east/toxics -d '{"type":"latency","stream":"downstream","attributes":{"latency":150}}'
#   curl -s localhost:8474/proxies/east/toxics -d '{"type":"latency","stream":"upstream","attributes":{"latency":150}}'
# The cluster must advertise the proxy's address to clients that come through it: scripts/kafka.sh's
# FERRY_KAFKA_LINK (a second listener, LINK, bound on one port and advertised on the proxy's).
#
# Environment
#   FERRY_KAFKA_CACHE     cache root (default ~/.cache/ferry); the server in <cache>/toxiproxy-<version>
set -euo pipefail

TOXIPROXY_VERSION=v2.5.0
CACHE=${FERRY_KAFKA_CACHE:-$HOME/.cache/ferry}
DIR=$CACHE/toxiproxy-$TOXIPROXY_VERSION
BIN=$DIR/toxiproxy-server

# Go's own installer puts it here, not always on PATH.
PATH=$PATH:/usr/local/go/bin

die() { echo "toxiproxy.sh: $*" >&2; exit 1; }
log() { echo "toxiproxy.sh: $*" >&2; }

do_fetch() {
  [[ -x $BIN ]] && return 0
  mkdir -p "$CACHE"
  exec 9>"$DIR.lock"
  flock 9 # concurrent callers: the first builds, the others wait and find the binary
  if [[ -x $BIN ]]; then exec 9>&-; return 0; fi
  command -v go >/dev/null || die "fetch needs Go (https://go.dev/dl, or Debian's golang-go) to build Toxiproxy"
  local t0 tmp
  t0=$(date +%s%3N)
  tmp=$CACHE/toxiproxy.tmp.$$
  rm -rf "$tmp" && mkdir -p "$tmp"
  log "building Toxiproxy $TOXIPROXY_VERSION into $DIR"
  # Three tries: the module proxy has answered a TLS handshake timeout here once.
  local try
  for try in 1 2 3; do
    GOBIN=$tmp GOFLAGS=-mod=mod go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
      >"$tmp/go.log" 2>&1 && break
    (( try < 3 )) || { cat "$tmp/go.log" >&2; rm -rf "$tmp"; die "go install of toxiproxy failed (3 tries)"; }
    log "go install failed (try $try), trying again: $(tail -n 1 "$tmp/go.log")"
    sleep 5
  done
  mkdir -p "$DIR"
  mv "$tmp/server" "$BIN"
  rm -rf "$tmp"
  exec 9>&-
  log "built Toxiproxy $TOXIPROXY_VERSION in $(( $(date +%s%3N) - t0 )) ms"
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}
shift || true
case $cmd in
  fetch) do_fetch ;;
  path) do_fetch; echo "$BIN" ;;
  run) (( $# == 1 )) || die "usage: run PORT"; do_fetch; exec "$BIN" -host 127.0.0.1 -port "$1" ;;
  *) usage ;;
esac
