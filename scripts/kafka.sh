#!/usr/bin/env bash
# scripts/kafka.sh: a real Apache Kafka test bed for ferry, without Docker.
#
# Kafka's jars come from Maven Central through ../pom.xml (the Kafka version is pinned there, in the
# `kafka.version` property, and nowhere else). Each cluster is one JVM running a combined
# broker+controller KRaft node (node.id=1, static quorum of one voter) on loopback.
#
# Subcommands
#   fetch                 copy the Kafka jars into the cache, make the storage template and the
#                         class-data-sharing (CDS) archive; a no-op once done (see "Cache" below)
#   libdir                print the lib dir (fetching first if needed)
#   up [NAME...]          start clusters (default: east west), wait until each serves metadata,
#                         print NAME=BOOTSTRAP lines; already running clusters are left alone
#   down [NAME...]        stop clusters (default: every cluster under the run dir): SIGTERM, SIGKILL
#                         after FERRY_KAFKA_STOP_TIMEOUT seconds; removes their run dirs
#   status [NAME...]      one line per cluster: name, state, pid, bootstrap, RSS
#   log NAME              print the broker log of a cluster started by `up`
# Used by tests/integration/support (so that the Rust harness and this script share one definition):
#   broker-cmd            print the java command line of a broker, one argument per line, without
#                         the trailing server.properties path
#   prepare DIR PORT CONTROLLER_PORT
#                         write DIR/server.properties for a node on 127.0.0.1:PORT (controller on
#                         CONTROLLER_PORT) with its data in DIR/data, and format DIR/data
# Secured clusters (tests/integration/support/cluster.rs `Cluster::start_secured`; usable by hand, see below):
#   certs DIR [CLIENT...] make a throwaway CA and PEM files in DIR: the broker's keystore, one client
#                         certificate per CLIENT (CN=CLIENT), and an untrusted CA with a client
#                         certificate of its own. EC P-256 keys, unencrypted; valid 30 days
#                         (FERRY_TLS_DAYS)
#   prepare-secure DIR PORT CONTROLLER_PORT INTERNAL_PORT MODE [USER=PASSWORD...|REALM]
#                         like prepare, but clients get a secured listener on PORT. MODE is sasl_ssl
#                         (SASL_SSL with SCRAM-SHA-512/256, PLAIN and OAUTHBEARER with unsecured JWTs),
#                         sasl_oidc (SASL_SSL with OAUTHBEARER only, tokens validated against an
#                         identity provider's JWKS: FERRY_OIDC_JWKS_URL, FERRY_OIDC_ISSUER,
#                         FERRY_OIDC_AUDIENCE (default kafka), FERRY_OIDC_PRINCIPAL_CLAIM (default
#                         azp), FERRY_KAFKA_REAUTH_MS (connections.max.reauth.ms, default 10000); the
#                         broker JVM then needs the KAFKA_OPTS written to DIR/kafka_opts),
#                         mtls (SSL, client certificate required) or gssapi (SASL_PLAINTEXT with
#                         Kerberos in REALM; needs DIR/kafka.keytab, see gssapi_properties),
#                         either with "+acl" appended for the StandardAuthorizer. Needs DIR/tls made
#                         by `certs`. Each USER=PASSWORD becomes a SCRAM credential (both hashes) at format
#                         time and a PLAIN user, so DIR/data is then formatted by kafka-storage (a JVM, 1-3 s), not the template
#
# Secured clusters
#   Files of `certs DIR`: ca.pem (what clients trust), broker.pem (the broker's PEM keystore: key,
#   then the certificate for IP:127.0.0.1 and DNS:localhost), client-<CLIENT>.pem and .key,
#   client-<CLIENT>.keystore.pem (both in one file, a PEM keystore for Java clients), untrusted-ca.pem,
#   and untrusted-client.pem and .key (CN=admin, signed by the untrusted CA).
#   The listener on PORT (named CLIENT) is the only one meant for clients. The node's own listeners
#   stay PLAINTEXT on loopback: INTERNAL (inter-broker, on INTERNAL_PORT) and CONTROLLER. Their
#   principal is User:ANONYMOUS, which "+acl" makes a super user besides User:admin (the node must
#   be allowed to talk to itself). mtls maps a certificate subject "CN=alice,OU=...,O=..." to the
#   principal User:alice.
#   librdkafka clients: security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.username,
#   sasl.password and ssl.ca.location=<tls>/ca.pem; or security.protocol=SSL, ssl.ca.location,
#   ssl.certificate.location=<tls>/client-<CLIENT>.pem, ssl.key.location=<tls>/client-<CLIENT>.key.
#   By hand, e.g. a SASL_SSL node with ACLs on ports 39092 (clients), 39093 (controller), 39094:
#     scripts/kafka.sh certs /tmp/k/tls admin alice
#     scripts/kafka.sh prepare-secure /tmp/k 39092 39093 39094 sasl_ssl+acl admin=admin-pw alice=alice-pw
#     mapfile -t java < <(scripts/kafka.sh broker-cmd); "${java[@]}" /tmp/k/server.properties
#   and for Kafka's tools, a --command-config file with security.protocol=SASL_SSL,
#   sasl.mechanism=SCRAM-SHA-512, ssl.truststore.type=PEM, ssl.truststore.location=/tmp/k/tls/ca.pem
#   and sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required
#   username="admin" password="admin-pw";
#
# Ports (fixed so that a shell user can type them):
#   east: 127.0.0.1:19092 (controller 19093)      west: 127.0.0.1:29092 (controller 29093)
#   Any other NAME needs FERRY_KAFKA_PORT_<NAME> (NAME upper-cased, '-' and '.' become '_');
#   FERRY_KAFKA_CONTROLLER_PORT_<NAME> defaults to that port + 1. Both also override east/west.
#
# Environment
#   FERRY_KAFKA_CACHE          cache root (default ~/.cache/ferry); jars in <cache>/kafka-<version>/lib
#   FERRY_KAFKA_RUN            state of `up` clusters (default /tmp/ferry-kafka): <run>/<name>/ holds
#                              server.properties, data/, server.log and pid
#   FERRY_KAFKA_HEAP_OPTS      default "-Xms256m -Xmx1g"
#   FERRY_KAFKA_JVM_OPTS       default "-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError
#                              -Djava.awt.headless=true"
#   KAFKA_OPTS                 extra JVM arguments appended after the two above
#   FERRY_KAFKA_CDS            1 (default) uses the CDS archive made by `fetch` (starts the broker
#                              ~1.5 s faster); 0 disables it
#   FERRY_KAFKA_FORMAT         template (default): format a data dir by copying the bootstrap.checkpoint
#                              that kafka-storage wrote at fetch time and writing meta.properties (no
#                              JVM); tool: run kafka-storage format every time (~1-1.5 s more)
#   FERRY_KAFKA_LINK           BIND_PORT:ADVERTISED_PORT: a plain node gets a second listener, LINK, bound on
#                              BIND_PORT and advertised on ADVERTISED_PORT, where a latency proxy listens
#                              (scripts/toxiproxy.sh); its PLAINTEXT listener stays direct
#   FERRY_KAFKA_READY_TIMEOUT  seconds `up` waits for a broker (default 90)
#   FERRY_KAFKA_STOP_TIMEOUT   seconds `down` waits after SIGTERM before SIGKILL (default 20)
#   FERRY_TLS_DAYS             validity of the CAs and certificates `certs` makes (default 30)
#   JAVA / JAVA_HOME           the java binary (default: java on PATH)
#
# Cache
#   <cache>/kafka-<version>/lib                 the jars
#   <cache>/kafka-<version>/bootstrap.checkpoint metadata bootstrap written by `kafka-storage format`
#   <cache>/kafka-<version>/kafka.jsa           dynamic CDS archive recorded from one broker start
#   <cache>/kafka-<version>/fetched             stamp: Kafka version, pom.xml and java fingerprints.
#                              Written last; `fetch` is a no-op while it matches. Delete it to refetch.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
POM=$ROOT/pom.xml
LOG4J_CONFIG=$ROOT/scripts/kafka/log4j2.yaml
VERSION=$(sed -n 's:.*<kafka\.version>\(.*\)</kafka\.version>.*:\1:p' "$POM" | sed -n 1p)
[[ -n $VERSION ]] || { echo "kafka.sh: no kafka.version in $POM" >&2; exit 1; }

