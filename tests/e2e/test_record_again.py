#!/usr/bin/env python3
"""A process recorded twice: the second recording holds nothing from before
it began. BPF keeps per-thread state for as long as the thread lives, so a
worker that went to sleep during the first recording and is woken during
the second still carries the first one's switch-out time. Before, that
came out as an off-CPU sample (and, with the default set, a park) seconds
before the second recording's start: a dprint recording of 8 s read as
12.7 s in `d9ctl report`, with one sample 4.5 s early, and the workers'
shares were computed over that span.
The echo server's workers run only while a short load burst lasts, so
they sleep across the gap between the recordings. Their off-CPU samples
also name them: a thread that only sleeps gets no on-CPU sample, and those
were the only samples that did.
One report over both recordings is of the time recorded (2 + 3 s), not of
the gap between them too: before, 7 s with the workers' shares over it
(npm tailcall: 482.6 s for 48 s recorded in 6 recordings). Segments
rotate every second, so each recording is several files; the report
once counted each file after the first as a recording of its own (it
took the segment's span, written before its metadata, for a segment
without any).
With every probe (`all`), a request whose first poll runs 6 s (2 s even if
the server's calibration, under load, made its work 3 times shorter) is
sent 0.3 s into a 2 s recording of a slow server: its poll, still open when the recording
ends, is listed open, at least 1.2 s long, and counts as the worker's busy
time (before: neither; the longest polls of npm postgrestools, 2-5 s, were
the ones open at either end of a recording).
Usage: test_record_again.py D9D D9CTL TARGET [default|all]"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, exec_done, wait_for  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
PROBES = sys.argv[4] if len(sys.argv) > 4 else "default"
PROBE_ARGS = [] if PROBES == "default" else ["--probes", PROBES]


def burst(addr):
    subprocess.run([TARGET, "load", "--connect", addr, "--conns", "4", "--duration", "0.3"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def record(d, pid, seconds, during):
    """A recording of `seconds` while during() runs; returns (its sealed
    paths, d9ctl's stderr, what during() returned)."""
    args = ["record", "--pid", str(pid), "--duration", f"{seconds}s", "--out", d.out, *PROBE_ARGS]
    rec = subprocess.Popen([D9CTL, "--socket", d.sock, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    got = during()
    out, err = rec.communicate(timeout=120)
    return out.split(), err, got


def burst_after(addr, seconds):
    """A load burst `seconds` into a recording."""
    def during():
        time.sleep(seconds)
        burst(addr)
    return during


def open_poll(t, d):
    """A long poll that a 2 s recording ends in the middle of."""
    slow = subprocess.Popen([TARGET, "server", "--listen", "127.0.0.1:0", "--work-us", "12000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        exec_done(slow.pid)
        host, port = slow.stdout.readline().split()[1].rsplit(":", 1)

        def recording():
            st = ((d.status(slow.pid) or {}).get("targets") or [{}])[0]
            return st.get("state") == "recording" and st.get("plan", {}).get("state") == "ready"

        def one_request():
            ready = wait_for(recording, 20, step=0.05)
            time.sleep(0.3)
            conn = socket.create_connection((host, int(port)))
            conn.sendall(bytes([7]) * 64)
            return ready, conn
        paths, err, (ready, conn) = record(d, slow.pid, 2, one_request)
        conn.close()
    finally:
        slow.kill()
        slow.wait()
    r = subprocess.run([D9CTL, "report", "--json", *paths], capture_output=True, text=True, timeout=120)
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    polls = [p for p in doc.get("longest_polls", []) if p.get("open")]
    busy = max((w.get("busy_ns", 0) for w in doc.get("workers", [])), default=0)
    t.ok(ready and polls and polls[0]["duration_ns"] >= 1.2e9 and busy >= polls[0]["duration_ns"],
         f"a poll still open when the recording ended is listed open: "
         f"{[round(p['duration_ns'] / 1e9, 3) for p in polls]} s; busiest worker {busy / 1e9:.3f} s", err)


def main():
    t = Tap()
    # Segments of 1 s: a recording is several files, as a long one is in
    # production, and the report must tell them apart from a second one.
    d = D9d(D9D, D9CTL, {"rotate_period": "1s"})
    d.out = tempfile.mkdtemp(prefix="d9-again-")
    d.start_or_bail(t)
    srv = subprocess.Popen([TARGET, "server", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    try:
        exec_done(srv.pid)
        addr = srv.stdout.readline().split()[1]
        first, err, _ = record(d, srv.pid, 2, burst_after(addr, 0.8))
        t.ok(first, "the first recording sealed its trace", err)
        # The workers sleep through this gap, switched out during the first.
        time.sleep(2)
        second, err, _ = record(d, srv.pid, 3, burst_after(addr, 1.0))
        t.ok(second, "the second recording sealed its trace", err)
        evs = list(dump_events(D9CTL, second))
        syncs = [ev["ts"] for ev in evs if ev["event"] == "ClockSyncEvent"]
        begin = min(syncs) if syncs else 0
        # Only timed events: symbol and mapping entries carry no time.
        timed = [ev for ev in evs if ev.get("ts")]
        early = [ev for ev in timed if ev["ts"] < begin - 50_000_000]
        offcpu = [ev for ev in timed if ev["event"] == "CpuSampleEvent" and ev["fields"].get("source") == 1]
        t.ok(begin and offcpu, f"the second recording has off-CPU samples ({len(offcpu)}) after its clock sync")
        t.ok(not early, f"no event of the second recording is more than 50 ms before its start "
             f"({len(early)}: {[(ev['event'], round((begin - ev['ts']) / 1e6, 1)) for ev in early[:4]]} ms early)")
        # A thread that only sleeps gets no on-CPU sample: its off-CPU
        # samples are what names it (before, they carried no name).
        unnamed = sorted({ev["fields"]["tid"] for ev in offcpu if not ev["fields"].get("thread_name")})
        t.ok(not unnamed, f"every off-CPU sample names its thread (threads without: {unnamed})")
        span = (max(ev["ts"] for ev in timed) - min(ev["ts"] for ev in timed)) / 1e9 if timed else 0
        t.ok(0 < span < 3.5, f"its events span {span:.3f} s of a 3 s recording")
        r = subprocess.run([D9CTL, "report", *second], capture_output=True, text=True, timeout=120)
        head = r.stdout.splitlines()[0] if r.stdout else ""
        secs = float(head.split(" s,")[0].split()[-1]) if " s," in head else 0
        t.ok(r.returncode == 0 and 0 < secs < 3.5, f"d9ctl report says {head!r}", r.stderr)
        # No request at all: no worker wakes. The default set names each
        # worker asleep throughout (the attach's sweep reads its Worker),
        # parked all the recording; every probe sees no worker, and the
        # report says so rather than print a header without rows
        # (ast-grep's idle workers).
        idle = d.ctl("record", "--pid", str(srv.pid), "--duration", "1s", "--out", d.out, *PROBE_ARGS).stdout.split()
        r = subprocess.run([D9CTL, "report", *idle], capture_output=True, text=True, timeout=120)
        rows = r.stdout.split("\nWorkers (share of the recording", 1)[-1].splitlines()[2:]
        workers = [row.split() for row in rows if re.match(r"\s+\d+\s", row)]
        if PROBES == "default":
            t.ok(idle and sorted(w[0] for w in workers) == ["0", "1"] and all(w[3] == "100.0%" for w in workers),
                 f"an idle recording's report: both workers parked throughout {workers}", r.stderr)
        else:
            t.ok(idle and rows and rows[0].startswith("  none: "), f"an idle recording's report: workers {rows[:1]}",
                 r.stderr)
        r = subprocess.run([D9CTL, "report", "--json", *first, *second], capture_output=True, text=True, timeout=120)
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        span, whole = doc.get("span_ns", 0) / 1e9, doc.get("first_to_last_ns", 0) / 1e9
        t.ok(doc.get("recordings") == 2 and len(first) >= 2 and len(second) >= 2 and 4 < span < 5.6 and whole > 6.5,
             f"a report of both recordings ({len(first)} + {len(second)} segments): {doc.get('recordings')} "
             f"recordings, {span:.3f} s recorded, {whole:.3f} s from the first event to the last", r.stderr)
        # Each worker row names the threads it was seen on, the server's
        # workers by tid and name: ids are per recording, and a report over
        # two could merge two threads in one row unseen (npm Deno).
        comm = {}
        for tid in os.listdir(f"/proc/{srv.pid}/task"):
            with open(f"/proc/{srv.pid}/task/{tid}/comm") as f:
                comm[int(tid)] = f.read().strip()
        rows = [(w["worker"], [(x["tid"], x.get("name")) for x in w.get("threads", [])]) for w in doc.get("workers", [])]
        t.ok(rows and all(ths and all(comm.get(tid, "").startswith("tokio-runtime-w") and name in (None, comm[tid])
                                      for tid, name in ths) for _, ths in rows),
             f"worker rows name their threads: {rows} (the server's: {comm})")
        if PROBES == "all":
            open_poll(t, d)
    finally:
        srv.kill()
        srv.wait()
        d.stop()
        d.cleanup()
        shutil.rmtree(d.out, ignore_errors=True)
    t.done()


main()
