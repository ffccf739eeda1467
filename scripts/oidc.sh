#!/usr/bin/env bash
# scripts/oidc.sh: a real OpenID Connect provider (Keycloak) for ferry's OIDC tests, without Docker.
#
# Why Keycloak and not no.nav.security:mock-oauth2-server: the tests need "a wrong client secret is a
# named error", and mock-oauth2-server (2.1.10, and still 6.x) never checks a client's secret: its
# client_credentials grant issues a token to any Basic credentials, and its token callbacks match form
# parameters only, while librdkafka sends the client id and secret in the Authorization header.
# Keycloak rejects them with 401 invalid_client. Measured on the 2-core test machine: mock-oauth2-server
# ready in 1.5 s at 125 MiB RSS; Keycloak 26.4 `start --optimized` (after a one-time `kc.sh build` at
# fetch time, ~12 s) ready in ~18 s with the realm imported, ~500 MiB RSS. One provider per test binary
# (tests/integration/oidc.rs), started in parallel with its brokers, so the cost is paid once.
#
# Keycloak's distribution zip comes from Maven Central (org.keycloak:keycloak-quarkus-dist, the version
# below is the only pin) through `mvn dependency:copy`; it is unpacked and built once into the cache.
#
# Subcommands
#   fetch                    download, unpack and build Keycloak into the cache; a no-op once done
#   home                     print the cached Keycloak dir (fetching first if needed)
#   prepare DIR REALM_JSON   make DIR a Keycloak home of its own (links to the cached lib/, conf/,
#                            themes/, providers/; its own data/) with REALM_JSON to import
#   run DIR PORT             exec Keycloak for the home DIR on 127.0.0.1:PORT (HTTP), importing the
#                            realm; logs to stdout. Token grants and failed client logins are logged
#                            (org.keycloak.events at DEBUG: `type="CLIENT_LOGIN"` /
#                            `type="CLIENT_LOGIN_ERROR"` lines), which is how tests count tokens.
#
# Environment
#   FERRY_KAFKA_CACHE     cache root (default ~/.cache/ferry); Keycloak in <cache>/keycloak-<version>
#   FERRY_OIDC_HEAP_OPTS  default "-Xms64m -Xmx512m"
#   JAVA / JAVA_HOME      the java binary (default: java on PATH); Keycloak 26.4 runs on Java 17
set -euo pipefail

KEYCLOAK_VERSION=26.4.7
CACHE=${FERRY_KAFKA_CACHE:-$HOME/.cache/ferry}
KC=$CACHE/keycloak-$KEYCLOAK_VERSION
STAMP=$KC/fetched
JAVA=${JAVA:-${JAVA_HOME:+$JAVA_HOME/bin/java}}
JAVA=${JAVA:-java}
HEAP_OPTS=${FERRY_OIDC_HEAP_OPTS:--Xms64m -Xmx512m}
# Build-time options of `kc.sh build`; `run` must not contradict them (or Keycloak rebuilds at start).
BUILD_OPTS=(--db=dev-mem --health-enabled=false --metrics-enabled=false)

die() { echo "oidc.sh: $*" >&2; exit 1; }
log() { echo "oidc.sh: $*" >&2; }
now_ms() { date +%s%3N; }

stamp_content() { printf 'keycloak=%s build=%s java=%s\n' "$KEYCLOAK_VERSION" "${BUILD_OPTS[*]}" \
  "$("$JAVA" -version 2>&1 | sed -n 1p)"; }
fetched() { [[ -f $STAMP && $(cat "$STAMP") == "$(stamp_content)" ]]; }

