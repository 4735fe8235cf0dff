#!/usr/bin/env python3
"""Blocking-pool threads waiting for their next job are the pool's (254)
in the default set, not "no worker" (255). A pool thread between jobs
sleeps in the pool's loop with no poll on its stack, and a short job is
rarely caught by a 99 Hz sample: npm rari's idle pool threads read 255 for
43 % of its pool samples, and here, before, every off-CPU sample of the
server's pool threads did (32 of 32 on each of 6 threads). The server
target (stripped, its requests doing about 40 µs of work and every 8th a
spawn_blocking job), under an open-loop load and 2 CPU hogs, recorded
mid-run with the default set. Checks:
 - the trace names workers 0 and 1, each on one thread;
 - at least 2 other threads (the pool's) have samples (how many the pool
   starts depends on how its jobs overlap: 4-6 here, 2 once in a CI
   rehearsal under load), and from 0.5 s into
   the recording on (the loop is learnt from the workers' first stacks)
   every one of their samples is 254 but each thread's first (at the
   attach, or a thread the pool starts later, sampled in its start before
   the loop: a CI rehearsal); over the whole recording 90 %;
 - no worker's thread has a 254 sample (it is under its launch's poll) and
   the main thread (in block_on, outside the pool) none either.
Usage: test_idle_pool.py D9D D9CTL TARGET"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, sealed_files, start_cpu_hogs, start_target, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
POOL, NO_WORKER = 254, 255
LEARN_NS = 500_000_000


def main():
    t = Tap()
    binary = os.path.join(tempfile.mkdtemp(prefix="d9-idle-pool-"), "service")
    shutil.copy(TARGET, binary)
    subprocess.run(["strip", "--strip-all", binary], check=True)
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-idle-pool-out-")
    d.start_or_bail(t)
    srv = start_target(binary, "server", "--listen", "127.0.0.1:0", "--work-us", "40", "--duration", "20")
    addr = srv.stdout.readline().split()[1]
    load = subprocess.Popen([binary, "load", "--connect", addr, "--conns", "4", "--rate", "2000",
                             "--duration", "16"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [load, srv]
    subprocess.run(["sleep", "2"])
    hogs = start_cpu_hogs()
    r = d.ctl("record", "--pid", str(srv.pid), "--duration", "6s", "--out", d.out)
    stop_procs(hogs + procs)
    t.ok(r.returncode == 0, "record --pid of the stripped server with a busy blocking pool, mid-run under 2 CPU hogs",
         r.stderr)
    samples = {}                    # tid -> [(ts, worker_id)]
    first_ts = None
    for ev in dump_events(D9CTL, sealed_files(d.out)):
        f = ev["fields"]
        if ev["event"] == "D9SegmentSpanEvent" and first_ts is None:
            first_ts = f["first_ts"]
        elif ev["event"] == "CpuSampleEvent":
            samples.setdefault(f["tid"], []).append((ev["ts"], f["worker_id"]))
    lanes = {}
    for tid, got in samples.items():
        for _, w in got:
            if w < POOL:
                lanes.setdefault(w, set()).add(tid)
    t.ok(sorted(lanes) == [0, 1] and all(len(v) == 1 for v in lanes.values()),
         f"workers 0 and 1, one thread each: {dict((w, sorted(v)) for w, v in lanes.items())}")
    worker_tids = set().union(*lanes.values()) if lanes else set()
    pool = {tid: got for tid, got in samples.items() if tid not in worker_tids and tid != srv.pid}
    n_all = sum(len(got) for got in pool.values())
    n_pool = sum(w == POOL for got in pool.values() for _, w in got)
    late = [(tid, ts - (first_ts or 0), w) for tid, got in pool.items() for ts, w in sorted(got)[1:]
            if first_ts and ts - first_ts >= LEARN_NS and w != POOL]
    t.ok(len(pool) >= 2 and not late and n_pool >= 0.9 * n_all,
         f"the pool's {len(pool)} threads: {n_pool} of {n_all} samples are the pool's (254); after "
         f"{LEARN_NS / 1e9} s none but a thread's first is not: {late[:8]}")
    wrong = {tid: sum(w == POOL for _, w in got) for tid, got in samples.items()
             if (tid in worker_tids or tid == srv.pid) and any(w == POOL for _, w in got)}
    t.ok(not wrong, f"no sample of a worker's thread or of the main thread is the pool's: {wrong}")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
