#!/usr/bin/env python3
"""Workers idle as the recording begins or ends are parked in it, not "other".

With parks from the scheduler (the default set, stripped builds with every
probe) a park is written from an off-CPU interval, which BPF writes when
its thread comes back: a worker asleep since before the attach had no
interval of the recording (it began before), one asleep as it ends had none
yet, and the report read both idle stretches as the worker's other time
(npm cortex-mcp: idle for the first 4.2 s and the last 1.9 s of 8: 5 %
parked, 95 % other). Now BPF writes a sleep from before the attach from the
recording's start (bpf/d9_sched.bpf.c, D9_OFFCPU_BEGAN_BEFORE) and d9d each
sleeping worker's last park at the end (daemon/record/open_sleep.h).

The stripped server (alone in a directory: no debug file names its park
functions) attached idle under 2 CPU hogs for 6 s; its own load runs from
1.5 s to 3.5 s into the recording. For the default set and for every probe:
each worker's first park or unpark is a park before the load began, its
last one a park no later than the load's end with the off-CPU sample of
that sleep carrying its stack, and the report gives each worker at least
the idle stretches' share as parked (less 5 points: a worker's last
requests end after the load's last write). With the default set, the
workers' Worker (which worker a thread's stacks run) is found while they
are still idle, by the attach's sweep of the target's threads, and every
CPU sample of a worker's thread from the load on is on its worker (before
the sweep, npm moon's idle workers were found 1.7 s into a recording, and
their stacks and a park read as "other" for 1.1 s of it).
Usage: test_idle_ends.py D9D D9CTL STRIPPED_TARGET"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines, start_cpu_hogs, start_target, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def record_idle_ends(t, d, probes):
    procs = start_cpu_hogs(2)
    srv = start_target(TARGET, "server", "--listen", "127.0.0.1:0", "--duration", "30")
    procs.append(srv)
    addr = srv.stdout.readline().split()[1]
    time.sleep(0.5)
    rec = subprocess.Popen([D9CTL, "--socket", d.sock, "record", "--pid", str(srv.pid), "--duration", "6s"] +
                           (["--probes", probes] if probes else []),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    status = d.status(srv.pid) if not probes else None
    search = status["targets"][0].get("workers", {}).get("search") if status else None
    time.sleep(0.5)
    load_start = now_ns()
    load = subprocess.run([TARGET, "load", "--connect", addr, "--conns", "8", "--duration", "2"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load_end = now_ns()
    out, err = rec.communicate(timeout=120)
    stop_procs(procs)
    segs = out.split()
    name = probes or "default"
    if not t.ok(rec.returncode == 0 and segs and load.returncode == 0,
                f"{name}: record --pid of the idle server, loaded for a while", err):
        return
    events = []
    for p in segs:
        _, text = dump_json_lines(D9CTL, p)
        events += [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    first_of, last_of, sleeps = {}, {}, {}
    for e in events:
        f = e["fields"]
        if e["event"] in ("WorkerParkEvent", "WorkerUnparkEvent") and f["worker_id"] < 254:
            w = f["worker_id"]
            if w not in first_of or e["ts"] < first_of[w]["ts"]:
                first_of[w] = e
            if w not in last_of or e["ts"] >= last_of[w]["ts"]:
                last_of[w] = e
        elif e["event"] == "CpuSampleEvent" and f["source"] == 1:
            sleeps[(f["tid"], e["ts"])] = len(f["callchain"])
    starts = {w: (e["event"][6:-5], round((load_start - e["ts"]) / 1e6)) for w, e in sorted(first_of.items())}
    t.ok(len(starts) == 2 and all(ev == "Park" and ms >= 500 for ev, ms in starts.values()),
         f"{name}: each worker's first event is a park well before the load began: "
         f"{ {w: (ev, f'{ms} ms before') for w, (ev, ms) in starts.items()} }")
    ends = {w: (e["event"][6:-5], round((e["ts"] - load_end) / 1e6), sleeps.get((e["fields"]["tid"], e["ts"]), 0))
            for w, e in sorted(last_of.items())}
    t.ok(len(ends) == 2 and all(ev == "Park" and ms <= 500 and frames >= 5 for ev, ms, frames in ends.values()),
         f"{name}: each worker's last event is a park by the load's end, its sleep's sample with a stack: "
         f"{ {w: (ev, f'{ms} ms', f'{n} frames') for w, (ev, ms, n) in ends.items()} }")
    if not probes:
        # Idle workers run no stack of their own before the load: only the
        # attach's sweep of their threads can find their Worker that early,
        # and without it their first stacks of the load read as "other".
        t.ok((search or {}).get("state") == "found",
             f"{name}: the workers' Worker was found while they were idle, before the load: {search}")
        tids = {e["fields"]["tid"] for e in list(first_of.values()) + list(last_of.values())}
        lanes = {}
        for e in events:
            f = e["fields"]
            if e["event"] == "CpuSampleEvent" and f["tid"] in tids and e["ts"] >= load_start:
                lanes.setdefault(f["tid"], set()).add(f["worker_id"])
        t.ok(len(tids) == 2 and all(len(ws) == 1 and max(ws) < 254 for ws in lanes.values()),
             f"{name}: from the load's start every CPU sample of a worker's thread is on its worker: {lanes}")
    rep = subprocess.run([D9CTL, "report", "--json"] + segs, capture_output=True, text=True, timeout=120)
    doc = json.loads(rep.stdout) if rep.returncode == 0 else {}
    first = min((e["ts"] for e in first_of.values()), default=load_start)
    span = doc.get("span_ns") or 1
    idle = max(0, load_start - first) + max(0, first + span - load_end)
    shares = {w["worker"]: round(w["parked_share"], 3) for w in doc.get("workers", []) if w["worker"] < 254}
    t.ok(len(shares) == 2 and all(s >= idle / span - 0.05 for s in shares.values()),
         f"{name}: report, each worker parked for the idle stretches ({idle / span:.2f} of the recording): "
         f"{shares}", rep.stdout[-2000:] + rep.stderr)


def main():
    global TARGET
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="d9-idle-")
    TARGET = shutil.copy(TARGET, os.path.join(tmp, "service"))
    d = D9d(D9D, D9CTL)
    d.start_or_bail(t)
    for probes in (None, "all"):
        record_idle_ends(t, d, probes)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
