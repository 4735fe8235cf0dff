#!/usr/bin/env python3
"""A worker stuck in one poll when d9d arrives, the thing one attaches to a
slow service to find (npm anvil: one poll of more than 10 s, which the full
set used to show as "longest poll 7.4 ms" and no second worker at all).
The stripped target's server does --work-us of hashing per request; its
first request on a connection spends half of it in one poll. With two CPU
hogs on the cores, `record --probes all` attaches in the middle of that
poll; the trace must show it: a D9LongPollEvent "at attach" on the thread
that ran it, lasting at least from the uprobes' start to its last CPU
sample inside it, and the status route saying how it is seen. Every poll
that starts later is exact, as before: the request's second half, when
it starts inside the recording, is an exact poll that begins after it.
Usage: test_attach_poll.py D9D D9CTL TARGET"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, start_cpu_hogs, start_target, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
WORK_S = 12         # per request: the first half, 6 s of CPU, is one poll
MSG_LEN = 64


def main():
    t = Tap()
    d = D9d(D9D, D9CTL).start_or_bail(t)
    out = tempfile.mkdtemp(prefix="d9-attach-poll-")
    srv = start_target(TARGET, "server", "--workers", "2", "--listen", "127.0.0.1:0",
                       "--work-us", str(WORK_S * 1000000))
    line = srv.stdout.readline()
    if not line.startswith("listening "):
        srv.kill()
        t.bail(f"the target did not listen: {line!r}")
    host, port = line.split()[1].rsplit(":", 1)
    hogs = start_cpu_hogs()
    conn = socket.create_connection((host, int(port)))
    try:
        conn.sendall(bytes(MSG_LEN))
        sent = time.monotonic_ns()
        time.sleep(1.0)     # mid-poll: its hashing has run a second
        rec = subprocess.Popen([D9CTL, "--socket", d.sock, "record", "--pid", str(srv.pid), "--duration", "4s",
                                "--out", out, "--probes", "all"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        st = None
        for _ in range(40):
            time.sleep(0.1)
            live = [s for s in (d.status(srv.pid) or {}).get("targets", []) if s["state"] == "recording"]
            if live and live[0]["plan"].get("state") == "ready":
                st = live[0]
                break
        rout, rerr = rec.communicate(timeout=120)
        comm = {}
        for tid in os.listdir(f"/proc/{srv.pid}/task"):
            with open(f"/proc/{srv.pid}/task/{tid}/comm") as f:
                comm[int(tid)] = f.read().strip()
    finally:
        stop_procs(hogs)
        conn.close()
        srv.kill()
        srv.wait()
    segs = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs if f.endswith(".bin.zst"))
    t.ok(rec.returncode == 0 and segs, f"record --probes all of the busy server sealed {len(segs)} segments",
         rout + rerr + d.logtext()[-2000:])
    route = ((st or {}).get("probe_plan") or {}).get("routes", {}).get("long_poll", "")
    t.ok("at attach" in route, f"status says how a poll running at the attach is seen: {route!r}")
    rep = subprocess.run([D9CTL, "report", "--json"] + segs, capture_output=True, text=True, timeout=120)
    try:
        report = json.loads(rep.stdout)
    except ValueError:
        t.bail(f"report --json failed: {rep.stderr}")
    at_attach = [p for p in report.get("long_polls_from_stacks", []) if p.get("how") == "at attach"]
    exact = max((p["duration_ns"] for p in report.get("longest_polls", [])), default=0)
    print(f"# sent {sent}; at-attach polls {json.dumps([(p['min_ns'] // 1000000, p['ticks'], p['tid']) for p in at_attach])}"
          f"; longest exact poll {exact / 1e6:.1f} ms")
    long_one = [p for p in at_attach if p["min_ns"] >= 500_000_000 and p["ticks"] >= 20]
    t.ok(len(long_one) == 1,
         f"the poll running at the attach is one D9LongPollEvent 'at attach' of >= 0.5 s with its CPU samples "
         f"({len(at_attach)} at attach)", json.dumps(at_attach)[:2000])
    tid = long_one[0]["tid"] if long_one else None
    t.ok(tid in comm and tid != srv.pid and comm[tid].startswith("tokio-r"),
         f"on the worker thread that ran it (tid {tid}: {comm.get(tid)!r}; the target's: {sorted(set(comm.values()))})")
    # The request's second half is one more long poll; when the calibrated
    # work runs faster than the hogs let it, it starts inside the recording.
    # It is exact, and must start after the at-attach poll ended.
    end = long_one[0]["end_ns"] if long_one else None
    early = [p for p in report.get("longest_polls", [])
             if p["duration_ns"] >= 500_000_000 and (end is None or p["start_ns"] < end)]
    t.ok(end is not None and not early,
         f"no exact poll holds it: every exact poll of >= 0.5 s starts after it ends "
         f"(longest {exact / 1e6:.1f} ms; {len(early)} start before)", json.dumps(early)[:2000])
    t.ok(d.stop() == 0, "d9d stops cleanly")
    if t.failed == 0:
        shutil.rmtree(out, ignore_errors=True)
        d.cleanup()
    t.done()


main()
