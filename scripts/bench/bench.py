#!/usr/bin/env python3
"""scripts/bench/bench.py: ferry against MirrorMaker 2 and against the brokers' own limit.

The driver behind scripts/bench.sh (its header is the user documentation: scenarios, options, method).
Python 3.11 standard library only; the Kafka-client work (watching offsets, latency, offset syncs,
checkpoints, heartbeats) is done by BenchTool.java on Kafka's own jars.

Layout of one invocation:
  - a fresh source cluster `bsrc` (scripts/kafka.sh, run dir /tmp/ferry-bench, port 39192) gets the
    scenario's data once;
  - every engine run (ferry, MM2, limit; rounds of all engines, --runs times) gets a fresh target
    cluster `bdst` (port 39292) and its own target alias (west1, west2, ...), so that neither the target
    nor the source-side topics named after the target (mm2-offset-syncs.<target>.internal) hold anything
    of a previous run: MM2 and ferry use the same topic names;
  - figures of each run go to bench/raw/<stamp>-<scenario>.json, medians and per-round ratios to a
    section appended to bench/results.md (unless --no-record).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import queue
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = ROOT / "scripts" / "kafka.sh"
LOG4J_WARN = ROOT / "scripts" / "kafka" / "log4j2.yaml"
LOG4J_MM2 = ROOT / "scripts" / "bench" / "mm2-log4j2.yaml"
TOOL_SRC = ROOT / "scripts" / "bench" / "BenchTool.java"
CACHE = Path(os.environ.get("FERRY_BENCH_CACHE", Path.home() / ".cache" / "ferry-bench"))
RUN_DIR = os.environ.get("FERRY_BENCH_RUN", "/tmp/ferry-bench")
SRC_PORT = int(os.environ.get("FERRY_BENCH_SRC_PORT", "39192"))
DST_PORT = int(os.environ.get("FERRY_BENCH_DST_PORT", "39292"))
SRC = f"127.0.0.1:{SRC_PORT}"
# wan: the source's LINK listener (bound here, advertised on the proxy's port) and the proxy (Toxiproxy)
LINK_BIND_PORT = int(os.environ.get("FERRY_BENCH_LINK_BIND_PORT", "39195"))
LINK_PORT = int(os.environ.get("FERRY_BENCH_LINK_PORT", "39196"))
LINK = f"127.0.0.1:{LINK_PORT}"
TOXIPROXY_API_PORT = int(os.environ.get("FERRY_BENCH_TOXIPROXY_PORT", "39197"))
DST = f"127.0.0.1:{DST_PORT}"
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MM2_HEAP = "-Xms256m -Xmx1g"
# kafka-run-class.sh's defaults, which connect-mirror-maker.sh uses
MM2_JVM = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 " \
          "-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true"

# The scenarios. `copy`: a topic written once on the source, copied by every engine into a fresh target.
SCENARIOS: dict[str, dict] = {
    "headline": dict(kind="copy", records=1_000_000, size=512, partitions=8, engines="ferry,mm2,limit"),
    "small": dict(kind="copy", records=1_000_000, size=100, partitions=8, engines="ferry,mm2,limit"),
    "lz4": dict(kind="copy", records=1_000_000, size=512, partitions=8, source_compression="lz4",
                engines="ferry,mm2,limit"),
    "partitions-2000": dict(kind="copy", records=1_000_000, size=100, partitions=2000, engines="ferry,mm2,limit"),
    # 10 topics: KRaft refuses one operation of more than 10,000 metadata records. For MM2 the remote
    # topics are created before it starts: it asks for all of a flow's new topics in one CreateTopics
    # request, which the controller refuses beyond 10,000 partitions ("Excessively large number of
    # partitions per request", PolicyViolation), so it would copy nothing. ferry cuts its requests below
    # the limit and creates its own (its figures include that).
    # ferry on KIP-848's consumer group protocol: librdkafka's cooperative-sticky assignor needs longer than
    # the session timeout for 10,000 partitions (librdkafka #4629), so the classic group never settles.
    "partitions-10000": dict(kind="copy", records=1_000_000, size=100, partitions=10000, topics=10,
                             precreate_remote=True, ferry_flow={"group_protocol": "consumer"},
                             engines="ferry,mm2,limit"),
    # the headline's data, copied by the brokers' own tools only
    "limit": dict(kind="copy", records=1_000_000, size=512, partitions=8, engines="limit"),
    "latency": dict(kind="latency", rate=20_000, duration=60, warmup=10, size=512, partitions=8,
                    engines="ferry,ferry-eos,mm2,limit"),
    # ferry at 1, 10, 50 and 100 flows, MM2 (a herder per flow and one per reverse pair) up to 50
    "flows": dict(kind="flows", flows="1,10,50,100", mm2_flows="1,10,50", settle=15, window=30, heartbeats=1,
                  engines="ferry,mm2"),
    # 20 flows copying a topic each at once against one flow copying the same 20 topics
    "flows-busy": dict(kind="busy", flows=20, records=1_000_000, size=512, partitions=4, engines="ferry"),
    "checkpoint": dict(kind="checkpoint", syncs=1_000_000, partitions=8, step=100, engines="ferry,mm2"),
    # the old interface: scripts/bench.sh [--mm2] [RECORDS] [BYTES] [PARTITIONS]
    "copy": dict(kind="copy", records=1_000_000, size=100, partitions=6, engines="ferry"),
    "wan": dict(kind="wan", records=200_000, size=1024, partitions=8, rtts="0,100,300", engines="ferry,mm2"),
}
# Exactly-once delivery (issue 19): the headline's data copied by ferry as it is (at least once), by ferry with
# `delivery = "exactly_once"` (transaction_interval_ms 100, transaction_max_bytes 16 MiB, its defaults) and by
# MM2 with exactly-once source support (KIP-618), back to back. The eos engines are watched by a
# read_committed watcher (BenchTool watch-committed, see EOS_ENGINES).
SCENARIOS["exactly-once"] = dict(SCENARIOS["headline"], engines="ferry,ferry-eos,mm2-eos")
# Schemas (issue 34): the headline's data in the Confluent framing (schema ID 1 of the source registry
# before every value), copied by ferry as it is and by ferry with `schemas = "translate"` (each value
# gets the target registry's ID 2), one Apicurio registry per cluster. MM2 has nothing to compare.
SCENARIOS["schemas"] = dict(SCENARIOS["headline"], framed=True, engines="ferry,ferry-translate")
# Record filters and header rules (issue 35): the headline's data copied by ferry as it is and by ferry with
# two filter rules that every record is checked against and none matches (a header's presence, a key
# regex: the watcher counts every record), and a lineage header inserted into every record.
SCENARIOS["rules"] = dict(SCENARIOS["headline"], engines="ferry,ferry-rules")
RULES = {"filter": [{"name": "debug", "header": "x-debug"}, {"name": "tmp", "key": "^tmp-"}],
         "headers": {"insert": {"x-lineage": "{source}/{topic}/{partition}/{offset}"}}}
# Scenarios that compare ferry with a variant of itself: (engine, what the engines do).
VARIANTS = {
    "rules": ("ferry-rules", "ferry copies the records as they are; ferry-rules the same flow with two "
                             "`[[flows.filter]]` rules checked on every record (none matches) and a lineage "
                             "header inserted into every record (`{source}/{topic}/{partition}/{offset}`)."),
    "schemas": ("ferry-translate", "ferry copies the framed values as they are; ferry-translate the same flow "
                                   "with `schemas = \"translate\"` and a registry on each cluster (Apicurio "
                                   "Registry, scripts/registry.sh): every value gets the target's ID 2 in place "
                                   "of the source's ID 1."),
}
ALL = ["headline", "small", "lz4", "latency", "partitions-2000", "partitions-10000", "flows", "flows-busy",
       "checkpoint", "exactly-once", "wan"]
# Engines that copy in transactions. Their target topics hold a transaction marker per partition per
# transaction besides the records, so their log-end offsets exceed the record count long before the copy
# is complete, by an amount nobody outside knows (ferry's transactions follow time and bytes, MM2's its
# polls). Judging "every record is there" by end offsets would stop the clock early. Their watcher
# (BenchTool watch-committed) polls the last stable offsets instead (progress, and a necessary
# condition: stable offsets >= records), then counts the committed records themselves with a
# read_committed consumer, and dates completion by the first stable-offset poll that covered the last
# counted record of every partition: the same 0.1 s resolution as the end-offset watcher of the other
# engines, and a count of the records rather than of offsets. The consumer runs only from the moment the
# stable offsets reach the record count (the copy's tail), and its own lag does not move the date.
EOS_ENGINES = ("ferry-eos", "mm2-eos")
LABELS = {"ferry": "ferry", "ferry-eos": "ferry-eos", "ferry-translate": "ferry-translate", "ferry-rules": "ferry-rules", "mm2": "MM2", "mm2-eos": "MM2-eos", "limit": "limit"}

# Producer settings. The source data is written once per scenario (not measured); the limit's producer
# is tuned like MM2's below, since it stands for the copy's produce side.
SOURCE_PROPS = ["acks=1", "linger.ms=20", "batch.size=262144"]
# Round robin over thousands of partitions: small batches that wait to fill, and room for them all. A
# source broker on a busy machine took up to 120 s to acknowledge some batches, producer-perf's default
# delivery timeout: records were lost and the copy never reached its count; allow ten minutes.
ROUND_ROBIN_PROPS = ["partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
                     "linger.ms=500", "batch.size=16384", "buffer.memory=536870912",
                     "delivery.timeout.ms=600000", "request.timeout.ms=120000"]
LIMIT_PROPS = ["acks=all", "linger.ms=20", "batch.size=262144", "compression.type=lz4"]
LATENCY_SOURCE_PROPS = ["acks=1", "linger.ms=5", "batch.size=65536"]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def die(msg: str) -> None:
    log(f"error: {msg}")
    sys.exit(1)


def now_ms() -> int:
    return int(time.time() * 1000)


# ------------------------------------------------------------------------------------------ processes

CHILDREN: list[subprocess.Popen] = []


def spawn(cmd: list[str], log_path: Path | None = None, env: dict | None = None, stdout=None) -> subprocess.Popen:
    """A child in its own session (a Ctrl-C of bench.sh reaches only us; we stop our children by pid)."""
    out = stdout if stdout is not None else (open(log_path, "ab") if log_path else subprocess.DEVNULL)
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log_path or stdout else subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    CHILDREN.append(p)
    return p


def stop(p: subprocess.Popen | None, sig=signal.SIGTERM, timeout=60) -> None:
    if p is None or p.poll() is not None:
        return
    try:
        p.send_signal(sig)
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"pid {p.pid} still running {timeout}s after {sig.name}; SIGKILL")
        p.kill()
        p.wait()
    except ProcessLookupError:
        pass


def stop_all_children() -> None:
    for p in CHILDREN:
        if p.poll() is None:
            stop(p, timeout=20)


def run(cmd: list[str], env: dict | None = None, check=True, timeout=None) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        die(f"{shlex.join(cmd[:6])}... exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


class Lines:
    """The stdout of a child, line by line, read by a thread (so the main loop can poll with a timeout)."""

    def __init__(self, p: subprocess.Popen, tee: Path | None = None):
        self.q: queue.Queue = queue.Queue()
        self.all: list[str] = []

        def pump():
            f = open(tee, "a") if tee else None
            for raw in p.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                if f:
                    f.write(line + "\n")
                    f.flush()
                self.all.append(line)
                self.q.put(line)
            self.q.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def get(self, timeout: float) -> str | None | bool:
        """A line; None at end of stream; False on timeout."""
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return False


# --------------------------------------------------------------------------------------------- /proc

def proc_status(pid: int) -> dict:
    d = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    d[k] = int(v.split()[0]) * 1024
                elif k == "Threads":
                    d[k] = int(v)
    except OSError:
        pass
    return d


def proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of the process (all its threads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError):
        return None


def thread_sample(pid: int) -> dict[int, tuple[str, int, int]]:
    """Every thread of the process: tid -> (name, user+system CPU ticks, context switches). Voluntary
    switches are the times a thread went to sleep (so, woke up again): its wake-ups; involuntary ones
    are preemptions, counted too since on a loaded machine a wake-up may be preempted instead."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                raw = f.read()
            name = raw.split("(", 1)[1].rsplit(")", 1)[0]
            fields = raw.rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])
            switches = 0
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
            out[int(t)] = (name, ticks, switches)
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return out


def thread_group(name: str) -> str:
    """A thread's kind: ferry names its threads `<actor> <flow>` (the flow dropped here), librdkafka
    `rdk:main`, `rdk:broker<node id>` (-1: its internal and bootstrap brokers), the JVM `<pool>-<n>`;
    numbers become N."""
    head = name.split(" ", 1)[0]
    return re.sub(r"\d+", "N", head)


def thread_groups(before: dict, after: dict, seconds: float) -> list[dict]:
    """Per kind of thread between two samples: threads alive at the end, CPU in % of a core and
    wake-ups per second (threads started in between count from zero)."""
    groups: dict[str, dict] = {}
    for tid, (name, ticks, sw) in after.items():
        _, t0, s0 = before.get(tid, (name, 0, 0))
        g = groups.setdefault(thread_group(name), {"group": thread_group(name), "threads": 0, "ticks": 0, "switches": 0})
        g["threads"] += 1
        g["ticks"] += ticks - t0
        g["switches"] += sw - s0
    out = []
    for g in groups.values():
        out.append({"group": g["group"], "threads": g["threads"], "cpu_pct": 100 * g["ticks"] / CLK / seconds,
                    "wakeups_s": g["switches"] / seconds})
    return sorted(out, key=lambda g: (-g["cpu_pct"], -g["wakeups_s"], g["group"]))


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / CLK


