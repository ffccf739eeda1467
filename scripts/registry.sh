#!/usr/bin/env bash
# scripts/registry.sh: a real schema registry for ferry's schema tests and demo, without Docker.
#
# Apicurio Registry speaks the Confluent Schema Registry API (/subjects, /schemas/ids/N, /config) under
# /apis/ccompat/v7, and its all-in-one build is on Maven Central (io.apicurio:apicurio-registry-app,
# classifier `all`, type tar.gz, ~109 MB; the version below is the only pin: 3.1 and later need Java 21).
# Storage is in memory: a registry started here forgets everything when it stops. Measured on the 2-core
# test machine: ready ~2-15 s after spawn (the longer under load), ~250 MiB RSS.
#
# Subcommands
#   fetch              download and unpack the registry into the cache; a no-op once done
#   home               print the cached registry dir (fetching first if needed)
#   run PORT           exec the registry on 127.0.0.1:PORT; logs to stdout (what the test harness runs)
#   up NAME PORT       start a registry in the background under the run dir, wait until it answers,
#                      print NAME=URL (the base URL of its Confluent-compatible API)
#   down [NAME...]     stop registries started by `up` (default: all of them)
#
# Environment
#   FERRY_KAFKA_CACHE       cache root (default ~/.cache/ferry); the registry in <cache>/apicurio-<version>
#   FERRY_REGISTRY_RUN      run dir of `up`/`down` (default /tmp/ferry-registries)
#   FERRY_REGISTRY_HEAP     default "-Xms32m -Xmx256m"
#   FERRY_REGISTRY_TLS_CERT, FERRY_REGISTRY_TLS_KEY
#                           `run` serves HTTPS only on PORT with this certificate and key (PEM files)
#   JAVA / JAVA_HOME        the java binary (default: java on PATH)
set -euo pipefail

APICURIO_VERSION=3.0.9
CACHE=${FERRY_KAFKA_CACHE:-$HOME/.cache/ferry}
HOME_DIR=$CACHE/apicurio-$APICURIO_VERSION
JAR=$HOME_DIR/apicurio-registry-app-$APICURIO_VERSION-runner.jar
RUN_DIR=${FERRY_REGISTRY_RUN:-/tmp/ferry-registries}
JAVA=${JAVA:-${JAVA_HOME:+$JAVA_HOME/bin/java}}
JAVA=${JAVA:-java}
HEAP=${FERRY_REGISTRY_HEAP:--Xms32m -Xmx256m}
API=/apis/ccompat/v7

die() { echo "registry.sh: $*" >&2; exit 1; }
log() { echo "registry.sh: $*" >&2; }

do_fetch() {
  [[ -f $HOME_DIR/fetched ]] && return 0
  mkdir -p "$CACHE"
  exec 9>"$HOME_DIR.lock"
  flock 9 # concurrent test binaries: the first fetches, the others wait and find the stamp
  if [[ -f $HOME_DIR/fetched ]]; then exec 9>&-; return 0; fi
  local tmp=$CACHE/apicurio.tmp.$$ t0
  t0=$(date +%s)
  rm -rf "$tmp" && mkdir -p "$tmp"
  log "fetching Apicurio Registry $APICURIO_VERSION into $HOME_DIR"
  mvn -q -B dependency:copy -Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
    -DoutputDirectory="$tmp" >"$tmp/mvn.log" 2>&1 \
    || { cat "$tmp/mvn.log" >&2; rm -rf "$tmp"; die "mvn dependency:copy of apicurio-registry-app failed"; }
  mkdir -p "$tmp/home"
  tar xzf "$tmp/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz" -C "$tmp/home" || die "unpacking failed"
  [[ -f $tmp/home/$(basename "$JAR") ]] || die "the archive holds no $(basename "$JAR")"
  rm -rf "$HOME_DIR"
  mv "$tmp/home" "$HOME_DIR"
  rm -rf "$tmp"
  touch "$HOME_DIR/fetched"
  exec 9>&-
  log "fetched Apicurio Registry $APICURIO_VERSION in $(( $(date +%s) - t0 )) s"
}

do_run() { # PORT
  local port=$1 listen
  [[ -f $HOME_DIR/fetched ]] || die "the registry is not fetched; run: $0 fetch"
  listen=(-Dquarkus.http.port="$port")
  if [[ -n ${FERRY_REGISTRY_TLS_CERT:-} ]]; then
    # HTTPS on PORT; plain HTTP refused (its port is a free one the JVM picks).
    listen=(-Dquarkus.http.port=0 -Dquarkus.http.ssl-port="$port" -Dquarkus.http.insecure-requests=disabled
      -Dquarkus.http.ssl.certificate.files="$FERRY_REGISTRY_TLS_CERT"
      -Dquarkus.http.ssl.certificate.key-files="${FERRY_REGISTRY_TLS_KEY:?FERRY_REGISTRY_TLS_KEY with FERRY_REGISTRY_TLS_CERT}")
  fi
  # shellcheck disable=SC2086
  exec "$JAVA" $HEAP -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:+ExitOnOutOfMemoryError \
    -Dquarkus.http.host=127.0.0.1 "${listen[@]}" -Dquarkus.log.level=WARN \
    -Dquarkus.log.category.\"io.apicurio\".level=WARN -Djava.io.tmpdir="${TMPDIR:-/tmp}" \
    -jar "$JAR"
}

do_up() { # NAME PORT
  local name=$1 port=$2 dir=$RUN_DIR/$1 i
  do_fetch
  if [[ -f $dir/pid ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    echo "$name=http://127.0.0.1:$(cat "$dir/port")$API"; return 0
  fi
  mkdir -p "$dir"
  echo "$port" >"$dir/port"
  nohup "$0" run "$port" >"$dir/registry.log" 2>&1 &
  echo $! >"$dir/pid"
  for i in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$port$API/subjects" >/dev/null 2>&1; then
      echo "$name=http://127.0.0.1:$port$API"; return 0
    fi
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || { tail -20 "$dir/registry.log" >&2; die "registry $name exited"; }
    sleep 0.1
  done
  die "registry $name did not answer on port $port within 60 s (log: $dir/registry.log)"
}

do_down() {
  local names=("$@") name pid
  if ((${#names[@]} == 0)) && [[ -d $RUN_DIR ]]; then
    mapfile -t names < <(ls "$RUN_DIR")
  fi
  for name in "${names[@]}"; do
    [[ -f $RUN_DIR/$name/pid ]] || continue
    pid=$(cat "$RUN_DIR/$name/pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -rf "${RUN_DIR:?}/$name"
  done
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}
shift || true
case $cmd in
  fetch) do_fetch ;;
  home) do_fetch; echo "$HOME_DIR" ;;
  run) (( $# == 1 )) || die "usage: run PORT"; do_run "$@" ;;
  up) (( $# == 2 )) || die "usage: up NAME PORT"; do_up "$@" ;;
  down) do_down "$@" ;;
  *) usage ;;
esac
