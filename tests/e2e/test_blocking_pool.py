#!/usr/bin/env python3
"""A stripped target built like production (every runtime thread named
tokio-rt-worker, a steady stream of spawn_blocking jobs, some 1-5 s, so
blocking threads come and go) attached mid-run while two CPU hogs compete
for both cores: runtime.main lists exactly the real workers, no blocking
job is ever a poll on a worker lane, the 50 ms busy polls are on a real
worker, blocking jobs are D9BlockingPollEvents, and parks come from
sched_switch (a stripped build has no park symbol) alternating with
unparks per worker. The target also calls block_in_place (300 ms) every
900 ms: the core moves to another thread, which must keep the worker's id
(no third id, the core's parks on two or more threads), and polls on one
worker never overlap.
Usage: test_blocking_pool.py D9D D9CTL STRIPPED_TARGET [TRIES]"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, start_target, target_truth, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
TRIES = int(sys.argv[4]) if len(sys.argv) > 4 else 1


def one_try(t, d, binary, n):
    hogs = start_cpu_hogs()
    try:
        tgt = start_target(binary, "pool", "--thread-name", "tokio-rt-worker", "--duration", "14")
        time.sleep(1.5)  # mid-run: workers parked and polling, blocking threads alive
        # What status says is attached, while it is.
        mid = {}
        timer = threading.Timer(4.0, lambda: mid.update(d.target_status_with_uprobes(tgt.pid)))
        timer.start()
        r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "8s", "--out", d.out)
        timer.join()
        truth = target_truth(tgt)
    finally:
        stop_procs(hogs)
    t.ok(r.returncode == 0 and truth, f"try {n}: record --pid of the stripped pool target under 2 CPU hogs", r.stderr)
    if not truth:
        return
    # Stripped: no park points, so every poll also has a uretprobe (its end);
    # status listed 39 of apimock's 58 uprobes, leaving those out.
    plan = mid.get("probe_plan", {})
    listed = {k: v for k, v in plan.get("attached", {}).items()
              if k not in ("sched_switch", "cpu_sampling", "run_sampling")}
    t.ok(plan.get("uprobes_attached") == sum(listed.values()) and listed.get("poll_end_uretprobe"),
         f"try {n}: status lists the {plan.get('uprobes_attached')} uprobes attached: {listed}", json.dumps(plan)[:2000])
    workers = truth["workers"]
    meta, open_poll, polls, long_on_worker, busy_on_worker = None, {}, 0, [], 0
    blocking, long_blocking, lanes_bad = 0, 0, 0
    order, lane_tids, bip_on_worker, overlaps = {}, {}, [], []
    # Parks from sched_switch: CPU time from the kernel's sum_exec_runtime,
    # the unpark's wait from the wakeup to switch-in (the kernel's run_delay).
    last_park, cpu_bad, cpu_seen, waits, wait_bad = {}, [], 0, 0, []
    # Resource counters: blocking threads retire after 300 ms, and the sums
    # of per-thread context switches must not go back when they do.
    usage, threads_seen = [], set()
    for ev in dump_events(D9CTL, r.stdout.split()):
        name, f, ts = ev.get("event"), ev.get("fields", {}), ev.get("ts", 0)
        if name == "SegmentMetadataEvent":
            meta = f.get("entries")
        elif name == "ProcessResourceUsageEvent":
            usage.append((ts, f))
        elif name == "D9ProcessResourcesEvent":
            threads_seen.add(f["threads"])
        elif name == "PollStartEvent":
            w = f["worker_id"]
            lanes_bad += not 0 <= w < workers
            if w in open_poll:
                overlaps.append((w, open_poll[w], ts))
            open_poll[w] = ts
            polls += 1
        elif name == "PollEndEvent":
            w = f["worker_id"]
            if w in open_poll:
                dur = ts - open_poll.pop(w)
                if dur >= 900_000_000:
                    long_on_worker.append((w, dur))
                busy_on_worker += 40_000_000 <= dur < 900_000_000
                if 250_000_000 <= dur < 900_000_000:
                    bip_on_worker.append((w, dur))
        elif name == "D9BlockingPollEvent":
            blocking += 1
            long_blocking += f["duration_ns"] >= 900_000_000
        elif name in ("WorkerParkEvent", "WorkerUnparkEvent"):
            w = f["worker_id"]
            order.setdefault(w, []).append("p" if name == "WorkerParkEvent" else "u")
            lane_tids.setdefault(w, set()).add(f["tid"])
            if name == "WorkerParkEvent":
                prev = last_park.get(f["tid"])
                if f["cpu_time_ns"] == 0 or (prev and f["cpu_time_ns"] < prev[1]):
                    cpu_bad.append((w, f["tid"], f["cpu_time_ns"], prev))
                cpu_seen += f["cpu_time_ns"] > 0
                last_park[f["tid"]] = (ts, f["cpu_time_ns"])
            elif f["tid"] in last_park:
                park_ts, park_cpu = last_park[f["tid"]]
                if f["cpu_time_ns"] != park_cpu:
                    cpu_bad.append((w, f["tid"], "unpark", f["cpu_time_ns"], park_cpu))
                waits += f["sched_wait_ns"] > 0
                if f["sched_wait_ns"] > ts - park_ts:
                    wait_bad.append((w, f["sched_wait_ns"], ts - park_ts))
    listed = (meta or {}).get("runtime.main", "")
    t.ok(listed == ",".join(str(i) for i in range(workers)),
         f"try {n}: runtime.main is the {workers} real workers: '{listed}'", meta)
    t.ok(polls > 0 and lanes_bad == 0, f"try {n}: every one of {polls} polls is on a real worker ({lanes_bad} not)")
    t.ok(not long_on_worker, f"try {n}: no poll on a worker lasts a blocking job's 1-5 s", long_on_worker[:5])
    t.ok(busy_on_worker >= 4, f"try {n}: the 50 ms busy polls are on real workers ({busy_on_worker} polls of "
         f">= 40 ms in 8 s, target did {truth['busy_polls']} in {truth['duration_s']:.0f} s)")
    t.ok(blocking >= 40 and long_blocking >= 1,
         f"try {n}: spawn_blocking jobs are blocking-pool polls ({blocking}, {long_blocking} of >= 0.9 s; "
         f"target ran {truth['blocking_jobs']} in {truth['duration_s']:.0f} s)")
    moved = {w: len(tids) for w, tids in lane_tids.items()}
    t.ok(truth.get("block_in_place", 0) >= 5 and max(moved.values(), default=0) >= 2,
         f"try {n}: block_in_place ({truth.get('block_in_place')} calls) moved cores between threads, each still "
         f"parking as its worker (threads parking per worker: {moved}; no new id: see runtime.main above)")
    t.ok(not overlaps, f"try {n}: polls on one worker never overlap, the core's thread changing included "
         f"({len(overlaps)} do; block_in_place sections left on a worker: {len(bip_on_worker)})", overlaps[:5])
    alternate = all(all(a != b for a, b in zip(seq, seq[1:])) for seq in order.values())
    t.ok(set(order) == set(range(workers)) and all(len(s) >= 4 for s in order.values()) and alternate,
         f"try {n}: parks from sched_switch on each worker, alternating with unparks "
         f"({ {w: len(s) for w, s in order.items()} })")
    t.ok(cpu_seen >= 2 and not cpu_bad,
         f"try {n}: {cpu_seen} parks carry the thread's CPU time, growing per thread; each unpark the same",
         cpu_bad[:5])
    usage.sort(key=lambda u: u[0])
    back = [(k, a[1][k], b[1][k]) for a, b in zip(usage, usage[1:]) for k in a[1] if b[1][k] < a[1][k]]
    t.ok(len(usage) >= 40 and len(threads_seen) >= 2 and not back,
         f"try {n}: {len(usage)} resource samples while threads come and go ({sorted(threads_seen)}): "
         "no counter ever goes back", back[:5])
    t.ok(waits >= 1 and not wait_bad,
         f"try {n}: {waits} unparks under 2 CPU hogs carry a scheduler wait, none longer than the park",
         wait_bad[:5])


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="d9-pool-")
    # Alone in a directory: no debug file next to it, as shipped.
    binary = os.path.join(tmp, "service")
    shutil.copy(TARGET, binary)
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-pool-out-")
    d.start_or_bail(t)
    r = subprocess.run([D9CTL, "plan", "--exe", binary], capture_output=True, text=True)
    t.ok(r.returncode == 0 and "stripped" in r.stdout and "[blocking pool]" in r.stdout,
         "plan: stripped build, blocking-pool polls told from the task vtables", r.stdout[-2000:])
    for n in range(1, TRIES + 1):
        one_try(t, d, binary, n)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if t.failed == 0:
        shutil.rmtree(d.out, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