class CpuWindow:
    """Busy CPU of the machine and of our own processes between two moments: what else was running."""

    def __init__(self, pids: list[int]):
        self.pids = [p for p in pids if p]
        self.t = time.time()
        self.busy = machine_busy()
        self.cpu = {p: proc_cpu(p) or 0.0 for p in self.pids}

    def others_cores(self, extra_pids: list[int] = ()) -> float:
        dt_ = time.time() - self.t
        busy = machine_busy() - self.busy
        ours = 0.0
        for p in set(self.pids) | set(extra_pids):
            c = proc_cpu(p)
            if c is not None:
                ours += c - self.cpu.get(p, 0.0)
        return max(0.0, (busy - ours) / dt_) if dt_ > 0 else 0.0


# ------------------------------------------------------------------------------------------ clusters

def kafka_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({"FERRY_KAFKA_RUN": RUN_DIR,
                "FERRY_KAFKA_PORT_BSRC": str(SRC_PORT), "FERRY_KAFKA_PORT_BDST": str(DST_PORT)})
    if extra:
        env.update(extra)
    return env


def kafka_sh(*args: str, timeout=600) -> str:
    return run([str(KAFKA_SH), *args], env=kafka_env(), timeout=timeout)


def broker_pid(name: str) -> int | None:
    try:
        return int(Path(RUN_DIR, name, "pid").read_text().strip())
    except (OSError, ValueError):
        return None


def fresh_cluster(name: str, env: dict | None = None) -> None:
    t = time.time()
    kafka_sh("down", name)
    run([str(KAFKA_SH), "up", name], env=kafka_env(env), timeout=600)
    log(f"fresh cluster {name} in {time.time() - t:.1f} s")


