#!/usr/bin/env python3
"""A stripped target whose tasks call block_in_place all the time (short
blocking work of varied length, eight callers at once: the worker cores
move between threads many times a second and stand-in threads come and
go, as deltachat's SQLite calls make them), attached mid-run while two CPU
hogs compete for both cores. runtime.main lists exactly the configured
workers, every poll is on one of them, polls on one worker never overlap
(the blocking section is on no worker), the cores did move (several
threads poll as one worker), the 50 ms busy polls are on real workers and
the worker loops are blocking-pool polls. PROBES: 'all' (poll probes:
each task poll names its worker) or 'default' (no uprobes: the polls are
the long ones, D9LongPollEvent, and each stack names its worker).
Usage: test_block_in_place.py D9D D9CTL STRIPPED_TARGET PROBES [TRIES]"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, start_target, target_truth, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, TARGET, PROBES = sys.argv[1:5]
TRIES = int(sys.argv[5]) if len(sys.argv) > 5 else 1


def one_try(t, d, binary, n):
    hogs = start_cpu_hogs()
    try:
        tgt = start_target(binary, "inplace", "--thread-name", "tokio-rt-worker", "--duration", "10")
        time.sleep(1.5)  # mid-run: cores already moving between threads
        probes = ["--probes", "all"] if PROBES == "all" else []
        r = d.ctl("record", *probes, "--pid", str(tgt.pid), "--duration", "6s", "--out", d.out)
        truth = target_truth(tgt)
    finally:
        stop_procs(hogs)
    t.ok(r.returncode == 0 and truth and truth["block_in_place"] > 100,
         f"try {n}: record --pid ({PROBES}) of the stripped inplace target under 2 CPU hogs "
         f"({truth and truth['block_in_place']} block_in_place calls)", r.stderr)
    if not truth:
        return
    workers = truth["workers"]
    meta, open_poll, polls, lanes_bad, overlaps, busy = None, {}, 0, [], [], 0
    loops, lane_tids, offlane, first_ts = 0, {}, {}, 0
    for ev in dump_events(D9CTL, r.stdout.split()):
        name, f, ts = ev.get("event"), ev.get("fields", {}), ev.get("ts", 0)
        if name == "SegmentMetadataEvent":
            meta = f.get("entries")
        elif name == "PollStartEvent":
            w = f["worker_id"]
            first_ts = first_ts or ts
            if not 0 <= w < workers:
                lanes_bad.append((w, ts - first_ts))
            if w in open_poll:
                overlaps.append((w, open_poll[w], ts))
            open_poll[w] = ts
            polls += 1
        elif name == "PollEndEvent":
            w = f["worker_id"]
            if w in open_poll:
                busy += 40_000_000 <= ts - open_poll.pop(w) < 900_000_000
        elif name == "D9BlockingPollEvent":
            loops += 1
        elif name == "D9LongPollEvent":
            # The default set's polls: long ones, on the worker whose loop
            # ran them, or on none (255) for a thread in its blocking section.
            first_ts = first_ts or ts
            polls += 1
            if f["worker_id"] != 255 and not 0 <= f["worker_id"] < workers:
                lanes_bad.append((f["worker_id"], ts - first_ts))
            busy += (f["how"] == "running" and 40_000_000 <= f["min_ns"] < 900_000_000 and
                     f["worker_id"] < workers)
        elif name in ("WorkerParkEvent", "WorkerUnparkEvent"):
            lane_tids.setdefault(f["worker_id"], set()).add(f["tid"])
        elif name == "CpuSampleEvent" and f.get("worker_id", 255) < 254 and f["worker_id"] >= workers:
            offlane.setdefault(f["worker_id"], []).append(ts - (first_ts or ts))
    listed = (meta or {}).get("runtime.main", "")
    t.ok(listed == ",".join(str(i) for i in range(workers)),
         f"try {n}: runtime.main is the {workers} configured workers: '{listed}'", meta)
    # Every task poll (the default set: every long poll) names its worker
    # (BPF reads the loop's Arc<Worker>, docs/probe-plan.md): no poll and
    # no sample on an id that is not one of Tokio's workers, from the attach on.
    late_samples = [t for ts in offlane.values() for t in ts]
    t.ok(polls > 0 and not lanes_bad and not late_samples,
         f"try {n}: all {polls} polls are on a configured worker ({len(lanes_bad)} are not: {lanes_bad[:5]}; "
         f"samples elsewhere: { {w: len(ts) for w, ts in offlane.items()} })")
    t.ok(not overlaps, f"try {n}: polls on one worker never overlap: a thread in block_in_place is off the lane "
         f"({len(overlaps)} do)", overlaps[:5])
    moved = {w: len(tids) for w, tids in lane_tids.items()}
    t.ok(max(moved.values(), default=0) >= 3,
         f"try {n}: the cores moved between threads, each parking as its worker (threads per worker: {moved})")
    t.ok(busy >= 3, f"try {n}: the 50 ms busy polls are on configured workers ({busy} polls of >= 40 ms in 6 s)")
    if PROBES == "all":
        t.ok(loops >= 50, f"try {n}: the stand-in worker loops are blocking-pool polls ({loops})")


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="d9-inplace-")
    binary = os.path.join(tmp, "service")  # alone: no debug file next to it
    shutil.copy(TARGET, binary)
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-inplace-out-")
    d.start_or_bail(t)
    for n in range(1, TRIES + 1):
        one_try(t, d, binary, n)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if t.failed == 0:
        shutil.rmtree(d.out, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