CACHE=${FERRY_KAFKA_CACHE:-$HOME/.cache/ferry}
KHOME=$CACHE/kafka-$VERSION
LIB=$KHOME/lib
STAMP=$KHOME/fetched
TEMPLATE=$KHOME/bootstrap.checkpoint
JSA=$KHOME/kafka.jsa
RUN=${FERRY_KAFKA_RUN:-/tmp/ferry-kafka}
JAVA=${JAVA:-${JAVA_HOME:+$JAVA_HOME/bin/java}}
JAVA=${JAVA:-java}
HEAP_OPTS=${FERRY_KAFKA_HEAP_OPTS:--Xms256m -Xmx1g}
JVM_OPTS=${FERRY_KAFKA_JVM_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true}
READY_TIMEOUT=${FERRY_KAFKA_READY_TIMEOUT:-90}
STOP_TIMEOUT=${FERRY_KAFKA_STOP_TIMEOUT:-20}
STARTED_LINE='Kafka Server started'

die() { echo "kafka.sh: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }
now_ms() { date +%s%3N; }

# ---------------------------------------------------------------------------------------------- fetch

stamp_content() {
  local java_id
  java_id=$("$JAVA" -version 2>&1 | tr '\n' ' ')
  printf 'kafka=%s pom=%s java=%s\n' "$VERSION" \
    "$(sha256sum "$POM" | cut -c1-16)" \
    "$(printf '%s %s' "$(readlink -f "$(command -v "$JAVA")")" "$java_id" | sha256sum | cut -c1-16)"
}

fetched() { [[ -f $STAMP && $(cat "$STAMP") == "$(stamp_content)" ]]; }

# A 16-byte random id in Kafka's Uuid text form: 22 characters of unpadded base64url. Kafka's own
# generator rejects ids starting with '-' (they read as options on a command line); so do we.
random_uuid() {
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [[ $id != -* ]] && { echo "$id"; return; }
  done
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

random_free_port() {
  local p
  while :; do
    p=$((30000 + RANDOM % 30000))
    port_in_use "$p" || port_in_use $((p + 1)) || { echo "$p"; return; }
  done
}

do_fetch() {
  fetched && return 0
  mkdir -p "$KHOME"
  exec 9>"$KHOME.lock"
  flock 9 # concurrent test binaries: the first fetches, the others wait and find the stamp
  if fetched; then exec 9>&-; return 0; fi
  rm -f "$STAMP"
  local t0 tmp
  t0=$(now_ms)
  log "fetching Kafka $VERSION into $LIB"
  tmp=$KHOME/lib.tmp.$$
  rm -rf "$tmp"
  # mvn -q still prints colour escapes on success: keep its output for failures only
  mvn -q -B -f "$POM" dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime \
    >"$KHOME/mvn.log" 2>&1 || { cat "$KHOME/mvn.log" >&2; rm -rf "$tmp"; die "mvn dependency:copy-dependencies failed"; }
  rm -f "$KHOME/mvn.log"
  ls "$tmp"/kafka_2.13-"$VERSION".jar >/dev/null || die "mvn copied no kafka_2.13-$VERSION.jar"
  rm -rf "$LIB" "$JSA" "$TEMPLATE"
  mv "$tmp" "$LIB"
  make_template
  make_cds_archive || { log "warning: no CDS archive (brokers start ~1.5 s slower)"; rm -f "$JSA"; }
  stamp_content >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
  log "fetched Kafka $VERSION in $(( $(now_ms) - t0 )) ms"
  exec 9>&-
}

# Run the real `kafka-storage format` once; its bootstrap.checkpoint (the initial feature levels,
# metadata.version first) depends only on the Kafka version, not on the cluster or node id.
make_template() {
  local dir
  dir=$(mktemp -d)
  write_properties "$dir" 1 2 >"$dir/server.properties"
  "$JAVA" -Dlog4j2.configurationFile="$LOG4J_CONFIG" -cp "$LIB/*" kafka.tools.StorageTool format \
    -t "$(random_uuid)" -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
    || { cat "$dir/format.log" >&2; rm -rf "$dir"; die "kafka-storage format failed"; }
  cp "$dir/data/bootstrap.checkpoint" "$TEMPLATE"
  rm -rf "$dir"
}

# Record the classes one broker start loads into a dynamic CDS archive (JDK 13+,
# -XX:ArchiveClassesAtExit, written when the JVM exits normally). Later JVMs map it instead of
# parsing and verifying ~10k classes: broker start 3.9 s -> 2.3 s, kafka-storage 1.4 s -> 1.0 s on
# 2 cores. A stale archive (other JDK, other classpath) is ignored by the JVM with a warning.
make_cds_archive() {
  local dir port pid deadline off
  dir=$(mktemp -d)
  port=$(random_free_port)
  write_properties "$dir" "$port" $((port + 1)) >"$dir/server.properties"
  format_dir "$dir/data"
  # shellcheck disable=SC2086
  "$JAVA" $HEAP_OPTS $JVM_OPTS -XX:ArchiveClassesAtExit="$JSA.tmp" \
    -Dlog4j2.configurationFile="$LOG4J_CONFIG" -cp "$LIB/*" kafka.Kafka "$dir/server.properties" \
    >"$dir/server.log" 2>&1 </dev/null &
  pid=$!
  deadline=$(( $(date +%s) + READY_TIMEOUT ))
  until grep -q "$STARTED_LINE" "$dir/server.log"; do
    if ! kill -0 "$pid" 2>/dev/null || (( $(date +%s) > deadline )); then
      kill -9 "$pid" 2>/dev/null || true
      tail -n 20 "$dir/server.log" >&2
      rm -rf "$dir"
      return 1
    fi
    sleep 0.1
  done
  kill -TERM "$pid"
  wait "$pid" || true
  rm -rf "$dir"
  [[ -s $JSA.tmp ]] && mv "$JSA.tmp" "$JSA"
}

# --------------------------------------------------------------------------------------- broker setup

# server.properties of a single combined broker+controller node. Without MODE: one PLAINTEXT
# listener for everyone. With MODE (see prepare-secure): a secured CLIENT listener on PORT and a
# PLAINTEXT INTERNAL listener on INTERNAL_PORT for the node itself.
write_properties() { # DIR PORT CONTROLLER_PORT [INTERNAL_PORT MODE]
  cat <<EOF
# written by scripts/kafka.sh
node.id=1
process.roles=broker,controller
EOF
  if (( $# < 5 )) && [[ -n ${FERRY_KAFKA_LINK:-} ]]; then
    # A second plaintext listener for clients that come through a proxy (scripts/toxiproxy.sh): bound
    # on one port, advertised on the proxy's, so that every connection a client opens after the
    # bootstrap goes through the proxy too.
    local bind=${FERRY_KAFKA_LINK%%:*} advertised=${FERRY_KAFKA_LINK#*:}
    [[ $bind =~ ^[0-9]+$ && $advertised =~ ^[0-9]+$ ]] \
      || die "FERRY_KAFKA_LINK must be BIND_PORT:ADVERTISED_PORT, not '$FERRY_KAFKA_LINK'"
    cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$2,CONTROLLER://127.0.0.1:$3,LINK://127.0.0.1:$bind
advertised.listeners=PLAINTEXT://127.0.0.1:$2,LINK://127.0.0.1:$advertised
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,LINK:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
EOF
  elif (( $# < 5 )); then
    cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$2,CONTROLLER://127.0.0.1:$3
advertised.listeners=PLAINTEXT://127.0.0.1:$2
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
EOF
  else
    secure_properties "$@"
  fi
  cat <<EOF
controller.listener.names=CONTROLLER
# static quorum of one voter: plain "kafka-storage format", no --standalone / dynamic quorum needed
controller.quorum.voters=1@127.0.0.1:$3
log.dirs=$1/data
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Tests write records with fixed, old timestamps (1970, 2023) and check that ferry keeps them; the
# default 7-day time retention would delete them at the first retention check, 30 s after start.
# Retention is off unless a test sets it on a topic (e.g. to make records vanish on purpose).
log.retention.ms=-1
# A broker killed with SIGKILL cannot re-register until its old session expires (the restarted
# controller answers DUPLICATE_BROKER_REGISTRATION): 9 s by default, 3 s here.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
EOF
}

secure_properties() { # DIR PORT CONTROLLER_PORT INTERNAL_PORT MODE [USER=PASSWORD...|REALM]
  local mode=${5%+acl} protocol
  case $mode in
    sasl_ssl | sasl_oidc) protocol=SASL_SSL ;;
    mtls) protocol=SSL ;;
    gssapi) protocol=SASL_PLAINTEXT ;;
    *) die "unknown security mode '$5' (sasl_ssl, sasl_oidc, mtls or gssapi, optionally with +acl)" ;;
  esac
  if [[ $mode == gssapi ]]; then
    gssapi_properties "$@"
  else
    tls_properties "$protocol" "$@"
  fi
  if [[ $5 == *+acl ]]; then
    cat <<EOF
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
# ANONYMOUS is the node itself on its PLAINTEXT INTERNAL and CONTROLLER listeners
super.users=User:admin;User:ANONYMOUS
EOF
  fi
}

# A SASL_PLAINTEXT listener with GSSAPI only. The broker is kafka/localhost@REALM (REALM is the sixth
# argument), with its key in DIR/kafka.keytab; its JVM must be started with
# -Djava.security.krb5.conf pointing at the KDC (JDK_JAVA_OPTIONS, see tests/integration/support/kdc.rs). The
# listener is advertised as `localhost`: clients ask the KDC for a ticket to kafka/<advertised host>.
# Re-authentication every 30 s makes clients present fresh tickets while they copy.
gssapi_properties() { # DIR PORT CONTROLLER_PORT INTERNAL_PORT MODE REALM
  local realm=${6:?gssapi needs the realm as the sixth argument}
  [[ -f $1/kafka.keytab ]] || die "no $1/kafka.keytab (the broker's key for kafka/localhost@$realm)"
  cat <<EOF
listeners=CLIENT://127.0.0.1:$2,INTERNAL://127.0.0.1:$4,CONTROLLER://127.0.0.1:$3
advertised.listeners=CLIENT://localhost:$2,INTERNAL://127.0.0.1:$4
listener.security.protocol.map=CLIENT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=GSSAPI
sasl.kerberos.service.name=kafka
connections.max.reauth.ms=30000
listener.name.client.gssapi.sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="$1/kafka.keytab" principal="kafka/localhost@$realm";
EOF
}

tls_properties() { # PROTOCOL DIR PORT CONTROLLER_PORT INTERNAL_PORT MODE [USER=PASSWORD...]
  local protocol=$1
  shift
  local tls=$1/tls mode=${5%+acl}
  [[ -f $tls/broker.pem && -f $tls/ca.pem ]] || die "no $tls/broker.pem or $tls/ca.pem; run: $0 certs $tls"
  cat <<EOF
listeners=CLIENT://127.0.0.1:$2,INTERNAL://127.0.0.1:$4,CONTROLLER://127.0.0.1:$3
advertised.listeners=CLIENT://127.0.0.1:$2,INTERNAL://127.0.0.1:$4
listener.security.protocol.map=CLIENT:$protocol,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
# PEM key (PKCS#8, unencrypted, hence no ssl.key.password) and certificate; PEM CA
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
EOF
  if [[ $mode == sasl_ssl ]]; then
    # Every mechanism librdkafka builds in: SCRAM (credentials made at format), PLAIN (users listed in the
    # JAAS line) and OAUTHBEARER with Kafka's unsecured-JWT validator (the token's `sub` is the principal;
    # for tests only: production brokers validate signed tokens from an identity provider).
    local user plain=""
    for user in "${@:6}"; do
      plain+=" user_${user%%=*}=\"${user#*=}\""
    done
    cat <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER
listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.client.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.client.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$plain;
listener.name.client.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
EOF
  elif [[ $mode == sasl_oidc ]]; then
    # OAUTHBEARER only, with tokens signed by an identity provider and validated against its JWKS
    # (Kafka's OAuthBearerValidatorCallbackHandler): signature, exp/nbf, issuer and audience. The
    # principal is the token's client (Keycloak's `azp` claim = the OAuth client id; `sub` is a UUID).
    # Kafka 4 fetches no URL that the JVM's org.apache.kafka.sasl.oauthbearer.allowed.urls does not
    # list: the broker needs KAFKA_OPTS="-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=<jwks url>"
    # (written to DIR/kafka_opts). The broker re-authenticates each connection after
    # connections.max.reauth.ms (and never later than the token's expiry), so clients must keep
    # fresh tokens.
    [[ -n ${FERRY_OIDC_JWKS_URL:-} && -n ${FERRY_OIDC_ISSUER:-} ]] \
      || die "sasl_oidc needs FERRY_OIDC_JWKS_URL and FERRY_OIDC_ISSUER (and FERRY_OIDC_AUDIENCE)"
    cat <<EOF
sasl.enabled.mechanisms=OAUTHBEARER
listener.name.client.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.client.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$FERRY_OIDC_JWKS_URL
sasl.oauthbearer.expected.issuer=$FERRY_OIDC_ISSUER
sasl.oauthbearer.expected.audience=${FERRY_OIDC_AUDIENCE:-kafka}
sasl.oauthbearer.sub.claim.name=${FERRY_OIDC_PRINCIPAL_CLAIM:-azp}
connections.max.reauth.ms=${FERRY_KAFKA_REAUTH_MS:-10000}
EOF
  else
    cat <<EOF
ssl.client.auth=required
# "CN=alice,OU=ferry-test,O=ferry" -> User:alice
ssl.principal.mapping.rules=RULE:^CN=([^,]+)(,.*)?\$/\$1/,DEFAULT
EOF
  fi
}

# A throwaway PKI in DIR (file names in the header comment). Nothing in it is secret beyond the test
# that made it: callers put DIR inside their own temp dir.
make_certs() { # DIR [CLIENT...]
  local dir=$1 name
  shift
  command -v openssl >/dev/null || die "certs needs the openssl command-line tool (Debian: openssl)"
  for name in "$@"; do
    [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "client name '$name': letters, digits, '_', '.', '-' only"
  done
  umask 077 # private keys, and broker.pem holds one
  mkdir -p "$dir"
  new_ca "$dir/ca" "ferry test CA"
  leaf "$dir/ca" "$dir/broker" "/O=ferry/OU=ferry-test/CN=broker" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost" "extendedKeyUsage=serverAuth,clientAuth"
  # Kafka's PEM keystore: the private key, then the certificate chain
  cat "$dir/broker.key" "$dir/broker.crt" >"$dir/broker.pem"
  rm -f "$dir/broker.key" "$dir/broker.crt"
  for name in "$@"; do
    leaf "$dir/ca" "$dir/client-$name" "/O=ferry/OU=ferry-test/CN=$name" "extendedKeyUsage=clientAuth"
    mv "$dir/client-$name.crt" "$dir/client-$name.pem"
    # for Java clients (ssl.keystore.type=PEM): key and certificate in one file
    cat "$dir/client-$name.key" "$dir/client-$name.pem" >"$dir/client-$name.keystore.pem"
  done
  # Claims to be the super user; only its CA gives it away.
  new_ca "$dir/untrusted-ca" "ferry untrusted CA"
  leaf "$dir/untrusted-ca" "$dir/untrusted-client" "/O=ferry/OU=ferry-test/CN=admin" "extendedKeyUsage=clientAuth"
  mv "$dir/untrusted-client.crt" "$dir/untrusted-client.pem"
  mv "$dir/ca.crt" "$dir/ca.pem"
  mv "$dir/untrusted-ca.crt" "$dir/untrusted-ca.pem"
  rm -f "$dir/ca.key" "$dir/untrusted-ca.key" # nothing is signed later
}

new_ca() { # PREFIX CN -> PREFIX.key, PREFIX.crt
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -days "${FERRY_TLS_DAYS:-30}" \
    -keyout "$1.key" -out "$1.crt" -subj "/O=ferry/CN=$2" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>"$1.err" || { cat "$1.err" >&2; die "openssl: cannot make the CA $1"; }
  rm -f "$1.err"
}

leaf() { # CA_PREFIX PREFIX SUBJECT EXTENSION... -> PREFIX.key (PKCS#8), PREFIX.crt
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -keyout "$2.key" \
    -out "$2.csr" -subj "$3" 2>"$2.err" || { cat "$2.err" >&2; die "openssl: cannot make a key for $2"; }
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" "${@:4}" >"$2.ext"
  openssl x509 -req -in "$2.csr" -CA "$1.crt" -CAkey "$1.key" -set_serial "0x$(openssl rand -hex 12)" \
    -days "${FERRY_TLS_DAYS:-30}" -extfile "$2.ext" -out "$2.crt" 2>"$2.err" || { cat "$2.err" >&2; die "openssl: cannot sign $2"; }
  rm -f "$2.csr" "$2.ext" "$2.err"
}

# Format a data dir exactly as `kafka-storage format -t <random id> -c ...` does for a static quorum:
# meta.properties (version 1) plus the bootstrap.checkpoint template, without starting a JVM.
# USER=PASSWORD arguments need the real tool: they become SCRAM-SHA-512 credentials (--add-scram).
format_dir() { # DATA_DIR [USER=PASSWORD...]
  local data=$1 user
  shift
  [[ -f $data/meta.properties ]] && return 0
  mkdir -p "$data"
  if [[ ${FERRY_KAFKA_FORMAT:-template} == tool || $# -gt 0 ]]; then
    local -a scram=()
    for user in "$@"; do
      [[ $user =~ ^([A-Za-z0-9_.-]+)=([A-Za-z0-9_.-]+)$ ]] \
        || die "SCRAM user '$user': NAME=PASSWORD, letters, digits, '_', '.', '-' only"
      scram+=(--add-scram "SCRAM-SHA-512=[name=${BASH_REMATCH[1]},password=${BASH_REMATCH[2]}]")
      scram+=(--add-scram "SCRAM-SHA-256=[name=${BASH_REMATCH[1]},password=${BASH_REMATCH[2]}]")
    done
    local out
    # shellcheck disable=SC2046
    out=$("$JAVA" $(cds_opts) -Dlog4j2.configurationFile="$LOG4J_CONFIG" -cp "$LIB/*" kafka.tools.StorageTool \
      format -t "$(random_uuid)" -c "$(dirname "$data")/server.properties" "${scram[@]}" 2>&1) \
      || { echo "$out" >&2; die "kafka-storage format of $data failed"; }
    return
  fi
  [[ -f $TEMPLATE ]] || die "no $TEMPLATE; run: $0 fetch"
  cp "$TEMPLATE" "$data/bootstrap.checkpoint"
  printf 'node.id=1\ndirectory.id=%s\nversion=1\ncluster.id=%s\n' "$(random_uuid)" "$(random_uuid)" \
    >"$data/meta.properties.tmp"
  mv "$data/meta.properties.tmp" "$data/meta.properties"
}

cds_opts() {
  if [[ ${FERRY_KAFKA_CDS:-1} != 0 && -f $JSA ]]; then echo "-XX:SharedArchiveFile=$JSA"; fi
}

broker_cmd() { # one argument per line
  printf '%s\n' "$JAVA"
  # shellcheck disable=SC2086
  printf '%s\n' $HEAP_OPTS $JVM_OPTS $(cds_opts) ${KAFKA_OPTS:-} \
    "-Dlog4j2.configurationFile=$LOG4J_CONFIG" -cp "$LIB/*" kafka.Kafka
}

# ------------------------------------------------------------------------------------- up/down/status

name_var() { local n=${1^^}; n=${n//-/_}; echo "${n//./_}"; }

ports_of() { # NAME -> "PORT CONTROLLER_PORT"
  local v port cport
  v=$(name_var "$1")
  port=FERRY_KAFKA_PORT_$v
  cport=FERRY_KAFKA_CONTROLLER_PORT_$v
  port=${!port:-}
  if [[ -z $port ]]; then
    case $1 in
      east) port=19092 ;;
      west) port=29092 ;;
      *) die "no port for cluster '$1': set FERRY_KAFKA_PORT_$v" ;;
    esac
  fi
  cport=${!cport:-$((port + 1))}
  echo "$port $cport"
}

# pid of the cluster's broker if it is running (and really is a Kafka broker).
running_pid() { # NAME
  local pidf=$RUN/$1/pid pid
  [[ -f $pidf ]] || return 1
  pid=$(cat "$pidf")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q kafka.Kafka \
    && echo "$pid"
}

start_one() { # NAME -> starts the JVM, leaves the log offset in <dir>/log.offset
  local name=$1 dir=$RUN/$1 port cport
  read -r port cport < <(ports_of "$name")
  if running_pid "$name" >/dev/null; then log "$name already running"; return 0; fi
  for p in "$port" "$cport"; do port_in_use "$p" && die "$name: port $p is in use by another process"; done
  mkdir -p "$dir"
  write_properties "$dir" "$port" "$cport" >"$dir/server.properties"
  format_dir "$dir/data"
  touch "$dir/server.log"
  stat -c %s "$dir/server.log" >"$dir/log.offset"
  local -a cmd
  mapfile -t cmd < <(broker_cmd)
  # setsid: a Ctrl-C in the calling shell must not reach the broker; the child writes its own pid
  # (setsid may or may not fork) and then becomes java.
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$dir/pid" "${cmd[@]}" "$dir/server.properties" \
    >>"$dir/server.log" 2>&1 </dev/null &
  log "starting $name on 127.0.0.1:$port (controller $cport), state in $dir"
}

wait_ready() { # NAME
  local name=$1 dir=$RUN/$1 port deadline off pid
  read -r port _ < <(ports_of "$name")
  deadline=$(( $(date +%s) + READY_TIMEOUT ))
  off=$(cat "$dir/log.offset" 2>/dev/null || echo 0)
  while :; do
    if tail -c +$((off + 1)) "$dir/server.log" | grep -q "$STARTED_LINE"; then
      # The started line comes after the broker is unfenced; one topic listing proves it end to end.
      if "$JAVA" $(cds_opts) -Dlog4j2.configurationFile="$LOG4J_CONFIG" -cp "$LIB/*" \
          org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" --list >/dev/null 2>&1; then
        return 0
      fi
    fi
    pid=$(cat "$dir/pid" 2>/dev/null || true)
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$dir/server.log" >&2
      die "$name: broker exited during startup (log: $dir/server.log)"
    fi
    if (( $(date +%s) > deadline )); then
      tail -n 40 "$dir/server.log" >&2
      die "$name: not ready after ${READY_TIMEOUT}s (log: $dir/server.log)"
    fi
    sleep 0.2
  done
}

cmd_up() {
  local names=("$@") t0 name rc=0
  (( ${#names[@]} )) || names=(east west)
  t0=$(now_ms)
  do_fetch
  for name in "${names[@]}"; do ports_of "$name" >/dev/null; done # fail before starting anything
  for name in "${names[@]}"; do start_one "$name"; done
  local -a pids=()
  for name in "${names[@]}"; do wait_ready "$name" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  (( rc == 0 )) || die "some clusters did not start; see above"
  log "up in $(( $(now_ms) - t0 )) ms"
  for name in "${names[@]}"; do
    read -r port _ < <(ports_of "$name")
    echo "$name=127.0.0.1:$port"
  done
}

all_names() { [[ -d $RUN ]] && find "$RUN" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort; }

cmd_down() {
  local -a names=("$@")
  (( ${#names[@]} )) || mapfile -t names < <(all_names || true)
  local name pid deadline
  local -A pids=()
  for name in "${names[@]}"; do
    if pid=$(running_pid "$name"); then kill -TERM "$pid" 2>/dev/null || true; pids[$name]=$pid; fi
  done
  deadline=$(( $(date +%s) + STOP_TIMEOUT ))
  for name in "${!pids[@]}"; do
    pid=${pids[$name]}
    while kill -0 "$pid" 2>/dev/null && (( $(date +%s) < deadline )); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name: still running ${STOP_TIMEOUT}s after SIGTERM, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    fi
  done
  for name in "${names[@]}"; do
    [[ -d $RUN/$name ]] && { rm -rf "${RUN:?}/$name"; log "$name stopped, $RUN/$name removed"; }
  done
  rmdir "$RUN" 2>/dev/null || true
}

cmd_status() {
  local -a names=("$@")
  (( ${#names[@]} )) || mapfile -t names < <(all_names || true)
  (( ${#names[@]} )) || { echo "no clusters under $RUN"; return 0; }
  local name pid port
  for name in "${names[@]}"; do
    port=$(sed -n 's|^advertised.listeners=PLAINTEXT://||p' "$RUN/$name/server.properties" 2>/dev/null || true)
    if pid=$(running_pid "$name"); then
      printf '%-10s running  pid=%-8s bootstrap=%-16s rss=%sMiB\n' "$name" "$pid" "$port" \
        $(( $(ps -o rss= -p "$pid") / 1024 ))
    else
      printf '%-10s stopped  %s\n' "$name" "${port:+bootstrap=$port}"
    fi
  done
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}
shift || true
case $cmd in
  fetch) do_fetch ;;
  libdir) do_fetch; echo "$LIB" ;;
  broker-cmd) do_fetch; broker_cmd ;;
  prepare)
    (( $# == 3 )) || die "usage: prepare DIR PORT CONTROLLER_PORT"
    do_fetch
    mkdir -p "$1"
    write_properties "$1" "$2" "$3" >"$1/server.properties"
    format_dir "$1/data"
    ;;
  certs) (( $# >= 1 )) || die "usage: certs DIR [CLIENT...]"; make_certs "$@" ;;
  prepare-secure)
    (( $# >= 5 )) || die "usage: prepare-secure DIR PORT CONTROLLER_PORT INTERNAL_PORT MODE [USER=PASSWORD...]"
    do_fetch
    mkdir -p "$1"
    write_properties "$@" >"$1/server.properties.tmp"
    mv "$1/server.properties.tmp" "$1/server.properties"
    if [[ ${5%+acl} == sasl_oidc ]]; then
      echo "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$FERRY_OIDC_JWKS_URL" >"$1/kafka_opts"
    fi
    if [[ ${5%+acl} == gssapi ]]; then
      format_dir "$1/data" # the sixth argument is the realm: Kerberos users need no SCRAM credentials
    else
      format_dir "$1/data" "${@:6}"
    fi
    ;;
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  status) cmd_status "$@" ;;
  log) (( $# == 1 )) || die "usage: log NAME"; cat "$RUN/$1/server.log" ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