class Toxiproxy:
    """The wan scenario's link: Toxiproxy (scripts/toxiproxy.sh) from LINK to the source's LINK listener,
    with latency added half on each direction and optionally a bandwidth limit towards the replicator."""

    def __init__(self, work: Path):
        self.api = f"http://127.0.0.1:{TOXIPROXY_API_PORT}"
        self.proc = spawn([str(ROOT / "scripts" / "toxiproxy.sh"), "run", str(TOXIPROXY_API_PORT)],
                          work / "toxiproxy.log")
        deadline = time.time() + 120  # the first use builds Toxiproxy (~35 s)
        while True:
            try:
                self.call("GET", "/version")
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    die(f"toxiproxy did not start (log: {work / 'toxiproxy.log'})")
                time.sleep(0.2)
        self.call("POST", "/proxies", {"name": "link", "listen": LINK,
                                       "upstream": f"127.0.0.1:{LINK_BIND_PORT}", "enabled": True})

    def call(self, method: str, path: str, body: dict | None = None) -> str:
        import urllib.request
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read().decode()

    def shape(self, rtt_ms: int, mbit: float | None) -> None:
        for t in json.loads(self.call("GET", "/proxies/link/toxics")):
            self.call("DELETE", f"/proxies/link/toxics/{t['name']}")
        if rtt_ms:
            for stream in ("upstream", "downstream"):
                self.call("POST", "/proxies/link/toxics", {"name": f"latency_{stream}", "type": "latency",
                                                           "stream": stream,
                                                           "attributes": {"latency": rtt_ms // 2, "jitter": 0}})
        if mbit:
            self.call("POST", "/proxies/link/toxics", {"name": "bandwidth", "type": "bandwidth", "stream": "downstream",
                                                       "attributes": {"rate": int(mbit * 1000 / 8)}})


class Tools:
    """Kafka's jars and BenchTool compiled against them."""

    def __init__(self):
        self.lib = kafka_sh("libdir").strip().splitlines()[-1]
        digest = hashlib.sha256(TOOL_SRC.read_bytes() + self.lib.encode()).hexdigest()[:12]
        self.classes = CACHE / f"classes-{digest}"
        if not (self.classes / "BenchTool.class").exists():
            tmp = Path(tempfile.mkdtemp(dir=CACHE))
            run(["javac", "-nowarn", "-cp", f"{self.lib}/*", "-d", str(tmp), str(TOOL_SRC)])
            tmp.rename(self.classes)
        self.cp = f"{self.classes}:{self.lib}/*"

    def java(self, main: str, *args: str, heap="-Xmx512m", log4j=LOG4J_WARN) -> list[str]:
        return ["java", *heap.split(), "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={log4j}", "-cp", self.cp, main, *args]

    def tool(self, *args: str) -> list[str]:
        return self.java("BenchTool", *args)

    def call(self, *args: str, timeout=900) -> str:
        return run(self.tool(*args), timeout=timeout)

    def kafka_tool(self, main: str, *args: str, heap="-Xmx1g") -> list[str]:
        return ["java", *heap.split(), "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={LOG4J_WARN}",
                "-cp", f"{self.lib}/*", main, *args]


def payload_file(size: int, framed: bool = False) -> Path:
    """10,000 distinct JSON-like payloads of exactly `size` bytes (fixed seed): varied enough that lz4
    does not collapse a batch of identical records (producer-perf's --record-size repeats one payload),
    repetitive enough to compress like typical event data. `framed`: each starts with the Confluent
    framing of schema ID 1 (a zero byte, then 1 as 4 bytes big-endian: NUL characters, which
    producer-perf's UTF-8 reading keeps as single bytes)."""
    if framed:
        path = CACHE / f"payload-{size}-framed.txt"
        if not path.exists():
            plain = payload_file(size).read_text().split("\n")
            tmp = path.with_suffix(".tmp")
            tmp.write_text("\n".join("\0\0\0\0\x01" + line[5:] if line else line for line in plain))
            tmp.rename(path)
        return path
    path = CACHE / f"payload-{size}.txt"
    if path.exists():
        return path
    rnd = random.Random(size)
    words = ["order", "created", "paid", "shipped", "customer", "invoice", "berlin", "paris", "lisbon", "warehouse",
             "express", "standard", "pending", "accepted", "rejected", "refund", "item", "quantity", "price", "eur",
             "usd", "voucher", "mobile", "web", "store", "north", "south", "east", "west", "priority"]
    lines = []
    for i in range(10_000):
        head = (f'{{"id":"{rnd.getrandbits(64):016x}","seq":{i},"ts":{1_700_000_000_000 + rnd.randrange(10**9)},'
                f'"customer":"c{rnd.randrange(10**6):06d}","amount":{rnd.randrange(10**6) / 100},"note":"')
        body = []
        while len(head) + sum(len(w) + 1 for w in body) < size:
            body.append(rnd.choice(words) if rnd.random() < 0.7 else f"{rnd.getrandbits(32):08x}")
        s = (head + " ".join(body))[: size - 2] + '"}'
        lines.append(s[:size].ljust(size, " "))
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(path)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ engines

class Ferry:
    name = "ferry"

    def __init__(self, binary: Path, source_client: dict | None = None):
        self.binary = binary
        # librdkafka properties for the source cluster (--ferry-source-client), to compare settings
        self.source_client = source_client or {}

    def start(self, work: Path, src_alias: str, flows: list[dict], clusters: dict[str, str],
              wrap: list[str] = (), registries: dict[str, str] | None = None) -> subprocess.Popen:
        """`wrap`: a command prefix (the profile runs ferry under `perf record ... --`); `registries`: each
        cluster alias's schema registry URL."""
        d = work / "flows"
        d.mkdir(parents=True, exist_ok=True)
        text = "".join(f'[clusters.{a}]\nbootstrap_servers = "{b}"\n\n' for a, b in clusters.items())
        text += "".join(f'[clusters.{a}.schema_registry]\nurl = "{u}"\n\n' for a, u in (registries or {}).items())
        if self.source_client and src_alias in clusters:
            text += f"[clusters.{src_alias}.client]\n" + "".join(
                f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in self.source_client.items()) + "\n"
        for f in flows:
            text += "[[flows]]\n"
            for k, v in f.items():
                text += f"{k} = {toml_value(v)}\n"
            text += "\n"
        (d / "bench.toml").write_text(text)
        self.port = free_port()
        return spawn([*wrap, str(self.binary), "run", "--flows", str(d), "--listen", f"127.0.0.1:{self.port}"],
                     work / "ferry.log")


class MM2:
    name = "mm2"

    def __init__(self, tools: Tools):
        self.tools = tools

    def start(self, work: Path, props: str) -> subprocess.Popen:
        (work / "mm2.properties").write_text(props)
        cmd = ["java", *MM2_HEAP.split(), *MM2_JVM.split(), f"-Dlog4j2.configurationFile={LOG4J_MM2}",
               "-cp", f"{self.tools.lib}/*", "org.apache.kafka.connect.mirror.MirrorMaker",
               str(work / "mm2.properties")]
        return spawn(cmd, work / "mm2.log")


def run_registry_sh(*args: str) -> str:
    """scripts/registry.sh ARGS with the bench's own run dir; its output."""
    env = dict(os.environ, FERRY_REGISTRY_RUN="/tmp/ferry-bench-registries")
    p = subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), *args], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        die(f"scripts/registry.sh {' '.join(args)} failed:\n{p.stderr[-2000:]}")
    return p.stdout


def variant_lines(rounds: list, engine: str, engines_text: str) -> list[str]:
    """The report's lines for a ferry variant against ferry (VARIANTS): rate and CPU ratios, what each does."""
    rate = ratio_med(rounds, engine, "ferry", "rate")
    cpu = ratio_med(rounds, engine, "ferry", "cpu_s")
    return ["", f"Ratios: {engine}/ferry copy rate **{fmt(rate and rate * 100, '.0f', ' %')}**, "
                f"CPU **{fmt(cpu, '.2f', 'x')}**.",
            "", f"Engines: {engines_text}"]


def toml_value(v) -> str:
    """A TOML value (inline tables for dicts; JSON's strings, numbers and lists are TOML's)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v)


def ferry_flow(src: str, dst: str, topics: list[str], **extra) -> dict:
    return {"source": src, "target": dst, "topics": topics, **extra}


def mm2_props(pairs: list[tuple[str, str, str]], clusters: dict[str, str], extra: dict | None = None,
              reverse_heartbeats=True, reverse_extra: dict | None = None, eos_rest_port: int | None = None) -> str:
    """Dedicated-mode MM2 as the issue measured it: tasks.max = 2, a tuned producer (linger 20 ms, 256 KiB
    batches, lz4), replication factor 1 everywhere (single-broker clusters). `pairs`: (source, target,
    topics regex). Heartbeat herders only for the flows and their reverse pairs (what a ferry flow emits),
    not for every ordered pair of aliases."""
    lines = [f"clusters = {', '.join(clusters)}"]
    lines += [f"{a}.bootstrap.servers = {b}" for a, b in clusters.items()]
    lines += ["tasks.max = 2", "replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
              "checkpoints.topic.replication.factor = 1", "heartbeats.topic.replication.factor = 1",
              "sync.topic.acls.enabled = false", "emit.heartbeats.enabled = false"]
    for a in clusters:
        lines += [f"{a}.offset.storage.replication.factor = 1", f"{a}.status.storage.replication.factor = 1",
                  f"{a}.config.storage.replication.factor = 1"]
    for s, t, topics in pairs:
        lines += [f"{s}->{t}.enabled = true", f"{s}->{t}.topics = {topics}",
                  f"{s}->{t}.emit.heartbeats.enabled = true",
                  f"{s}->{t}.producer.override.linger.ms = 20",
                  f"{s}->{t}.producer.override.batch.size = 262144",
                  f"{s}->{t}.producer.override.compression.type = lz4"]
        if reverse_heartbeats:
            lines.append(f"{t}->{s}.emit.heartbeats.enabled = true")
            lines += [f"{t}->{s}.{k} = {v}" for k, v in (reverse_extra or {}).items()]
        for k, v in (extra or {}).items():
            lines.append(f"{s}->{t}.{k} = {v}")
    if eos_rest_port is not None:
        # Exactly-once source support (KIP-618) is a property of the Connect worker, and MM2 gives the
        # worker of herder s->t the properties prefixed with the *target* alias (MirrorMakerConfig.
        # workerConfig: clusterProps(target) plus a few top-level prefixes, `exactly.once.source.support`
        # not among them, so a bare top-level key would be ignored). The worker then makes every
        # MirrorSourceTask an exactly-once task: a transactional producer per task (transactional.id
        # <group>-<connector>-<task>), records and source offsets in one transaction per poll (the default
        # transaction.boundary). Dedicated mode's internal REST server (KIP-710) lets a worker reach its
        # group's leader, which fences zombie tasks before exactly-once tasks start; on a free port. The
        # source is read read_committed, as the MM2 documentation asks for exactly-once.
        lines += ["dedicated.mode.enable.internal.rest = true", f"listeners = http://127.0.0.1:{eos_rest_port}"]
        for s, t, _ in pairs:
            lines += [f"{t}.exactly.once.source.support = enabled",
                      f"{s}->{t}.consumer.isolation.level = read_committed"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ the bench

def describe(name: str, sc: dict) -> str:
    """What the scenario does, with the values actually used (after --records etc.)."""
    k = sc["kind"]
    if k == "copy":
        d = f"{sc['records']:,} records of {sc['size']} B, {sc['partitions']:,} partitions"
        if sc.get("topics", 1) > 1:
            d += f" ({sc['topics']} topics of {sc['partitions'] // sc['topics']:,})"
        if sc["partitions"] > 100:
            d += " (round robin)"
        if sc.get("source_compression"):
            d += f", {sc['source_compression']} batches on the source"
        return ("the box's copy limit for " + d) if name == "limit" else d
    if k == "wan":
        d = (f"{sc['records']:,} records of {sc['size']} B, {sc['partitions']} partitions, the source behind a "
             f"latency proxy (Toxiproxy) at {sc['rtts']} ms round trip")
        return d + (f", {sc['bandwidth']} Mbit/s towards the replicator" if sc.get("bandwidth") else "")
    if k == "latency":
        return (f"steady {sc['rate']:,} records/s of {sc['size']} B for {sc['duration']} s over {sc['partitions']} "
                f"partitions; arrival on the target - CreateTime")
    if k == "flows":
        d = "idle flows eK->wK (aliases of the same two clusters), each copying one empty topic"
        if sc.get("heartbeats", 1) != 1:
            d += f", heartbeats every {sc['heartbeats']} s"
        return d
    if k == "busy":
        return (f"{sc['flows']} flows eK->wK copying a topic each at once ({sc['records'] // sc['flows']:,} records of "
                f"{sc['size']} B over {sc['partitions']} partitions per topic) against one flow copying all "
                f"{sc['flows']} topics")
    return f"first checkpoint of a lagging group with {sc['syncs']:,} offset syncs on the topic"


class Data:
    """The source data of a copy scenario: `partitions` in all, over `topics` topics (KRaft refuses to create
    more than 10,000 metadata records in one operation, so 10,000 partitions cannot be one topic)."""

    def __init__(self, name: str, sc: dict):
        n = sc.get("topics", 1)
        self.topics = [f"bench-{name}"] if n == 1 else [f"bench-{name}-{i}" for i in range(1, n + 1)]
        self.partitions = sc["partitions"]
        self.per_topic = self.partitions // n
        self.records, self.size = sc["records"], sc["size"]
        self.compression = sc.get("source_compression")
        self.precreate_remote = sc.get("precreate_remote", False)
        self.ferry_flow = sc.get("ferry_flow", {})
        self.framed = sc.get("framed", False)


def median(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


class Bench:
    def __init__(self, args):
        self.args = args
        self.stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.work = Path(args.work or tempfile.mkdtemp(prefix=f"ferry-bench-{self.stamp}-"))
        self.work.mkdir(parents=True, exist_ok=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        self.tools = Tools()
        self.run_no = 0
        self.ferry_bin, self.ferry_rev = (None, None)
        log(f"work dir {self.work}")

    # --- ferry binary
    def ferry(self) -> Ferry:
        if self.ferry_bin is None:
            self.ferry_bin, self.ferry_rev = resolve_ferry(self.args)
        props = dict(kv.split("=", 1) for kv in (self.args.ferry_source_client or "").split(",") if kv)
        return Ferry(self.ferry_bin, props)

    def next_run(self, engine: str) -> tuple[Path, str]:
        self.run_no += 1
        w = self.work / f"{self.run_no:02d}-{engine}"
        w.mkdir()
        return w, f"west{self.run_no}"

    def src_pids(self):
        return [broker_pid("bsrc"), broker_pid("bdst")]

    # --- data
    def produce(self, topic: str, records: int, size: int, partitions: int, compression: str | None,
                throughput: int = -1, props: list[str] | None = None, framed: bool = False) -> subprocess.Popen:
        props = list(props or SOURCE_PROPS)
        if partitions > 100:
            props += ROUND_ROBIN_PROPS
        if compression:
            props.append(f"compression.type={compression}")
        cmd = self.tools.kafka_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                                    "--num-records", str(records), "--payload-file", str(payload_file(size, framed)),
                                    "--throughput", str(throughput), "--bootstrap-server", SRC,
                                    "--command-property", *props)
        return spawn(cmd, stdout=subprocess.PIPE)

    def create(self, bootstrap: str, partitions: int, *topics: str, configs="-") -> None:
        self.tools.call("create", bootstrap, str(partitions), configs, *topics)

    def write_source(self, d: "Data"):
        t = time.time()
        self.create(SRC, d.per_topic, *d.topics)
        for topic in d.topics:
            p = self.produce(topic, d.records // len(d.topics), d.size, d.per_topic, d.compression, framed=d.framed)
            out = p.communicate()[0].decode()
            if p.returncode != 0:
                die(f"producer-perf failed:\n{out[-2000:]}")
            log(f"source: {topic}: {out.strip().splitlines()[-1]}")
        log(f"source: {d.records:,} records of {d.size} B in {len(d.topics)} topic(s) of {d.per_topic:,} partitions"
            f"{', ' + d.compression if d.compression else ''} in {time.time() - t:.1f} s")

    # --- one copy by a replicator
    def copy_run(self, engine: str, d: "Data", src: str = SRC) -> dict:
        """`src`: where the replicator finds the source (the wan scenario's link; the data is written direct)."""
        records, size, partitions = d.records, d.size, d.partitions
        work, alias = self.next_run(engine)
        fresh_cluster("bdst")
        remote = ",".join(f"east.{t}" for t in d.topics)
        eos = engine in EOS_ENGINES
        if d.precreate_remote and not engine.startswith("ferry"):
            t = time.time()
            self.create(DST, d.per_topic, *remote.split(","))
            log(f"remote topics created beforehand in {time.time() - t:.1f} s")
        interval = "100" if partitions <= 100 else "500"
        watcher = spawn(self.tools.tool("watch-committed" if eos else "watch", DST, remote, str(records), interval,
                                        str(self.args.timeout)), stdout=subprocess.PIPE)
        lines = Lines(watcher, work / "watch.log")
        time.sleep(1.5)  # the watcher's JVM is up before the replicator starts
        window = CpuWindow(self.src_pids() + [watcher.pid])
        t0 = time.time()
        if engine.startswith("ferry"):
            ferry = self.ferry()
            extra = dict(d.ferry_flow, **({"delivery": "exactly_once"} if engine == "ferry-eos" else {}))
            registries = None
            if engine == "ferry-rules":
                extra.update(RULES)
            if engine == "ferry-translate":
                extra["schemas"] = "translate"
                registries = {"east": self.registries["src"], alias: self.registries["dst"]}
            proc = ferry.start(work, "east", [ferry_flow("east", alias, d.topics, **extra)],
                               {"east": src, alias: DST}, registries=registries)
        else:
            proc = MM2(self.tools).start(work, mm2_props([("east", alias, ", ".join(d.topics))],
                                                         {"east": src, alias: DST},
                                                         eos_rest_port=free_port() if engine == "mm2-eos" else None))
        res = {"engine": engine, "alias": alias, "records": records, "size": size, "partitions": partitions,
               "topics": len(d.topics)}
        batches = BatchSampler(ferry.port) if engine.startswith("ferry") else None
        peak_threads = 0
        deadline = t0 + self.args.timeout
        last_count, last_progress = 0, time.time()
        cpu_samples = []  # (time, CPU seconds): the eos watcher reports completion after counting the records
        while True:
            st = proc_status(proc.pid)
            peak_threads = max(peak_threads, st.get("Threads", 0))
            cpu_samples.append((time.time(), proc_cpu(proc.pid)))
            line = lines.get(0.2)
            if line is None:
                res["error"] = "watcher ended without 'done'"
                break
            if line:
                ev, ms, *rest = line.split()
                if ev == "first":
                    res["first_s"] = int(ms) / 1000 - t0
                    res["cpu_at_first_s"] = proc_cpu(proc.pid)
                elif ev == "count":
                    c = int(rest[0])
                    if c > last_count:
                        last_count, last_progress = c, time.time()
                elif ev == "counting":
                    res["counting_from_s"] = int(ms) / 1000 - t0
                elif ev == "done":
                    res["done_s"] = int(ms) / 1000 - t0
                    res["cpu_s"] = proc_cpu(proc.pid)
                    if eos:
                        # the CPU when the last record was committed, not after the watcher counted them
                        done_at = int(ms) / 1000
                        res["done_reported_after_s"] = time.time() - done_at
                        res["cpu_s"] = next((c for t, c in cpu_samples if t >= done_at and c is not None),
                                            res["cpu_s"])
                        res.update(ferry_transactions(ferry.port) if engine == "ferry-eos" else {})
                    st = proc_status(proc.pid)
                    res["peak_rss_mib"] = st.get("VmHWM", 0) / 2**20
                    res["threads"] = max(peak_threads, st.get("Threads", 0))
                    res["others_cores"] = window.others_cores([proc.pid])
                    break
                elif ev == "timeout":
                    res["error"] = f"timeout with {rest} records on the target"
                    break
            if proc.poll() is not None:
                res["error"] = f"{engine} exited with {proc.returncode} (log: {work})"
                break
            if time.time() > deadline or time.time() - last_progress > max(180, self.args.timeout / 3):
                res["error"] = f"no completion in time ({last_count} records on the target)"
                break
        if eos and "done_s" in res:
            # the watcher's count of every committed record (read_committed) and the offsets that are not
            # records (transaction markers, aborted records): the copy is complete and transactional
            while True:
                line = lines.get(90)
                if not line:
                    res["error"] = "the read_committed watcher gave no final count"
                    break
                if line.startswith("{"):
                    c = json.loads(line)
                    res.update(committed_records=c["committed"], target_end_offsets=c["end_offsets"],
                               target_not_records=c["not_records"])
                    if c["committed"] != records:
                        res["error"] = f"{c['committed']:,} committed records on the target, not {records:,}"
                    break
        if batches:
            res.update(batches.finish())
            res.update(ferry_startup(work / "ferry.log", t0))
        stop(proc)
        stop(watcher)
        if "first_s" in res and "done_s" in res:
            copy = res["done_s"] - res["first_s"]
            res["copy_s"] = copy
            res["rate"] = records / copy if copy > 0 else None
            res["mb_s"] = records * size / 1e6 / copy if copy > 0 else None
            res["cpu_copy_s"] = (res["cpu_s"] - (res.get("cpu_at_first_s") or 0)) if res.get("cpu_s") else None
            res["mb_per_cpu_s"] = records * size / 1e6 / res["cpu_s"] if res.get("cpu_s") else None
            res["mb_per_cpu_copy_s"] = records * size / 1e6 / res["cpu_copy_s"] if res.get("cpu_copy_s") else None
        if engine.startswith("mm2"):
            res["mm2_producer_tuned"] = grep_count(work / "mm2.log", r"linger\.ms = 20") > 0
        if engine == "mm2-eos":
            # MM2's own word that it ran transactional: the source tasks' producers have a transactional id
            # (its ProducerConfig dump) and the worker ran exactly-once source tasks
            res["mm2_transactional_producers"] = grep_count(
                work / "mm2.log", r"transactional\.id = (?!null)\S*MirrorSourceConnector")
            res["mm2_eos_task_lines"] = grep_count(work / "mm2.log",
                                                   r"ExactlyOnceWorkerSourceTask\{id=MirrorSourceConnector-\d+\} "
                                                   r"Source task finished initialization")
        res["work"] = str(work)
        log(f"{engine}: {summarise(res)}")
        return res

    # --- the brokers' own tools, the same copy
    def limit_run(self, d: "Data") -> dict:
        records, size, partitions = d.records, d.size, d.partitions
        work, _ = self.next_run("limit")
        fresh_cluster("bdst")
        targets = [f"limit.{t}" for t in d.topics]
        self.create(DST, d.per_topic, *targets)
        interval = "100" if partitions <= 100 else "500"
        watcher = spawn(self.tools.tool("watch", DST, ",".join(targets), str(records), interval,
                                        str(self.args.timeout)), stdout=subprocess.PIPE)
        lines = Lines(watcher, work / "watch.log")
        time.sleep(1.5)
        group = f"bench-limit-{self.run_no}"
        which = ["--topic", d.topics[0]] if len(d.topics) == 1 else ["--include", "|".join(d.topics)]
        cons = spawn(self.tools.kafka_tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", SRC,
                                           *which, "--num-records", str(records), "--group", group,
                                           "--timeout", "60000"), work / "consumer.log")
        props = list(LIMIT_PROPS) + (ROUND_ROBIN_PROPS if d.per_topic > 100 else [])
        if len(d.topics) == 1:
            prod = spawn(self.tools.kafka_tool(
                "org.apache.kafka.tools.ProducerPerformance", "--topic", targets[0], "--num-records", str(records),
                "--payload-file", str(payload_file(size)), "--throughput", "-1", "--bootstrap-server", DST,
                "--command-property", *props, heap="-Xmx4g" if d.per_topic > 100 else "-Xmx1g"),
                work / "producer.log")
        else:  # producer-perf writes one topic: BenchTool's equivalent spreads the records over all of them
            props = [x for x in props if not x.startswith("partitioner.class")]
            # heap: the Java producer holds an lz4 block buffer (64 KiB and more) per open batch
            prod = spawn(self.tools.java("BenchTool", "produce", DST, ",".join(targets), str(d.per_topic),
                                         str(records), str(payload_file(size)), *props, heap="-Xmx4g"),
                         work / "producer.log")
        t0 = time.time()
        res = {"engine": "limit", "records": records, "size": size, "partitions": partitions,
               "topics": len(d.topics)}
        prod_exit = None
        while True:
            if prod.poll() is not None:
                prod_exit = prod_exit or time.time()
                if time.time() - prod_exit > 30:
                    res["error"] = f"the producer exited ({prod.returncode}) and the target is incomplete"
                    break
            line = lines.get(1.0)
            if line is None:
                res["error"] = "watcher ended without 'done'"
                break
            if line:
                ev, ms, *_ = line.split()
                if ev == "first":
                    res["first_s"] = int(ms) / 1000 - t0
                elif ev == "done":
                    res["done_s"] = int(ms) / 1000 - t0
                    break
                elif ev == "timeout":
                    res["error"] = "timeout"
                    break
        for p in (prod, cons):
            try:
                p.wait(timeout=300)
            except subprocess.TimeoutExpired:
                stop(p)
        stop(watcher)
        cons_rate = parse_consumer_perf((work / "consumer.log").read_text(errors="replace"))
        if "first_s" in res and "done_s" in res:
            copy = res["done_s"] - res["first_s"]
            res["producer_rate"] = records / copy if copy > 0 else None
            res["consumer_rate"] = cons_rate
            rates = [r for r in (res["producer_rate"], cons_rate) if r]
            res["rate"] = min(rates) if rates else None
            res["mb_s"] = res["rate"] * size / 1e6 if res["rate"] else None
            res["done_s"] = max(res["done_s"], 0)
        res["work"] = str(work)
        log(f"limit: {summarise(res)} (producer {fmt_rate(res.get('producer_rate'))}, "
            f"consumer {fmt_rate(res.get('consumer_rate'))})")
        return res

    # --- scenarios
    def scenario_copy(self, name: str, sc: dict) -> dict:
        d = Data(name, sc)
        fresh_cluster("bsrc")
        self.write_source(d)
        if d.framed:
            self.start_registries(d)
        rounds = []
        for r in range(self.args.runs):
            rnd = {}
            for e in self.engines(sc):
                if e == "limit":
                    rnd[e] = self.limit_run(d)
                else:
                    rnd[e] = self.copy_run(e, d)
            rounds.append(rnd)
        if d.framed:
            run_registry_sh("down")
        return {"rounds": rounds}

    def start_registries(self, d: "Data") -> None:
        """One registry per cluster (scripts/registry.sh, fresh: in-memory storage), ID 1 on the source
        being the values' schema and ID 1 on the target a filler, so that translation changes every ID."""
        run_registry_sh("down")
        self.registries = {}
        for side, port in (("src", 39181), ("dst", 39281)):
            out = run_registry_sh("up", f"bench-{side}", str(port))
            self.registries[side] = out.strip().split("=", 1)[1]
        order = '{"type":"record","name":"Order","fields":[{"name":"note","type":"string"}]}'
        for side, subject in (("src", f"{d.topics[0]}-value"), ("dst", "bench-filler-value")):
            body = json.dumps({"schema": order if side == "src" else '"int"'}).encode()
            req = urllib.request.Request(f"{self.registries[side]}/subjects/{subject}/versions", data=body,
                                         headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                got = json.loads(r.read())["id"]
            if got != 1:
                die(f"the {side} registry gave ID {got} to the first schema, not 1")
        log(f"schema registries: {self.registries}")

    def scenario_wan(self, name: str, sc: dict) -> dict:
        """The copy over a long link: the source behind Toxiproxy, each round trip in turn, every engine at
        each. Round trip 0 is the same path through the proxy without latency (the proxy's own cost is in
        every row)."""
        d = Data(name, sc)
        fresh_cluster("bsrc", {"FERRY_KAFKA_LINK": f"{LINK_BIND_PORT}:{LINK_PORT}"})
        self.write_source(d)
        link = Toxiproxy(self.work)
        rtts = [int(x) for x in str(sc["rtts"]).split(",")]
        rounds = []
        for r in range(self.args.runs):
            rnd = {}
            for rtt in rtts:
                link.shape(rtt, sc.get("bandwidth"))
                for e in self.engines(sc):
                    res = self.copy_run(e, d, src=LINK)
                    res["rtt_ms"] = rtt
                    rnd[f"{e}@{rtt}"] = res
            rounds.append(rnd)
        stop(link.proc)
        return {"rounds": rounds, "rtts": rtts}

    def scenario_latency(self, name: str, sc: dict) -> dict:
        fresh_cluster("bsrc")
        rounds = []
        n = sc["rate"] * sc["duration"]
        for r in range(self.args.runs):
            rnd = {}
            for e in self.engines(sc):
                rnd[e] = self.latency_run(e, sc, n)
            rounds.append(rnd)
        return {"rounds": rounds}

    def latency_run(self, engine: str, sc: dict, n: int) -> dict:
        work, alias = self.next_run(engine)
        topic = f"lat-{self.run_no}"
        self.create(SRC, sc["partitions"], topic)
        res = {"engine": engine, "rate": sc["rate"], "duration_s": sc["duration"], "size": sc["size"]}
        proc = None
        if engine == "limit":
            watched, bootstrap = topic, SRC
        else:
            fresh_cluster("bdst")
            watched, bootstrap = f"east.{topic}", DST
            watcher = spawn(self.tools.tool("watch", DST, watched, "1", "100", "300"), stdout=subprocess.PIPE)
            wl = Lines(watcher, work / "watch.log")
            time.sleep(1.5)
            t0 = time.time()
            if engine.startswith("ferry"):
                extra = {"delivery": "exactly_once"} if engine == "ferry-eos" else {}
                proc = self.ferry().start(work, "east", [ferry_flow("east", alias, [topic], **extra)],
                                          {"east": SRC, alias: DST})
            else:
                proc = MM2(self.tools).start(work, mm2_props([("east", alias, topic)], {"east": SRC, alias: DST}))
            self.tools.call("produce-one", SRC, topic)
            while True:
                line = wl.get(1.0)
                if line is None or (line and line.startswith("timeout")) or proc.poll() is not None:
                    stop(proc)
                    stop(watcher)
                    res["error"] = "the primer record never arrived"
                    log(f"{engine}: {res['error']} (log: {work})")
                    return res
                if line and line.startswith("done"):
                    res["primer_s"] = int(line.split()[1]) / 1000 - t0
                    break
            stop(watcher)
        count_from = now_ms() + 3000
        stats_from = count_from + sc["warmup"] * 1000
        cons = spawn(self.tools.tool("latency", bootstrap, watched, str(count_from), str(stats_from), str(n),
                                     str(sc["duration"] + 300)), stdout=subprocess.PIPE)
        cl = Lines(cons, work / "latency.log")
        line = cl.get(60)
        if not line or not line.startswith("ready"):
            die(f"latency consumer not ready: {line}")
        while now_ms() < count_from:
            time.sleep(0.01)
        cpu0 = proc_cpu(proc.pid) if proc else None
        t_load = time.time()
        prod = self.produce(topic, n, sc["size"], sc["partitions"], None, throughput=sc["rate"],
                            props=LATENCY_SOURCE_PROPS)
        pout = prod.communicate()[0].decode()
        (work / "producer.log").write_text(pout)
        t_end = time.time()
        if proc:
            res["cpu_load_pct"] = 100 * (proc_cpu(proc.pid) - cpu0) / (t_end - t_load)
            st = proc_status(proc.pid)
            res["peak_rss_mib"] = st.get("VmHWM", 0) / 2**20
            res["threads"] = st.get("Threads")
        m = re.search(r"([\d.]+) records/sec", pout.strip().splitlines()[-1] if pout.strip() else "")
        res["produced_rate"] = float(m.group(1)) if m else None
        result = None
        while True:
            line = cl.get(400)
            if line is None or line is False:
                break
            if line.startswith("{"):
                result = json.loads(line)
        stop(cons)
        stop(proc)
        if result:
            res.update(result)
            if result.get("counted", 0) < n:
                res["error"] = f"{result.get('counted')} of {n} records arrived"
        else:
            res["error"] = "no result from the latency consumer"
        res["work"] = str(work)
        log(f"latency {engine}: p50 {res.get('p50_ms')} ms, p99 {res.get('p99_ms')} ms, "
            f"CPU {fmt(res.get('cpu_load_pct'), '.1f')} % of a core {res.get('error', '')}")
        return res

    def flow_counts(self, sc: dict) -> dict[str, list[int]]:
        """Flow counts per engine: ferry's from --flows (default the scenario's), MM2's from --mm2-flows
        (default: the scenario's, or --flows when only that is given)."""
        def parse(v) -> list[int]:
            return [int(x) for x in str(v).split(",") if x.strip()]
        ferry = parse(self.args.flows or sc["flows"])
        mm2 = parse(self.args.mm2_flows or (self.args.flows if self.args.flows else sc.get("mm2_flows", sc["flows"])))
        return {"ferry": ferry, "mm2": mm2}

    def scenario_flows(self, name: str, sc: dict) -> dict:
        per_engine = self.flow_counts(sc)
        engines = self.engines(sc)
        counts = sorted({n for e in engines for n in per_engine.get(e, [])})
        rounds = []
        for r in range(self.args.runs):
            rnd = {}
            for n in counts:  # both engines at a count back to back: they meet the same machine load
                for e in engines:
                    if n in per_engine.get(e, []):
                        rnd[f"{e}@{n}"] = self.flows_run(e, n, sc)
            rounds.append(rnd)
        return {"rounds": rounds, "counts": counts, "per_engine": {e: per_engine[e] for e in engines}}

    def flows_run(self, engine: str, n: int, sc: dict) -> dict:
        work, _ = self.next_run(f"{engine}-{n}flows")
        fresh_cluster("bsrc")  # the source's `heartbeats` must not hold an earlier run's reverse heartbeats
        fresh_cluster("bdst")
        topics = [f"idle-{k}" for k in range(1, n + 1)]
        self.create(SRC, 1, *topics)
        clusters = {**{f"e{k}": SRC for k in range(1, n + 1)}, **{f"w{k}": DST for k in range(1, n + 1)}}
        if engine == "mm2" and sc.get("mm2_precreate", True):
            self.mm2_internal_topics([(f"e{k}", f"w{k}") for k in range(1, n + 1)])
        hb = spawn(self.tools.tool("heartbeats", DST, str(n), str(now_ms()), str(self.args.timeout)),
                   stdout=subprocess.PIPE)
        hl = Lines(hb, work / "heartbeats.log")
        time.sleep(1.5)
        t0 = time.time()
        hb_s = sc.get("heartbeats", 1)
        hb_s = int(hb_s) if float(hb_s).is_integer() else hb_s  # MM2's interval is a whole number
        if engine == "ferry":
            extra = {} if hb_s == 1 else {"emit_heartbeats_interval_seconds": hb_s}
            proc = self.ferry().start(work, "e1", [ferry_flow(f"e{k}", f"w{k}", [f"idle-{k}"], **extra)
                                                   for k in range(1, n + 1)], clusters)
        else:
            extra = {} if hb_s == 1 else {"emit.heartbeats.interval.seconds": hb_s}
            proc = MM2(self.tools).start(work, mm2_props([(f"e{k}", f"w{k}", f"idle-{k}") for k in range(1, n + 1)],
                                                         clusters, extra=extra, reverse_extra=extra))
        res = {"engine": engine, "flows": n, "heartbeats_interval_s": hb_s}
        while True:
            line = hl.get(1.0)
            if proc.poll() is not None:
                res["error"] = f"{engine} exited with {proc.returncode}"
                break
            if line is None or (line and line.startswith("timeout")):
                res["error"] = f"not every flow heartbeating within {self.args.timeout} s ({line})"
                break
            if line and line.startswith("ready"):
                res["ready_s"] = int(line.split()[1]) / 1000 - t0
                break
        stop(hb)
        if "error" not in res:
            time.sleep(sc["settle"])
            window = CpuWindow(self.src_pids() + [proc.pid])
            per_thread0 = thread_sample(proc.pid)
            c0, t1 = proc_cpu(proc.pid), time.time()
            threads = []
            while time.time() - t1 < sc["window"]:
                threads.append(proc_status(proc.pid).get("Threads", 0))
                time.sleep(1)
            c1, t2 = proc_cpu(proc.pid), time.time()
            per_thread1 = thread_sample(proc.pid)
            st = proc_status(proc.pid)
            groups = thread_groups(per_thread0, per_thread1, t2 - t1)
            res.update(idle_cpu_pct=100 * (c1 - c0) / (t2 - t1), threads=max(threads), rss_mib=st["VmRSS"] / 2**20,
                       peak_rss_mib=st["VmHWM"] / 2**20, others_cores=window.others_cores([proc.pid]),
                       window_s=t2 - t1, thread_groups=groups,
                       wakeups_s=sum(g["wakeups_s"] for g in groups), load=os.getloadavg()[0])
        stop(proc)
        res["work"] = str(work)
        log(f"flows {engine} x{n}: {res.get('threads')} threads, idle CPU {fmt(res.get('idle_cpu_pct'), '.2f')} %, "
            f"{fmt(res.get('wakeups_s'), ',.0f')} wake-ups/s, RSS {fmt(res.get('rss_mib'), '.0f')} MiB, ready after "
            f"{fmt(res.get('ready_s'), '.1f')} s {res.get('error', '')}")
        return res

    def scenario_busy(self, name: str, sc: dict) -> dict:
        """`flows-busy`: the same data (n topics) copied by n flows, a topic each, and by one flow."""
        n = sc["flows"]
        topics = [f"busy-{k}" for k in range(1, n + 1)]
        fresh_cluster("bsrc")
        t = time.time()
        self.create(SRC, sc["partitions"], *topics)
        out = self.tools.call("produce", SRC, ",".join(topics), str(sc["partitions"]), str(sc["records"]),
                              str(payload_file(sc["size"])), *SOURCE_PROPS, "compression.type=none")
        log(f"source: {sc['records']:,} records of {sc['size']} B over {n} topics of {sc['partitions']} partitions "
            f"in {time.time() - t:.1f} s ({out.strip().splitlines()[-1]})")
        rounds = []
        for r in range(self.args.runs):
            rnd = {}
            for e in self.engines(sc):
                for k in (1, n):  # one flow first, then n, back to back: the same machine load
                    rnd[f"{e}@{k}"] = self.busy_run(e, k, topics, sc)
            rounds.append(rnd)
        return {"rounds": rounds, "counts": [1, n]}

    def busy_run(self, engine: str, k: int, topics: list[str], sc: dict) -> dict:
        """`k` = 1: flow e1->w1 copies every topic; otherwise flow eK->wK copies busy-K. CPU and copy rate
        over the whole copy and over its steady part (10 % to 90 % of the records on the target, where
        every flow is running: the n flows' group joins do not end at the same moment)."""
        records = sc["records"]
        work, _ = self.next_run(f"{engine}-{k}flows")
        fresh_cluster("bdst")
        if k == 1:
            pairs = [("e1", "w1", topics)]
        else:
            pairs = [(f"e{i}", f"w{i}", [t]) for i, t in enumerate(topics, 1)]
        clusters = {**{s: SRC for s, _, _ in pairs}, **{d: DST for _, d, _ in pairs}}
        remote = ",".join(f"{s}.{t}" for s, _, ts in pairs for t in ts)
        watcher = spawn(self.tools.tool("watch", DST, remote, str(records), "100", str(self.args.timeout), "100"),
                        stdout=subprocess.PIPE)
        lines = Lines(watcher, work / "watch.log")
        time.sleep(1.5)
        window = CpuWindow(self.src_pids() + [watcher.pid])
        t0 = time.time()
        if engine == "ferry":
            proc = self.ferry().start(work, "e1", [ferry_flow(s, d, ts) for s, d, ts in pairs], clusters)
        else:
            proc = MM2(self.tools).start(work, mm2_props([(s, d, ", ".join(ts)) for s, d, ts in pairs], clusters))
        res = {"engine": engine, "flows": k, "records": records, "size": sc["size"],
               "partitions": sc["partitions"] * len(topics), "topics": len(topics)}
        samples = []  # (seconds since start, records on the target, CPU seconds of the replicator)
        peak_threads = 0
        deadline = t0 + self.args.timeout
        while True:
            peak_threads = max(peak_threads, proc_status(proc.pid).get("Threads", 0))
            line = lines.get(0.2)
            if line is None:
                res["error"] = "watcher ended without 'done'"
                break
            if line:
                ev, ms, *rest = line.split()
                if ev in ("first", "count", "done"):
                    samples.append((int(ms) / 1000 - t0, int(rest[0]), proc_cpu(proc.pid)))
                if ev == "first":
                    res["first_s"] = int(ms) / 1000 - t0
                elif ev == "done":
                    res["done_s"] = int(ms) / 1000 - t0
                    res["cpu_s"] = proc_cpu(proc.pid)
                    st = proc_status(proc.pid)
                    res["peak_rss_mib"] = st.get("VmHWM", 0) / 2**20
                    res["threads"] = max(peak_threads, st.get("Threads", 0))
                    res["others_cores"] = window.others_cores([proc.pid])
                    break
                elif ev == "timeout":
                    res["error"] = f"timeout with {rest} records on the target"
                    break
            if proc.poll() is not None:
                res["error"] = f"{engine} exited with {proc.returncode} (log: {work})"
                break
            if time.time() > deadline:
                res["error"] = f"no completion within {self.args.timeout} s"
                break
        stop(proc)
        stop(watcher)
        if "first_s" in res and "done_s" in res:
            copy = res["done_s"] - res["first_s"]
            res["rate"] = records / copy if copy > 0 else None
            res["cpu_us_per_record"] = res["cpu_s"] / records * 1e6
            lo = next((s for s in samples if s[1] >= records * 0.1), None)
            hi = next((s for s in samples if s[1] >= records * 0.9), None)
            if lo and hi and hi[0] > lo[0] and hi[1] > lo[1]:
                res["steady_rate"] = (hi[1] - lo[1]) / (hi[0] - lo[0])
                res["steady_cpu_us_per_record"] = (hi[2] - lo[2]) / (hi[1] - lo[1]) * 1e6
                res["steady_cpu_cores"] = (hi[2] - lo[2]) / (hi[0] - lo[0])
        res["samples"] = samples
        res["work"] = str(work)
        log(f"busy {engine} x{k}: first record after {fmt(res.get('first_s'), '.1f')} s, done after "
            f"{fmt(res.get('done_s'), '.1f')} s, {fmt_rate(res.get('rate'))} (steady {fmt_rate(res.get('steady_rate'))}), "
            f"CPU {fmt(res.get('cpu_s'), '.2f')} s = {fmt(res.get('cpu_us_per_record'), '.1f')} µs/record (steady "
            f"{fmt(res.get('steady_cpu_us_per_record'), '.1f')}), {res.get('threads')} threads {res.get('error', '')}")
        return res

    def mm2_internal_topics(self, pairs: list[tuple[str, str]]) -> None:
        """The Connect topics of MM2's herders, created before it starts, as MM2 would create them (its
        defaults: offsets 25 partitions, status 5, configs 1, all compacted). Herder s->t keeps
        mm2-{configs,offsets,status}.s.internal on t; every flow eK->wK has its herder and the reverse
        wK->eK heartbeat herder. Started together, 100 herders (50 flows) each create their three
        topics at once and wait at most a fixed time for their metadata; on this box the controller
        was slower than that, and the herders that timed out exited for good (bench/results.md)."""
        t = time.time()
        for herders, bootstrap in (([s for s, _ in pairs], DST), ([d for _, d in pairs], SRC)):
            for kind, parts in (("offsets", 25), ("status", 5), ("configs", 1)):
                self.create(bootstrap, parts, *[f"mm2-{kind}.{a}.internal" for a in herders],
                            configs="cleanup.policy=compact")
        log(f"MM2's {6 * len(pairs)} Connect topics created beforehand in {time.time() - t:.1f} s")

    def scenario_checkpoint(self, name: str, sc: dict) -> dict:
        fresh_cluster("bsrc")
        parts, step, syncs = sc["partitions"], sc["step"], sc["syncs"]
        last = (syncs // parts - 1) * step  # upstream offset of each partition's newest sync
        # Groups lagging the newest sync by about 1,000 and 100,000 records and by half the history, and a
        # deep one in the oldest part of the history (near upstream offset 1,000,000 of 12,499,900, far
        # outside the newest syncs ferry reads first), each between two syncs (offset = a sync's + step/2),
        # on every partition of the (empty) topic.
        groups = {}
        for label, lag in (("lag-1000", 1000), ("lag-100000", 100_000), ("lag-half", last // 2),
                           ("deep", last - min(1_000_000, last // 4))):
            groups[label] = max(0, (last - lag) // step * step) + step // 2
        self.create(SRC, parts, "ckpt")
        for g, off in groups.items():
            self.tools.call("commit", SRC, g, "ckpt", str(parts), str(off))
        rounds = []
        for r in range(self.args.runs):
            rnd = {}
            for e in self.engines(sc):
                rnd[e] = self.checkpoint_run(e, parts, step, syncs, groups)
            rounds.append(rnd)
        return {"rounds": rounds, "groups": groups, "last_upstream": last}

    def checkpoint_run(self, engine: str, parts: int, step: int, syncs: int, groups: dict[str, int]) -> dict:
        work, alias = self.next_run(engine)
        fresh_cluster("bdst")
        # A target in use already has __consumer_offsets and __transaction_state; a fresh one creates them
        # on first use, seconds that either engine's first group join or transaction would otherwise wait.
        log(f"target warmed (a group commit and a transaction) in {self.tools.call('warm', DST).split()[-1]} ms")
        out = self.tools.call("syncs", SRC, f"mm2-offset-syncs.{alias}.internal", "ckpt", str(parts), str(syncs),
                              str(step))
        info = json.loads(out.strip().splitlines()[-1])
        log(f"{syncs} offset syncs written in {info['write_s']} s")
        cw = spawn(self.tools.tool("checkpoints", DST, "east.checkpoints.internal", ",".join(groups), str(parts),
                                   str(self.args.timeout)), stdout=subprocess.PIPE)
        cl = Lines(cw, work / "checkpoints.log")
        time.sleep(1.5)
        t0 = time.time()
        if engine == "ferry":
            proc = self.ferry().start(work, "east", [ferry_flow("east", alias, ["ckpt"],
                                                                emit_checkpoints_interval_seconds=1)],
                                      {"east": SRC, alias: DST})
        else:
            proc = MM2(self.tools).start(work, mm2_props([("east", alias, "ckpt")], {"east": SRC, alias: DST},
                                                         extra={"emit.checkpoints.interval.seconds": 1}))
        res = {"engine": engine, "syncs": syncs, "partitions": parts, "groups": groups}
        while True:
            line = cl.get(1.0)
            if proc.poll() is not None:
                res["error"] = f"{engine} exited with {proc.returncode}"
                break
            if line is None:
                res.setdefault("error", "checkpoint reader ended")
                break
            if not line:
                continue
            if line.startswith("first"):
                res["first_checkpoint_ms"] = int(line.split()[1])
                res["first_checkpoint_s"] = res["first_checkpoint_ms"] / 1000 - t0
                res["cpu_at_first_s"] = proc_cpu(proc.pid)
            elif line.startswith("group "):
                _, ms, g = line.split()[:3]
                res.setdefault("group_s", {})[g] = int(ms) / 1000 - t0
            elif line.startswith("all"):
                res["all_checkpoints_s"] = int(line.split()[1]) / 1000 - t0
            elif line.startswith("timeout"):
                res["error"] = f"not every group checkpointed on every partition within {self.args.timeout} s"
            elif line.startswith("{"):
                cps = json.loads(line)["checkpoints"]
                res["checkpoints"] = cps
                # syncs map upstream = downstream, so a consumer that failed over would re-read
                # (group offset - checkpointed downstream offset) records per partition
                for g, off in groups.items():
                    if g in cps:
                        res[f"rereads_{g}"] = sum(off - c["downstream"] for c in cps[g])
                break
        st = proc_status(proc.pid)
        res["peak_rss_mib"] = st.get("VmHWM", 0) / 2**20
        res["cpu_s"] = proc_cpu(proc.pid)
        stop(proc)
        stop(cw)
        # when the engine's checkpoint machinery started, from its log: ferry's checkpoint computer logs
        # "checkpoint computer starting" (older ferry binaries do not: their flow's start, "starting flow",
        # an upper bound); MM2's checkpoint task logs "Starting task MirrorCheckpointConnector-0"
        if engine == "ferry":
            started = log_time(work / "ferry.log", "checkpoint computer starting")
            res["task_start_logged"] = started is not None
            started = started or log_time(work / "ferry.log", "starting flow")
        else:
            started = log_time(work / "mm2.log", "Starting task MirrorCheckpointConnector-0")
        if engine == "ferry" and started:
            # ferry's start-up split: when the offset-sync backlog was read to its end, and when the
            # published checkpoints were loaded (first read, before the checkpoint producer, which starts
            # with the first group), both after the computer started; the history is complete when both
            # are done
            log_text = (work / "ferry.log").read_text(errors="replace")
            m = re.search(r"offset-sync history complete.*read_s=([\d.]+)", log_text)
            if m:
                res["syncs_read_s"] = float(m.group(1))
            loaded = log_time(work / "ferry.log", "loaded published checkpoints")
            if loaded:
                res["checkpoints_loaded_s"] = loaded - started
        if started and "first_checkpoint_ms" in res:
            res["first_after_task_start_s"] = res["first_checkpoint_ms"] / 1000 - started
            res["task_start_s"] = started - t0
            if "all_checkpoints_s" in res:
                res["all_after_task_start_s"] = res["all_checkpoints_s"] + t0 - started
        res["work"] = str(work)
        log(f"checkpoint {engine}: first after {fmt(res.get('first_checkpoint_s'), '.1f')} s "
            f"({fmt(res.get('first_after_task_start_s'), '.1f')} s after its checkpoint task started), all after "
            f"{fmt(res.get('all_checkpoints_s'), '.1f')} s, re-reads "
            f"{[res.get(f'rereads_{g}') for g in groups]} {res.get('error', '')}")
        return res

    def engines(self, sc: dict) -> list[str]:
        return (self.args.engines or sc["engines"]).split(",")

    # --- profile
    def profile(self, name: str, sc: dict) -> None:
        if not shutil.which("perf"):
            die("perf not found: apt-get install linux-perf")
        for t in ("inferno-collapse-perf", "inferno-flamegraph"):
            if not shutil.which(t):
                die(f"{t} not found: cargo install inferno")
        d = Data(name, sc)
        fresh_cluster("bsrc")
        self.write_source(d)
        work, alias = self.next_run("ferry-perf")
        fresh_cluster("bdst")
        remote = ",".join(f"east.{t}" for t in d.topics)
        watcher = spawn(self.tools.tool("watch", DST, remote, str(sc["records"]), "200", str(self.args.timeout)),
                        stdout=subprocess.PIPE)
        lines = Lines(watcher, work / "watch.log")
        time.sleep(1.5)
        t0 = time.time()
        data = work / "perf.data"
        # ferry runs under perf (attaching with -p misses the threads ferry starts later)
        perf = self.ferry().start(work, "east", [ferry_flow("east", alias, d.topics, **d.ferry_flow)], {"east": SRC, alias: DST},
                                  wrap=["perf", "record", "-F", str(self.args.freq), "-g", "--call-graph",
                                        "dwarf,16384", "-o", str(data), "--"])
        pid = None
        for _ in range(100):
            try:
                kids = Path(f"/proc/{perf.pid}/task/{perf.pid}/children").read_text().split()
            except OSError:
                kids = []
            if kids:
                pid = int(kids[0])
                break
            time.sleep(0.05)
        if pid is None:
            die(f"ferry did not start under perf (log: {work})")

        def alive():
            return Path(f"/proc/{pid}").exists()

        res = {}
        while True:
            line = lines.get(1.0)
            if line is None or not alive():
                die(f"profile run failed (log: {work})")
            if line and line.startswith("first"):
                res["first_s"] = int(line.split()[1]) / 1000 - t0
            if line and line.startswith("done"):
                res["done_s"] = int(line.split()[1]) / 1000 - t0
                res["cpu_s"] = proc_cpu(pid)
                break
        os.kill(pid, signal.SIGTERM)  # ferry stops gracefully, then perf writes its data and exits
        stop(perf, signal.SIGCONT, timeout=300)
        stop(watcher)
        date = dt.date.today().isoformat()
        out = ROOT / "bench" / f"profile-{date}-{name}"
        log("perf script | inferno (this takes a while)")
        folded = work / "folded.txt"
        with open(folded, "w") as f:
            ps = subprocess.Popen(["perf", "script", "-i", str(data), "--no-inline"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
            subprocess.run(["inferno-collapse-perf", "--all"], stdin=ps.stdout, stdout=f, check=True)
            ps.wait()
        with open(f"{out}.svg", "w") as f:
            subprocess.run(["inferno-flamegraph", "--title", f"ferry, {name}: {sc['what']}", str(folded)],
                           stdout=f, check=True)
        shutil.copy(folded, f"{out}.folded")
        subprocess.run(["gzip", "-f", f"{out}.folded"], check=True)

        def report(*a):
            return run(["perf", "report", "-i", str(data), "--stdio", "--no-inline", *a], check=False)

        copy = res["done_s"] - res["first_s"]
        md = [f"# Profile of ferry, {name} ({date})", "",
              f"`scripts/bench.sh profile {name}`: {sc['what']}; ferry `{self.ferry_rev}`; "
              f"`perf record -F {self.args.freq} -g --call-graph dwarf` attached to ferry from its start until "
              f"the target held every record. Copy {copy:.1f} s ({sc['records'] / copy:,.0f} rec/s under perf), "
              f"ferry CPU {res['cpu_s']:.2f} s. Flamegraph: `{out.name}.svg` (folded stacks: `{out.name}.folded.gz`).",
              "", machine_line(), "",
              "## By thread (self time)", "", "```", top_lines(report("--no-children", "--sort", "comm", "-g", "none"),
                                                               20), "```",
              "", "## By library (self time)", "", "```", top_lines(report("--no-children", "--sort", "dso", "-g", "none"),
                                                                  20),
              "```", "", "## Top functions (self time)", "", "```",
              top_lines(report("--no-children", "--sort", "dso,sym", "-g", "none"), 40), "```", "",
              "## Top functions including callees (children)", "", "```",
              top_lines(report("--children", "--sort", "sym", "-g", "none"), 40), "```", ""]
        Path(f"{out}.md").write_text("\n".join(md))
        log(f"wrote {out}.md and {out}.svg")


# ------------------------------------------------------------------------------------------ helpers

def top_lines(report: str, n: int) -> str:
    rows = [l for l in report.splitlines() if l.strip() and not l.startswith("#")]
    return "\n".join(rows[:n])


class BatchSampler:
    """ferry's record producer's batches while it copies: `ferry_client_batch_records` / `_bytes` (librdkafka's
    statistics, average per statistics window) scraped from /metrics once a second; the median and the
    largest of the windows that saw batches."""

    SERIES = {"ferry_client_batch_records": "batch_records", "ferry_client_batch_bytes": "batch_bytes"}

    def __init__(self, port: int):
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.samples: dict[str, list[float]] = {k: [] for k in self.SERIES.values()}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        import urllib.request
        while not self.done.wait(1.0):
            try:
                text = urllib.request.urlopen(self.url, timeout=2).read().decode()
            except OSError:
                continue
            for line in text.splitlines():
                name = line.split("{", 1)[0]
                if name in self.SERIES and 'client="record-producer"' in line:
                    v = float(line.rsplit(" ", 1)[1])
                    xs = self.samples[self.SERIES[name]]
                    # A window's figure stays until the next window: keep each window once.
                    if v > 0 and (not xs or xs[-1] != v):
                        xs.append(v)

    def finish(self) -> dict:
        # The window the copy ended in is published up to one statistics interval (15 s) later.
        seen, deadline = len(self.samples["batch_records"]), time.time() + 17
        while len(self.samples["batch_records"]) == seen and time.time() < deadline:
            time.sleep(0.5)
        self.done.set()
        self.thread.join(5)
        out = {}
        for k, xs in self.samples.items():
            if xs:
                out[f"{k}_median"] = median(xs)
                out[f"{k}_max"] = max(xs)
        return out


def ferry_transactions(port: int) -> dict:
    """An exactly-once ferry's transactions so far, from /metrics: committed and aborted ones, and the time
    its commits took (records acknowledged, progress written, commit returned) in all."""
    import urllib.request
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        key = {"ferry_transaction_commit_seconds_sum": "transaction_commit_s",
               "ferry_transaction_commit_seconds_count": "transaction_commits"}.get(name.split("{", 1)[0])
        if name.startswith("ferry_transactions_total"):
            m = re.search(r'result="(\w+)"', name)
            key = f"transactions_{m.group(1)}" if m else None
        if key:
            out[key] = out.get(key, 0) + float(value)
    return out


# ferry's start-up, from its log: (result key, the first (or last) line containing the text).
STARTUP_MARKS = [
    ("startup_first_topic_created_s", "created remote topic", False),
    ("startup_last_topic_created_s", "created remote topic", True),
    ("startup_assigned_s", "the copier group assigned partitions", False),
    ("startup_partitions_started_s", "copier partitions started", False),
    ("startup_writable_s", "every remote partition takes writes", False),
]


def ferry_startup(path: Path, t0: float) -> dict:
    out = {}
    for key, needle, last in STARTUP_MARKS:
        t = log_time(path, needle, last=last)
        if t is not None:
            out[key] = t - t0
    return out


def log_time(path: Path, needle: str, last: bool = False) -> float | None:
    """Epoch seconds of the first log line containing `needle` (ferry: RFC 3339 UTC; log4j: local ISO 8601)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    lines = text.splitlines()
    for line in reversed(lines) if last else lines:
        if needle in line:
            m = re.match(r"\[?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)[.,](\d+)(Z?)", line)
            if not m:
                return None
            t = dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
            t = t.replace(tzinfo=dt.timezone.utc) if m.group(3) else t.astimezone()
            return t.timestamp() + float("0." + m.group(2))
    return None


def grep_count(path: Path, pattern: str) -> int:
    try:
        return len(re.findall(pattern, path.read_text(errors="replace")))
    except OSError:
        return 0


def parse_consumer_perf(out: str) -> float | None:
    """fetch.nMsg.sec of kafka-consumer-perf-test (the rate without the group join)."""
    lines = [l for l in out.splitlines() if l.strip()]
    for i, l in enumerate(lines):
        if "fetch.nMsg.sec" in l and i + 1 < len(lines):
            head = [h.strip() for h in l.split(",")]
            vals = [v.strip() for v in lines[i + 1].split(",")]
            try:
                return float(vals[head.index("fetch.nMsg.sec")])
            except (ValueError, IndexError):
                return None
    return None


def fmt(v, spec=",.0f", unit="") -> str:
    if v is None:
        return "-"
    return f"{format(v, spec)}{unit}"


def fmt_rate(v) -> str:
    return fmt(v, ",.0f", " rec/s")


def summarise(r: dict) -> str:
    if "error" in r:
        return f"FAILED: {r['error']}"
    return (f"first record after {fmt(r.get('first_s'), '.1f')} s, done after {fmt(r.get('done_s'), '.1f')} s, "
            f"{fmt_rate(r.get('rate'))}, {fmt(r.get('mb_s'), '.1f')} MB/s, peak RSS {fmt(r.get('peak_rss_mib'))} MiB, "
            f"CPU {fmt(r.get('cpu_s'), '.2f')} s ({fmt(r.get('cpu_at_first_s'), '.2f')} s of it before the first "
            f"record), others {fmt(r.get('others_cores'), '.2f')} cores")


def resolve_ferry(args) -> tuple[Path, str]:
    """The ferry binary to measure and a description of its revision."""
    explicit = args.ferry_bin or os.environ.get("FERRY_BIN")
    if explicit:
        b = Path(explicit).resolve()
        v = run([str(b), "--version"], check=False).strip()
        return b, f"{v or b} (FERRY_BIN={b})"
    if args.ferry_rev:
        sha = run(["git", "-C", str(ROOT), "rev-parse", args.ferry_rev]).strip()
        binary = CACHE / "bin" / f"ferry-{sha[:12]}"
        if not binary.exists():
            src = CACHE / "src" / sha
            if not (src / "Cargo.toml").exists():
                src.mkdir(parents=True, exist_ok=True)
                ar = subprocess.Popen(["git", "-C", str(ROOT), "archive", sha], stdout=subprocess.PIPE)
                subprocess.run(["tar", "-x", "-C", str(src)], stdin=ar.stdout, check=True)
                ar.wait()
            log(f"building ferry {sha[:12]} (exported to {src}; a few minutes the first time)")
            env = dict(os.environ, FERRY_REVISION=sha[:12], CARGO_TARGET_DIR=str(CACHE / "target"))
            r = subprocess.run(["cargo", "build", "--release", "--locked"], cwd=src, env=env)
            if r.returncode != 0:
                die("cargo build failed")
            binary.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(CACHE / "target" / "release" / "ferry", binary)
        return binary, f"{sha[:12]} (git archive of {args.ferry_rev})"
    log("cargo build --release (this tree)")
    r = subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
    if r.returncode != 0:
        die("cargo build --release failed (use --ferry-rev HEAD to build the last commit, or FERRY_BIN)")
    sha = run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"]).strip()
    dirty = run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src", "build.rs", "Cargo.toml",
                 "Cargo.lock"]).strip()
    return ROOT / "target" / "release" / "ferry", sha + (" + uncommitted changes in src/" if dirty else "")


def machine() -> dict:
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) * 1024
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    pom = (ROOT / "pom.xml").read_text()
    kafka = re.search(r"<kafka\.version>(.*?)</kafka\.version>", pom).group(1)
    return {"nproc": os.cpu_count(), "mem_gib": mem / 2**30, "cpu": cpu, "kernel": platform.release(),
            "java": java, "kafka": kafka, "load": os.getloadavg()}


def machine_line() -> str:
    m = machine()
    return (f"Machine: {m['nproc']} cores ({m['cpu']}), {m['mem_gib']:.1f} GiB, Linux {m['kernel']}, {m['java']}, "
            f"Kafka {m['kafka']} (single-node KRaft brokers on the same cores, heap 1 GiB); load average at start "
            f"{m['load'][0]:.2f}.")


# ------------------------------------------------------------------------------------------ reporting

def med(rounds: list[dict], engine: str, key: str):
    return median([r[engine].get(key) for r in rounds if engine in r and "error" not in r[engine]])


def ratio_med(rounds: list[dict], a: str, b: str, key: str, invert=False):
    """Median over rounds of a[key] / b[key] (b/a with invert), each ratio within one round."""
    xs = []
    for r in rounds:
        if a in r and b in r and "error" not in r[a] and "error" not in r[b]:
            x, y = r[a].get(key), r[b].get(key)
            if x and y:
                xs.append(y / x if invert else x / y)
    return median(xs)


def check(v, ok) -> str:
    if v is None:
        return "not measured"
    return "**met**" if ok(v) else "**not met**"


def eos_lines(rounds: list[dict]) -> list[str]:
    """The exactly-once scenario's ratios, goals and checks (bench/results.md)."""
    rate_f = ratio_med(rounds, "ferry-eos", "ferry", "rate")
    rate_m = ratio_med(rounds, "ferry-eos", "mm2-eos", "rate")
    cpu_f = ratio_med(rounds, "ferry-eos", "ferry", "cpu_s")
    rss_m = ratio_med(rounds, "ferry-eos", "mm2-eos", "peak_rss_mib", invert=True)
    cpu_m = ratio_med(rounds, "ferry-eos", "mm2-eos", "cpu_s", invert=True)
    md = ["", f"Ratios: ferry-eos/ferry copy rate **{fmt(rate_f and rate_f * 100, '.0f', ' %')}** (CPU "
              f"{fmt(cpu_f, '.2f', 'x')}), ferry-eos/MM2-eos copy rate **{fmt(rate_m, '.2f', 'x')}**, MM2-eos/ferry-eos "
              f"peak RSS **{fmt(rss_m, '.1f', 'x')}**, CPU **{fmt(cpu_m, '.1f', 'x')}**.",
          "", f"Goals (issue 19, not assertions): ferry-eos ≥ 90 % of ferry's rate: {check(rate_f, lambda v: v >= 0.9)}; "
              f"ferry-eos faster than MM2-eos: {check(rate_m, lambda v: v > 1)}."]
    checks = []
    for e in EOS_ENGINES:
        runs = [r[e] for r in rounds if e in r and "committed_records" in r[e]]
        if not runs:
            continue
        x = runs[0]
        c = (f"{LABELS[e]}: {x['committed_records']:,} records read read_committed of {x['records']:,}, "
             f"{x['target_end_offsets']:,} log-end offsets ({x['target_not_records']:,} offsets that are not records: "
             f"transaction markers and aborted records)")
        if e == "ferry-eos" and "transactions_committed" in x:
            c += (f", {x['transactions_committed']:,.0f} transactions committed "
                  f"({x.get('transactions_aborted', 0):,.0f} aborted) taking "
                  f"{fmt(x.get('transaction_commit_s'), '.1f', ' s')} of commits in all")
        if e == "mm2-eos":
            c += (f"; its log: {x.get('mm2_transactional_producers', 0)} source-task producer(s) with a "
                  f"transactional.id, {x.get('mm2_eos_task_lines', 0)} MirrorSourceConnector task(s) started as "
                  f"ExactlyOnceWorkerSourceTask")
        checks.append(c)
    if checks:
        md += ["", "Exactly-once checks (round 1): " + "; ".join(checks) + "."]
    md += ["", "Engines: ferry at least once (its default); ferry-eos the same flow with `delivery = \"exactly_once\"` "
               "(transaction_interval_ms 100, transaction_max_bytes 16 MiB: the defaults); MM2-eos MM2 dedicated mode "
               "as the other scenarios plus `<target>.exactly.once.source.support = enabled` (KIP-618, the target "
               "herder's worker), `dedicated.mode.enable.internal.rest = true` (KIP-710) and the source read "
               "read_committed: a transaction per task poll (transaction.boundary = poll, the default). The eos engines' "
               "completion is judged on committed records, not on log-end offsets, which count a marker per "
               "partition per transaction: their watcher polls the last stable offsets every 0.1 s and, once these "
               "reach the record count, counts the records read_committed; the copy is complete at the first poll "
               "whose stable offsets cover the last counted record of every partition (CPU taken at that moment)."]
    return md


def render(name: str, sc: dict, result: dict, bench: Bench, command: str) -> str:
    rounds = result["rounds"]
    kind = sc["kind"]
    errors = [f"{k} (round {i + 1}): {v['error']}" for i, r in enumerate(rounds) for k, v in r.items() if "error" in v]
    md = [f"## {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC · {name}: {sc['what']}", "",
          f"`{command}` · runs: {len(rounds)} (medians; ratios are medians of per-round ratios, each round "
          f"running every engine back to back) · ferry {bench.ferry_rev or 'not run'}", "", machine_line()]
    if bench.args.note:
        md += ["", f"Note: {bench.args.note}"]
    md.append("")
    if kind == "copy":
        md += ["| engine | wall incl. startup | to first record | copy rate | MB/s | peak RSS | CPU | CPU while copying "
               "| MB per CPU-s (all, copying) | threads | others' load |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        for e in ("ferry", "ferry-eos", "ferry-translate", "ferry-rules", "mm2", "mm2-eos", "limit"):
            if not any(e in r for r in rounds):
                continue
            md.append(f"| {LABELS[e]} | {fmt(med(rounds, e, 'done_s'), '.1f', ' s')} "
                      f"| {fmt(med(rounds, e, 'first_s'), '.1f', ' s')} | {fmt_rate(med(rounds, e, 'rate'))} "
                      f"| {fmt(med(rounds, e, 'mb_s'), '.1f')} | {fmt(med(rounds, e, 'peak_rss_mib'), ',.0f', ' MiB')} "
                      f"| {fmt(med(rounds, e, 'cpu_s'), '.2f', ' s')} | {fmt(med(rounds, e, 'cpu_copy_s'), '.2f', ' s')} "
                      f"| {fmt(med(rounds, e, 'mb_per_cpu_s'), ',.0f')}, {fmt(med(rounds, e, 'mb_per_cpu_copy_s'), ',.0f')} "
                      f"| {fmt(med(rounds, e, 'threads'))} "
                      f"| {fmt(med(rounds, e, 'others_cores'), '.2f', ' cores')} |")
        tp = ratio_med(rounds, "ferry", "mm2", "rate")
        rss = ratio_med(rounds, "ferry", "mm2", "peak_rss_mib", invert=True)
        cpu = ratio_med(rounds, "ferry", "mm2", "cpu_s", invert=True)
        fl = ratio_med(rounds, "ferry", "limit", "rate")
        ml = ratio_med(rounds, "mm2", "limit", "rate")
        mbcpu = med(rounds, "ferry", "mb_per_cpu_s")
        if name == "exactly-once":
            md += eos_lines(rounds)
        elif name in VARIANTS:
            md += variant_lines(rounds, *VARIANTS[name])
        else:
            md += ["", f"Ratios: ferry/MM2 copy rate **{fmt(tp, '.2f', 'x')}**, MM2/ferry peak RSS **{fmt(rss, '.1f', 'x')}**, "
                       f"MM2/ferry CPU **{fmt(cpu, '.1f', 'x')}**, ferry/limit **{fmt(fl and fl * 100, '.0f', ' %')}**, "
                       f"MM2/limit {fmt(ml and ml * 100, '.0f', ' %')}."]
        fb = [r["ferry"] for r in rounds if "ferry" in r and "batch_records_median" in r["ferry"]]
        if fb:
            md += ["", f"ferry's record producer batches (librdkafka statistics, per window while copying): "
                       f"{fmt(med(rounds, 'ferry', 'batch_records_median'), ',.0f')} records / "
                       f"{fmt(med(rounds, 'ferry', 'batch_bytes_median'), ',.0f')} B median, "
                       f"{fmt(med(rounds, 'ferry', 'batch_records_max'), ',.0f')} records / "
                       f"{fmt(med(rounds, 'ferry', 'batch_bytes_max'), ',.0f')} B at most."]
        marks = [(k, n) for k, n in (("startup_first_topic_created_s", "first remote topic created"),
                                     ("startup_last_topic_created_s", "last remote topic created"),
                                     ("startup_assigned_s", "copier group assigned its partitions"),
                                     ("startup_partitions_started_s", "first partitions started"),
                                     ("startup_writable_s", "every remote partition takes writes"))
                 if med(rounds, "ferry", k) is not None]
        if marks:
            md += ["", "ferry's start-up (from its log, after process start): " + "; ".join(
                f"{n} {fmt(med(rounds, 'ferry', k), '.1f', ' s')}" for k, n in marks)
                + f"; first record on the target {fmt(med(rounds, 'ferry', 'first_s'), '.1f', ' s')}."]
        if name == "headline":
            md += ["", "Targets (goals of the performance issue, not assertions): "
                       f"throughput ≥ 2x MM2: {check(tp, lambda v: v >= 2)}; ≥ 80 % of the limit: "
                       f"{check(fl, lambda v: v >= 0.8)}; peak RSS ≤ 1/10 of MM2's: {check(rss, lambda v: v >= 10)}; "
                       f"CPU ≤ 1/10 of MM2's: {check(cpu, lambda v: v >= 10)}; ≥ 333 MB per CPU-second: "
                       f"{check(mbcpu, lambda v: v >= 333)}."]
        md += ["", "Copy rate: records / (last - first record seen on the target), seen by one admin client polling the "
                   "target's log-end offsets every 0.1 s (0.5 s above 100 partitions), the same for every engine. CPU and "
                   "peak RSS (VmHWM) of the replicator's process from start to the last record; MB per CPU-s = "
                   "record bytes / that CPU (and / the CPU from the first record to the last). Limit: producer-perf into the target and consumer-perf from the source run "
                   "together; its rate is the slower of the two. Others' load: cores busy with other processes "
                   "than the brokers, the replicator and the watcher during the run (other engineers' builds and tests)."]
    elif kind == "wan":
        rtts = result["rtts"]
        engines = [e for e in ("ferry", "mm2") if any(f"{e}@{rtts[0]}" in r for r in rounds)]
        md += ["| round trip | " + " | ".join(f"{LABELS[e]} copy rate | {LABELS[e]} MB/s | {LABELS[e]} % of its 0 ms rate"
                                           for e in engines) + " | ferry/MM2 |",
               "|---|" + "---|---|---|" * len(engines) + "---|"]
        for rtt in rtts:
            row = [f"{rtt} ms"]
            for e in engines:
                kept = ratio_med(rounds, f"{e}@{rtt}", f"{e}@{rtts[0]}", "rate")
                row += [fmt_rate(med(rounds, f"{e}@{rtt}", "rate")), fmt(med(rounds, f"{e}@{rtt}", "mb_s"), ".1f"),
                        fmt(kept and kept * 100, ".0f", " %")]
            vs = ratio_med(rounds, f"ferry@{rtt}", f"mm2@{rtt}", "rate") if len(engines) == 2 else None
            md.append("| " + " | ".join(row) + f" | {fmt(vs, '.2f', 'x')} |")
        last = rtts[-1]
        kept = ratio_med(rounds, f"ferry@{last}", f"ferry@{rtts[0]}", "rate")
        vs = ratio_med(rounds, f"ferry@{last}", f"mm2@{last}", "rate")
        md += ["", f"Targets (goals of the performance issue, not assertions) at {last} ms: ferry keeps ≥ 80 % of its "
                   f"0 ms rate: {check(kept, lambda v: v >= 0.8)}; ≥ 2x MM2's rate: {check(vs, lambda v: v >= 2)}.",
               "", "Copy rate: records / (last - first record seen on the target), as in the copy scenarios. Both engines "
                   "with their defaults (MM2 with the bench's producer overrides), reading the source through the "
                   "proxy: every connection of theirs to the source, including offset syncs, crosses the link."]
    elif kind == "latency":
        md += ["| engine | p50 | p90 | p99 | p99.9 | max | samples | CPU during the load | peak RSS | first copy after |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        for e in ("ferry", "ferry-eos", "mm2", "limit"):
            if not any(e in r for r in rounds):
                continue
            label = {"mm2": "MM2", "limit": "limit (consumer on the source)",
                     "ferry-eos": "ferry-eos (`delivery = \"exactly_once\"`)"}.get(e, e)
            md.append(f"| {label} | {fmt(med(rounds, e, 'p50_ms'), '.0f', ' ms')} | {fmt(med(rounds, e, 'p90_ms'), '.0f', ' ms')} "
                      f"| {fmt(med(rounds, e, 'p99_ms'), '.0f', ' ms')} | {fmt(med(rounds, e, 'p999_ms'), '.0f', ' ms')} "
                      f"| {fmt(med(rounds, e, 'max_ms'), '.0f', ' ms')} | {fmt(med(rounds, e, 'samples'))} "
                      f"| {fmt(med(rounds, e, 'cpu_load_pct'), '.1f', ' % of a core')} "
                      f"| {fmt(med(rounds, e, 'peak_rss_mib'), ',.0f', ' MiB')} | {fmt(med(rounds, e, 'primer_s'), '.1f', ' s')} |")
        p99 = ratio_med(rounds, "ferry", "mm2", "p99_ms", invert=True)
        cpu = ratio_med(rounds, "ferry", "mm2", "cpu_load_pct", invert=True)
        fp, mp = med(rounds, "ferry", "p99_ms"), med(rounds, "mm2", "p99_ms")
        md += ["", f"Ratios: MM2/ferry p99 **{fmt(p99, '.2f', 'x')}**, MM2/ferry CPU during the load "
                   f"**{fmt(cpu, '.1f', 'x')}**. Target: ferry's p99 below MM2's: "
                   f"{check(fp if fp is not None and mp is not None else None, lambda v: v < mp)}.",
               "", f"Method: {sc['rate']:,} records/s of {sc['size']} B over {sc['partitions']} partitions for "
                   f"{sc['duration']} s (producer-perf, acks=1, linger 5 ms) after the replicator copied a primer record; "
                   f"a consumer on the target (no group, from the beginning, read_committed: an exactly-once copy's "
                   f"records count once committed) takes arrival wall clock - CreateTime per "
                   f"record (one clock: both clusters are on this machine), skipping the first {sc['warmup']} s. The "
                   f"limit row is that consumer on the source topic: the brokers' own produce-to-consume latency."]
    elif kind == "flows":
        md += ["| engine | flows | threads | threads per flow | idle CPU | wake-ups/s | RSS | peak RSS | all flows heartbeating after | load average | others' load |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        for n in result["counts"]:
            for e in ("ferry", "mm2"):
                k = f"{e}@{n}"
                if not any(k in r for r in rounds):
                    continue
                th = med(rounds, k, "threads")
                err = next((r[k]["error"] for r in rounds if k in r and "error" in r[k]), None)
                md.append(f"| {'MM2' if e == 'mm2' else e} | {n} | {fmt(th)} | {fmt(th and th / n, '.1f')} "
                          f"| {fmt(med(rounds, k, 'idle_cpu_pct'), '.2f', ' % of a core')} "
                          f"| {fmt(med(rounds, k, 'wakeups_s'), ',.0f')} "
                          f"| {fmt(med(rounds, k, 'rss_mib'), ',.0f', ' MiB')} | {fmt(med(rounds, k, 'peak_rss_mib'), ',.0f', ' MiB')} "
                          f"| {fmt(med(rounds, k, 'ready_s'), '.1f', ' s')} | {fmt(med(rounds, k, 'load'), '.1f')} "
                          f"| {fmt(med(rounds, k, 'others_cores'), '.2f', ' cores')} |"
                          + (f" failed: {err}" if err and th is None else ""))
        ferry_counts = [n for n in result["counts"] if any(f"ferry@{n}" in r for r in rounds)]
        goal_n = 50 if 50 in ferry_counts else (max(ferry_counts) if ferry_counts else None)
        if goal_n is not None:
            th = med(rounds, f"ferry@{goal_n}", "threads")
            cpu = med(rounds, f"ferry@{goal_n}", "idle_cpu_pct")
            rss = med(rounds, f"ferry@{goal_n}", "rss_mib")
            below = []
            for n in result["counts"]:
                for key in ("threads", "idle_cpu_pct", "rss_mib"):
                    f_, m_ = med(rounds, f"ferry@{n}", key), med(rounds, f"mm2@{n}", key)
                    if f_ is not None and m_ is not None:
                        below.append(f_ < m_)
            md += ["", f"Targets at {goal_n} flows (issue 18): under 500 threads: {check(th, lambda v: v < 500)}; idle CPU "
                       f"under 10 % of a core: {check(cpu, lambda v: v < 10)}; RSS under 150 MiB: "
                       f"{check(rss, lambda v: v < 150)}; below MM2 on every figure at every count both ran: "
                       f"{check(all(below) if below else None, lambda v: v)}."]
        hb = sc.get("heartbeats", 1)
        nmax = max(result["counts"])
        md += ["", f"Method: flows eK->wK, K = 1..n, where every eK is the source cluster and every wK the target "
                   f"(fresh clusters per run); each flow copies one empty topic idle-K. Ready = the target's "
                   f"`heartbeats` holds a heartbeat of every flow; then {sc['settle']} s to settle and CPU over "
                   f"{sc['window']} s, threads (peak of 1 s samples) and RSS from /proc; wake-ups: context switches "
                   f"per second summed over the process's threads (/proc/PID/task/*/status). MM2: one herder per flow plus "
                   f"its reverse heartbeat herder (what a ferry flow does), tasks.max = 2, its herders' Connect topics "
                   f"created before it starts{'' if sc.get('mm2_precreate', True) else ' (not in this run)'} "
                   f"(started together, 100 herders time out waiting for their topics on this box). Because all eK are one "
                   f"cluster, its `heartbeats` topic receives every flow's reverse heartbeat and every flow copies all "
                   f"of them (n²/{hb:g} records/s; both engines): with {nmax} flows the idle node copies "
                   f"{nmax * nmax / hb:,.0f} heartbeats/s (a node of flows from n distinct sources would copy n/s)."]
        # where the idle CPU goes, per kind of thread, at the goal's count (round 1)
        for e in ("ferry", "mm2"):
            n = 50 if any(f"{e}@50" in r for r in rounds) else max(
                (n for n in result["counts"] if any(f"{e}@{n}" in r for r in rounds)), default=None)
            run_ = next((r[f"{e}@{n}"] for r in rounds if f"{e}@{n}" in r and "thread_groups" in r[f"{e}@{n}"]), None)
            if not run_:
                continue
            groups = run_["thread_groups"]
            top, rest = groups[:14], groups[14:]
            md += ["", f"Idle CPU by thread kind, {'MM2' if e == 'mm2' else e} at {n} flows (round 1; thread names "
                       f"without the flow, numbers as N):", "",
                   "| threads named | count | CPU | wake-ups/s |", "|---|---|---|---|"]
            for g in top:
                md.append(f"| `{g['group']}` | {g['threads']:,} | {g['cpu_pct']:.2f} % | {g['wakeups_s']:,.0f} |")
            if rest:
                md.append(f"| {len(rest)} other kinds | {sum(g['threads'] for g in rest):,} "
                          f"| {sum(g['cpu_pct'] for g in rest):.2f} % | {sum(g['wakeups_s'] for g in rest):,.0f} |")
    elif kind == "busy":
        n = result["counts"][-1]
        md += ["| engine | flows | wall incl. startup | to first record | copy rate | steady rate (10-90 %) | CPU "
               "| CPU per record (all, steady) | CPU while steady | peak RSS | threads | others' load |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for e in ("ferry", "mm2"):
            for k in result["counts"]:
                key = f"{e}@{k}"
                if not any(key in r for r in rounds):
                    continue
                md.append(f"| {'MM2' if e == 'mm2' else e} | {k} | {fmt(med(rounds, key, 'done_s'), '.1f', ' s')} "
                          f"| {fmt(med(rounds, key, 'first_s'), '.1f', ' s')} | {fmt_rate(med(rounds, key, 'rate'))} "
                          f"| {fmt_rate(med(rounds, key, 'steady_rate'))} | {fmt(med(rounds, key, 'cpu_s'), '.2f', ' s')} "
                          f"| {fmt(med(rounds, key, 'cpu_us_per_record'), '.1f')}, "
                          f"{fmt(med(rounds, key, 'steady_cpu_us_per_record'), '.1f', ' µs')} "
                          f"| {fmt(med(rounds, key, 'steady_cpu_cores') and med(rounds, key, 'steady_cpu_cores') * 100, '.0f', ' % of a core')} "
                          f"| {fmt(med(rounds, key, 'peak_rss_mib'), ',.0f', ' MiB')} | {fmt(med(rounds, key, 'threads'))} "
                          f"| {fmt(med(rounds, key, 'others_cores'), '.2f', ' cores')} |")
            if not any(f"{e}@{n}" in r for r in rounds):
                continue
            rate = ratio_med(rounds, f"{e}@{n}", f"{e}@1", "rate")
            srate = ratio_med(rounds, f"{e}@{n}", f"{e}@1", "steady_rate")
            cpu = ratio_med(rounds, f"{e}@{n}", f"{e}@1", "cpu_us_per_record")
            scpu = ratio_med(rounds, f"{e}@{n}", f"{e}@1", "steady_cpu_us_per_record")
            md += ["", f"{'MM2' if e == 'mm2' else e}, {n} flows / 1 flow: copy rate **{fmt(rate, '.2f', 'x')}** (steady "
                       f"{fmt(srate, '.2f', 'x')}), CPU per record **{fmt(cpu, '.2f', 'x')}** (steady {fmt(scpu, '.2f', 'x')}). "
                       f"Goal, within 10 % of one flow: rate {check(rate, lambda v: v >= 0.9)}, CPU "
                       f"{check(cpu, lambda v: v <= 1.1)}."]
        md += ["", f"Method: {n} topics busy-K of {sc['partitions']} partitions on the source, {sc['records'] // n:,} records "
                   f"of {sc['size']} B each (uncompressed), written once. Each run gets a fresh target: either {n} flows "
                   f"eK->wK (aliases of the two clusters), flow K copying busy-K, or one flow e1->w1 copying all {n} topics "
                   f"(the same partitions, records and batches: only the split into flows differs). Copy rate: records / "
                   f"(last - first record on the target), watched by one admin client polling the log-end offsets every "
                   f"0.1 s; steady: between the moments 10 % and 90 % of the records were there (the flows' group joins "
                   f"end at different moments), with the replicator's CPU over the same span. CPU: user+system of the "
                   f"process from its start to the last record."]
    elif kind == "checkpoint":
        groups = result["groups"]
        md += ["| engine | first checkpoint after process start | after its checkpoint task started | every group and "
               "partition after | after its checkpoint task started | "
               + " | ".join(f"re-reads, {g}" for g in groups) + " | peak RSS | CPU |",
               "|---|---|---|---|---|" + "---|" * len(groups) + "---|---|"]
        for e in ("ferry", "mm2"):
            if not any(e in r for r in rounds):
                continue
            md.append(f"| {'MM2' if e == 'mm2' else e} | {fmt(med(rounds, e, 'first_checkpoint_s'), '.1f', ' s')} "
                      f"| {fmt(med(rounds, e, 'first_after_task_start_s'), '.1f', ' s')} "
                      f"| {fmt(med(rounds, e, 'all_checkpoints_s'), '.1f', ' s')} "
                      f"| {fmt(med(rounds, e, 'all_after_task_start_s'), '.1f', ' s')} | "
                      + " | ".join(fmt(med(rounds, e, f"rereads_{g}")) for g in groups)
                      + f" | {fmt(med(rounds, e, 'peak_rss_mib'), ',.0f', ' MiB')} | {fmt(med(rounds, e, 'cpu_s'), '.2f', ' s')} |")
        per_group = []
        for e in ("ferry", "mm2"):
            if any(e in r for r in rounds):
                times = [f"{g} {fmt(median([r[e].get('group_s', {}).get(g) for r in rounds if e in r]), '.1f', ' s')}"
                         for g in groups]
                per_group.append(f"{'MM2' if e == 'mm2' else e}: " + ", ".join(times))
        md += ["", "Each group checkpointed on every partition, after process start: " + "; ".join(per_group) + "."]
        if med(rounds, "ferry", "syncs_read_s") is not None or med(rounds, "ferry", "checkpoints_loaded_s") is not None:
            md += ["", f"ferry's start-up, after its checkpoint computer started: the offset-sync backlog read to its end "
                       f"after {fmt(med(rounds, 'ferry', 'syncs_read_s'), '.2f', ' s')} (a thread of its own, from the "
                       f"start); the published checkpoints loaded after "
                       f"{fmt(med(rounds, 'ferry', 'checkpoints_loaded_s'), '.2f', ' s')} (read once at the start; the "
                       f"checkpoint producer, which comes with the first group, fences and reads on from there). The "
                       f"first emission needs the published checkpoints "
                       f"and the newest syncs of the backlog, not all of it."]
        logged = all(r["ferry"].get("task_start_logged") for r in rounds if "ferry" in r)
        task = ("its log line `checkpoint computer starting`" if logged else
                "the flow's start, an upper bound: this binary does not log the computer's start")
        md += ["", f"Targets (issue 33): ferry's first checkpoint with {sc['syncs']:,} syncs within 2 s of its checkpoint "
                   f"computer's start {check(med(rounds, 'ferry', 'first_after_task_start_s'), lambda v: v <= 2)} and "
                   f"within 3 s of the process's start {check(med(rounds, 'ferry', 'first_checkpoint_s'), lambda v: v <= 3)}; "
                   f"every group (the deep one included) checkpointed on every partition within 2 s of the computer's "
                   f"start {check(med(rounds, 'ferry', 'all_after_task_start_s'), lambda v: v <= 2)}. "
                   f"ferry's checkpoint task start: {task}.",
               "", f"Method: {sc['syncs']:,} offset syncs in MM2's format (no ferry.sync header) on "
                   f"`mm2-offset-syncs.<target>.internal` on the source, for the {sc['partitions']} partitions of the "
                   f"empty topic `ckpt` (nothing to copy), a sync every {sc['step']} offsets, upstream = downstream, "
                   f"newest at {result['last_upstream']:,}. Groups committed on every partition, between two syncs: "
                   + ", ".join(f"{g} at {o:,}" for g, o in groups.items())
                   + ". Checkpoint interval 1 s for both engines. The target is fresh for each run and warmed before "
                   "the engine starts (a group commit and a transaction create its __consumer_offsets and "
                   "__transaction_state, as a cluster in use has them). Re-reads: sum over partitions of the group's offset "
                   f"minus the checkpointed downstream offset, the records a consumer failing over to the target "
                   f"would read again (MM2's +1 rule allows {sc['step'] // 2 - 1} per partition at best)."]
    if errors:
        md += ["", "Failed runs: " + "; ".join(errors)]
    md += ["", f"Raw figures: `bench/raw/{bench.stamp}-{name}.json`.", ""]
    return "\n".join(md)


def record(name: str, sc: dict, result: dict, bench: Bench, command: str) -> None:
    text = render(name, sc, result, bench, command)
    print(text)
    if bench.args.no_record:
        return
    raw = ROOT / "bench" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / f"{bench.stamp}-{name}.json").write_text(json.dumps(
        {"scenario": name, "config": sc, "command": command, "ferry": bench.ferry_rev, "machine": machine(),
         "note": bench.args.note, **result}, indent=1, default=str))
    with open(ROOT / "bench" / "results.md", "a") as f:
        f.write("\n" + text)
    log("appended to bench/results.md")


# ------------------------------------------------------------------------------------------ main

def legacy(argv: list[str]) -> list[str]:
    """The old interface, `bench.sh [--mm2] [RECORDS] [BYTES] [PARTITIONS]`, as the `copy` scenario."""
    engine = "ferry"
    if argv and argv[0] == "--mm2":
        engine, argv = "mm2", argv[1:]
    if argv and not all(a.isdigit() for a in argv):
        return []
    n, s, p = (argv + ["1000000", "100", "6"][len(argv):])[:3]
    return ["copy", "--engines", engine, "--records", n, "--size", s, "--partitions", p, "--runs", "1"]


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv[0] == "--mm2" or argv[0].isdigit():
        argv = legacy(argv) or argv
    ap = argparse.ArgumentParser(prog="scripts/bench.sh", description="see the header of scripts/bench.sh")
    ap.add_argument("scenario", choices=[*SCENARIOS, "all", "profile"])
    ap.add_argument("profile_scenario", nargs="?", default="headline", help="profile only: the copy scenario")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--engines", help="comma list of ferry, mm2, limit, ferry-eos, mm2-eos (default: the scenario's)")
    ap.add_argument("--records", type=int)
    ap.add_argument("--size", type=int)
    ap.add_argument("--partitions", type=int, help="partitions in all (copy scenarios)")
    ap.add_argument("--topics", type=int, help="copy scenarios: topics the partitions are spread over")
    ap.add_argument("--rate", type=int, help="latency: records/s")
    ap.add_argument("--duration", type=int, help="latency: seconds of steady load")
    ap.add_argument("--warmup", type=int, help="latency: seconds of the load left out of the percentiles")
    ap.add_argument("--flows", help="flows: comma list of flow counts (default 1,10,50,100); flows-busy: the "
                                    "number of busy flows (default 20)")
    ap.add_argument("--mm2-flows", help="flows: MM2's flow counts (default 1,10,50, or --flows when given)")
    ap.add_argument("--heartbeats-interval", type=float, dest="heartbeats",
                    help="flows: seconds between heartbeats of every flow, both engines (default 1, MM2's)")
    ap.add_argument("--window", type=int, help="flows: seconds of idle CPU measurement")
    ap.add_argument("--syncs", type=int, help="checkpoint: offset syncs on the topic")
    ap.add_argument("--rtts", help="wan: comma list of round trips in ms (default 0,100,300)")
    ap.add_argument("--bandwidth", type=float, help="wan: Mbit/s from the source to the replicator (default: none)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds an engine run may take")
    ap.add_argument("--ferry-bin", help="the ferry binary to measure (or FERRY_BIN)")
    ap.add_argument("--ferry-source-client", help="librdkafka properties for ferry's source cluster, k=v,k=v "
                                                  "(to compare settings; recorded in the command line)")
    ap.add_argument("--ferry-rev", help="build this git revision (git archive into ~/.cache/ferry-bench)")
    ap.add_argument("--freq", type=int, default=499, help="profile: perf sampling frequency")
    ap.add_argument("--note", help="a remark recorded with the results (e.g. 'machine busy')")
    ap.add_argument("--no-record", action="store_true", help="print the table, do not touch bench/")
    ap.add_argument("--keep-clusters", action="store_true", help="leave bsrc and bdst running at the end")
    ap.add_argument("--work", help="work dir for logs (default: a new /tmp/ferry-bench-* dir)")
    args = ap.parse_args(argv)
    command = "scripts/bench.sh " + shlex.join(argv)

    # one benchmark at a time on this machine: they share the clusters' ports and run dir
    lock = open(f"{RUN_DIR}.lock", "w")
    try:
        import fcntl
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        die(f"another scripts/bench.sh holds {RUN_DIR}.lock")
    bench = Bench(args)
    # the binary is resolved (and built) before any cluster starts, so a build does not run beside a benchmark
    engines_all = set()
    names = ALL if args.scenario == "all" else [args.profile_scenario if args.scenario == "profile" else args.scenario]
    for n in names:
        engines_all |= set((args.engines or SCENARIOS[n]["engines"]).split(","))
    if any(e.startswith("ferry") for e in engines_all) or args.scenario == "profile":
        bench.ferry()
        log(f"ferry: {bench.ferry_bin} ({bench.ferry_rev})")
    try:
        for n in names:
            sc = dict(SCENARIOS[n])
            for k in ("records", "size", "partitions", "topics", "rate", "duration", "warmup", "window", "syncs",
                      "heartbeats", "rtts", "bandwidth"):
                if getattr(args, k) is not None:
                    sc[k] = getattr(args, k)
            if sc["kind"] == "busy" and args.flows:
                sc["flows"] = int(args.flows)
            sc["what"] = describe(n, sc)
            if args.scenario == "profile":
                if sc["kind"] != "copy":
                    die("profile runs a copy scenario (headline, small, lz4, partitions-2000, partitions-10000)")
                bench.profile(n, sc)
                continue
            log(f"scenario {n}: {sc['what']}")
            result = getattr(bench, f"scenario_{sc['kind']}")(n, sc)
            record(n, sc, result, bench, command if args.scenario != "all" else f"scripts/bench.sh {n} "
                   + shlex.join(argv[1:]))
    finally:
        stop_all_children()
        if not args.keep_clusters:
            kafka_sh("down", "bsrc", "bdst")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
