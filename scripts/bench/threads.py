#!/usr/bin/env python3
"""scripts/bench/threads.py: where a running ferry (or any process) spends its CPU and wake-ups, per kind
of thread and, for librdkafka's threads, per client.

    python3 scripts/bench/threads.py PID [--window S] [--no-gdb] [--json FILE]

Samples /proc/PID/task/*/stat and status twice, --window seconds apart (default 30): CPU (user+system)
in % of one core and context switches per second (voluntary ones are the wake-ups of a thread that
slept; involuntary ones, preemptions, are counted too) for every thread, grouped by its name without
the flow (ferry names its threads `<actor> <flow>`) and with numbers as N.

librdkafka names its threads `rdk:main`, `rdk:broker<node id>` (-1: the internal and the bootstrap
brokers) and `rdk:bg`, which says nothing of the client they serve. With gdb (and librdkafka's debug
information, which rdkafka-sys builds keep), the process is stopped once after the window (a few
seconds for a thousand threads) and every librdkafka thread is mapped to its client's `client.id`
(`<flow>|ferry|<role>[|<node>]`): the table then shows e.g. `rdk:brokerN` of `replication-consumer`.
The window is measured before gdb attaches, so the stop is not part of the figures.

Used for the idle-cost analysis of issue 18 (bench/results.md, "where an idle 50-flow node spends its
CPU"); the flows scenario of scripts/bench.sh records the same per-kind table without the clients.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import CLK, thread_group, thread_sample  # noqa: E402

# Runs inside gdb: every thread whose stack holds a librdkafka thread entry point, and its client id.
GDB_SCRIPT = r'''
import gdb, json
gdb.execute("set language c")
entries = {"rd_kafka_broker_thread_main": ("rd_kafka_broker_t", "rkb"),
           "rd_kafka_thread_main": ("rd_kafka_t", "rk"),
           "rd_kafka_background_thread_main": ("rd_kafka_t", "rk")}
out = {}
for inf in gdb.inferiors():
    for th in inf.threads():
        try:
            th.switch()
            f = gdb.newest_frame()
        except gdb.error:
            continue
        while f is not None:
            name = f.name()
            if name in entries:
                typ, local = entries[name]
                ptr = None
                for var in ("arg", local):
                    try:
                        v = f.read_var(var)
                        if int(v) != 0:
                            ptr = v
                            break
                    except (gdb.error, ValueError):
                        pass
                if ptr is not None:
                    try:
                        p = ptr.cast(gdb.lookup_type(typ).pointer())
                        rk = p["rkb_rk"] if typ == "rd_kafka_broker_t" else p
                        out[th.ptid[1]] = rk["rk_conf"]["client_id_str"].string()
                    except (gdb.error, gdb.MemoryError):
                        pass
                break
            try:
                f = f.older()
            except gdb.error:
                break
with open(OUT, "w") as fh:
    json.dump(out, fh)
'''


def client_ids(pid: int) -> dict[int, str]:
    """tid -> client.id of every librdkafka thread, read with gdb (the process stops meanwhile)."""
    if not shutil.which("gdb"):
        print("gdb not found: librdkafka threads are shown without their clients", file=sys.stderr)
        return {}
    with tempfile.TemporaryDirectory() as d:
        out = Path(d, "clients.json")
        script = Path(d, "clients.py")
        script.write_text(f"OUT = {str(out)!r}\n" + GDB_SCRIPT)
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                            "-ex", f"source {script}", "-ex", "detach"], capture_output=True, text=True, timeout=900)
        if not out.exists():
            print(f"gdb found no clients:\n{r.stderr[-2000:]}", file=sys.stderr)
            return {}
        return {int(k): v for k, v in json.loads(out.read_text()).items()}


def role_of(client_id: str) -> str:
    """`e1->w1|ferry|replication-consumer|node` -> `replication-consumer`; `ferry|admin` -> `admin`."""
    parts = client_id.split("|")
    # the last `ferry` followed by something: the node's shared clients are `ferry|ferry|<role>`
    at = [i for i, p in enumerate(parts[:-1]) if p == "ferry"]
    return parts[at[-1] + 1] if at else client_id


def table(before: dict, after: dict, seconds: float, clients: dict[int, str]) -> list[dict]:
    groups: dict[tuple[str, str], dict] = {}
    for tid, (name, ticks, sw) in after.items():
        _, t0, s0 = before.get(tid, (name, 0, 0))
        key = (thread_group(name), role_of(clients[tid]) if tid in clients else "")
        g = groups.setdefault(key, {"threads": 0, "ticks": 0, "switches": 0})
        g["threads"] += 1
        g["ticks"] += ticks - t0
        g["switches"] += sw - s0
    rows = [{"group": k[0], "client": k[1], "threads": g["threads"], "cpu_pct": 100 * g["ticks"] / CLK / seconds,
             "wakeups_s": g["switches"] / seconds} for k, g in groups.items()]
    return sorted(rows, key=lambda r: (-r["cpu_pct"], -r["wakeups_s"], r["group"], r["client"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("--window", type=float, default=30)
    ap.add_argument("--no-gdb", action="store_true", help="do not map librdkafka threads to their clients")
    ap.add_argument("--json", help="also write the rows (and the process's totals) to this file")
    args = ap.parse_args()
    before, t0 = thread_sample(args.pid), time.time()
    time.sleep(args.window)
    after, t1 = thread_sample(args.pid), time.time()
    if not after:
        sys.exit(f"process {args.pid} is gone")
    clients = {} if args.no_gdb else client_ids(args.pid)
    rows = table(before, after, t1 - t0, clients)
    total_cpu = sum(r["cpu_pct"] for r in rows)
    total_wake = sum(r["wakeups_s"] for r in rows)
    print(f"pid {args.pid}: {len(after)} threads, {total_cpu:.2f} % of a core, {total_wake:,.0f} wake-ups/s over "
          f"{t1 - t0:.1f} s; load average {os.getloadavg()[0]:.1f}\n")
    print("| threads named | client (librdkafka threads) | count | CPU | wake-ups/s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| `{r['group']}` | {r['client'] or '-'} | {r['threads']:,} | {r['cpu_pct']:.2f} % | {r['wakeups_s']:,.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"pid": args.pid, "window_s": t1 - t0, "threads": len(after),
                                               "cpu_pct": total_cpu, "wakeups_s": total_wake, "rows": rows},
                                              indent=1))


if __name__ == "__main__":
    main()