do_fetch() {
  fetched && return 0
  mkdir -p "$CACHE"
  exec 9>"$KC.lock"
  flock 9 # concurrent test binaries: the first fetches, the others wait and find the stamp
  if fetched; then exec 9>&-; return 0; fi
  local t0 tmp
  t0=$(now_ms)
  tmp=$CACHE/keycloak.tmp.$$
  rm -rf "$tmp" && mkdir -p "$tmp"
  log "fetching Keycloak $KEYCLOAK_VERSION into $KC"
  mvn -q -B dependency:copy -Dartifact="org.keycloak:keycloak-quarkus-dist:$KEYCLOAK_VERSION:zip" \
    -DoutputDirectory="$tmp" >"$tmp/mvn.log" 2>&1 \
    || { cat "$tmp/mvn.log" >&2; rm -rf "$tmp"; die "mvn dependency:copy of keycloak-quarkus-dist failed"; }
  command -v unzip >/dev/null || die "fetch needs unzip (Debian: unzip)"
  unzip -q "$tmp/keycloak-quarkus-dist-$KEYCLOAK_VERSION.zip" -d "$tmp" || die "unzip failed"
  rm -rf "$KC"
  mv "$tmp/keycloak-$KEYCLOAK_VERSION" "$KC"
  rm -rf "$tmp"
  # The Quarkus augmentation: done once here so that every `run` is a `start --optimized` (~10 s less).
  "$KC/bin/kc.sh" build "${BUILD_OPTS[@]}" >"$KC/build.log" 2>&1 \
    || { cat "$KC/build.log" >&2; die "kc.sh build failed"; }
  stamp_content >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
  exec 9>&-
  log "fetched and built Keycloak $KEYCLOAK_VERSION in $(( $(now_ms) - t0 )) ms"
}

# A Keycloak home of one's own: Keycloak keeps its state (the import dir, tmp files) under
# kc.home.dir/data, so several providers (test binaries) can run from one cached build at once.
do_prepare() { # DIR REALM_JSON
  local dir=$1 realm=$2 d
  do_fetch
  mkdir -p "$dir/data/import"
  for d in lib conf themes providers; do ln -sfn "$KC/$d" "$dir/$d"; done
  cp "$realm" "$dir/data/import/realm.json"
}

# The java command of kc.sh, run directly so that kc.home.dir is DIR (kc.sh takes its home from its
# own resolved path) and so that the pid the caller gets is the JVM's.
do_run() { # DIR PORT
  local dir=$1 port=$2
  [[ -d $dir/data/import && -e $dir/lib ]] || die "$dir is no Keycloak home; run: $0 prepare $dir REALM_JSON"
  fetched || die "Keycloak is not fetched; run: $0 fetch"
  export KC_BOOTSTRAP_ADMIN_USERNAME=${KC_BOOTSTRAP_ADMIN_USERNAME:-kcadmin}
  export KC_BOOTSTRAP_ADMIN_PASSWORD=${KC_BOOTSTRAP_ADMIN_PASSWORD:-kcadmin-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')}
  # shellcheck disable=SC2086
  exec "$JAVA" $HEAP_OPTS -XX:MetaspaceSize=96M -XX:MaxMetaspaceSize=256m -XX:+ExitOnOutOfMemoryError \
    -XX:+UseG1GC -XX:TieredStopAtLevel=1 -Dfile.encoding=UTF-8 -Duser.language=en -Duser.country=US -Djava.security.egd=file:/dev/urandom \
    --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED \
    --add-opens=java.base/java.security=ALL-UNNAMED \
    -Djava.util.concurrent.ForkJoinPool.common.threadFactory=io.quarkus.bootstrap.forkjoin.QuarkusForkJoinWorkerThreadFactory \
    -Dkc.home.dir="$dir" -Djava.io.tmpdir="$dir/data" -cp "$KC/lib/quarkus-run.jar" \
    io.quarkus.bootstrap.runner.QuarkusEntryPoint start --optimized \
    --http-enabled=true --http-host=127.0.0.1 --http-port="$port" --hostname-strict=false \
    --import-realm --log=console --log-console-color=false \
    --log-level=INFO,org.keycloak.events:debug
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}
shift || true
case $cmd in
  fetch) do_fetch ;;
  home) do_fetch; echo "$KC" ;;
  prepare) (( $# == 2 )) || die "usage: prepare DIR REALM_JSON"; do_prepare "$@" ;;
  run) (( $# == 2 )) || die "usage: run DIR PORT"; do_run "$@" ;;
  *) usage ;;
esac
