#!/usr/bin/env python3
"""Blocking-pool jobs are as long as they run, and woken workers wait as
long as the scheduler made them, with every probe, on a build with
symbols: there a poll ends at the thread's next poll or park
(entry-only), but a blocking-pool thread waits for its next job on a
condvar, no park point, so a job ended only at the next job's start on its
thread. npm moon and restate-server: every job on a thread began exactly
where the one before ended, a 0.2 ms job listed as 2.9 s, the idle time in
between counted as the job's. A blocking task's poll now ends by a
uretprobe on it (listed in status as poll_end_uretprobe).
The report counts a job as ended with its poll, which runs it to
completion: builds often have no terminate point for blocking tasks, and
moon's report said 2725 tasks alive at the end where 7 were (and a task
seen only ending was never taken off). The target keeps 4 tasks for its
whole run, up to 8 short ones and a few long jobs at a time.
Parks there come from the park uprobe and end at the worker's switch-in
after its sleep: the unpark's wait for a CPU (from its wakeup) was read
before the kernel adds it to the thread's run_delay, so it was about 0
(npm moon: 0.02 ms over 8 s, where perf sched saw 917 ms); it is checked
against each thread's schedstat run-queue time.
The pool target's jobs sleep 5-20 ms, every 7th 1-5 s, one every 60 ms,
attached mid-run under 2 CPU hogs.
Usage: test_blocking_jobs.py D9D D9CTL TARGET"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, start_target, target_truth, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def run_queue_ns(pid):
    """Each thread's time waiting on a run queue so far (schedstat), with
    its start time, which tells a tid the kernel gave to a new thread."""
    got = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                queued = int(f.read().split()[1])
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                started = int(f.read().rsplit(")", 1)[1].split()[19])
            got[int(tid)] = (started, queued)
        except (OSError, IndexError, ValueError):
            pass
    return got


def main():
    t = Tap()
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-jobs-out-")
    d.start_or_bail(t)
    hogs = start_cpu_hogs()
    try:
        tgt = start_target(TARGET, "pool", "--thread-name", "tokio-rt-worker", "--duration", "10")
        time.sleep(1.5)
        mid = {}
        timer = threading.Timer(3.0, lambda: mid.update(d.target_status_with_uprobes(tgt.pid)))
        timer.start()
        before = run_queue_ns(tgt.pid)
        r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "6s", "--out", d.out)
        after = run_queue_ns(tgt.pid)
        timer.join()
        truth = target_truth(tgt)
    finally:
        stop_procs(hogs)
    t.ok(r.returncode == 0 and truth, "record --probes all of the pool target under 2 CPU hogs", r.stderr)
    plan = mid.get("probe_plan", {})
    att = {k: v for k, v in plan.get("attached", {}).items()
           if k not in ("sched_switch", "cpu_sampling", "run_sampling")}
    t.ok(att.get("park") and 0 < att.get("poll_end_uretprobe", 0) < att.get("poll", 0)
         and plan.get("uprobes_attached") == sum(att.values()),
         f"park points (polls end at the next poll or park), and a uretprobe on each blocking task's poll: {att}, "
         f"{plan.get('uprobes_attached')} attached", str(plan)[:2000])
    jobs, by_tid, waits, wait_by_tid = [], {}, [], {}
    for ev in dump_events(D9CTL, r.stdout.split()):
        if ev["event"] == "WorkerUnparkEvent":
            f = ev["fields"]
            waits.append(f["sched_wait_ns"])
            wait_by_tid[f["tid"]] = wait_by_tid.get(f["tid"], 0) + f["sched_wait_ns"]
        elif ev["event"] == "D9BlockingPollEvent":
            f = ev["fields"]
            jobs.append(f["duration_ns"])
            by_tid.setdefault(f["tid"], []).append((ev["ts"] - f["duration_ns"], ev["ts"]))
    # Ended where the next began: the end taken from that start.
    joined = sum(1 for v in by_tid.values() for a, b in zip(sorted(v), sorted(v)[1:]) if b[0] == a[1])
    short = sorted(x for x in jobs if x < 900_000_000)
    median = statistics.median(short) / 1e6 if short else 0
    t.ok(len(jobs) > 40 and joined == 0,
         f"{len(jobs)} jobs on {len(by_tid)} threads ({truth and truth.get('blocking_jobs')} in the target's 10 s); "
         f"{joined} ended exactly where the thread's next began")
    t.ok(short and 4 < median < 30,
         f"the 5-20 ms jobs last what they run: median {median:.1f} ms of {len(short)} "
         f"(the idle time to the next job, 60 ms apart, made them longer)")
    # Parks by the park uprobe, unparks at the switch-in after the sleep:
    # under the hogs a woken worker waits for a CPU, and that wait was
    # read before the kernel had added it (npm moon: 0.02 ms in 8 s where
    # perf saw 917 ms).
    # The wait is the kernel's own (run_delay at the switch-in, since
    # 2026-12-06): a wakeup that preempts a hog at once waits 0 there (the
    # run queue's clock is not moved again before the switch), where the
    # time from a sched_wakeup program's ktime gave it some microseconds.
    # Here that made 11-13 % of unparks wait instead of 56 %, with the same
    # total (113-157 ms against 134-145 ms in 6 s); the bug this guards
    # against gave 0.02 ms in all.
    waited = [w for w in waits if w > 0]
    t.ok(len(waits) > 50 and len(waited) > len(waits) // 20 and sum(waited) > 20_000_000,
         f"{len(waited)} of {len(waits)} unparks waited for a CPU after their wakeup, "
         f"{sum(waited) / 1e6:.1f} ms in all (over 5 % of them, over 20 ms)")
    # No more than the kernel's run-queue time of each thread meanwhile, for
    # the threads there at both readings: a block_in_place thread that held
    # a core can exit before the second (a CI run under another session's
    # hogs: 1,007.9 ms of waits against "0"), and its tid go to a new one.
    same = [tid for tid in wait_by_tid if tid in before and tid in after and before[tid][0] == after[tid][0]]
    over = {tid: (round(wait_by_tid[tid] / 1e6, 1), round((after[tid][1] - before[tid][1]) / 1e6, 1))
            for tid in same if wait_by_tid[tid] > after[tid][1] - before[tid][1] + 2_000_000}
    runq = sum(after[tid][1] - before[tid][1] for tid in same)
    t.ok(len(same) >= 2 and not over, f"each worker's unpark waits are within its schedstat run-queue time, "
         f"{len(same)} of {len(wait_by_tid)} threads there at both readings (over: {over}; "
         f"{sum(wait_by_tid[tid] for tid in same) / 1e6:.1f} ms of unpark waits, {runq / 1e6:.1f} ms run-queue time)")
    rep = subprocess.run([D9CTL, "report", "--json", *r.stdout.split()], capture_output=True, text=True, timeout=120)
    tasks = (json.loads(rep.stdout) if rep.returncode == 0 else {}).get("tasks", {})
    at_end = tasks.get("alive", {}).get("at_end", -1)
    ended = tasks.get("terminated", 0) + tasks.get("blocking_jobs_ended", 0)
    # Without a spawn point (1.24's is inlined) d9d writes each spawn at the
    # task's first poll: those are first seen polling, not spawns seen
    # (npm Deno: "15500 spawned, 0 first seen polling", tasks alive since
    # its start among them).
    if att.get("spawn"):
        t.ok(tasks.get("spawned", 0) > 100, f"a spawn point: {tasks.get('spawned')} spawns seen")
    else:
        t.ok(tasks.get("spawned") == 0 and tasks.get("first_seen_polling") == tasks.get("seen", -1) > len(jobs),
             f"no spawn point: {tasks.get('spawned')} spawns seen, {tasks.get('first_seen_polling')} of "
             f"{tasks.get('seen')} tasks first seen polling")
    t.ok(4 <= at_end <= 20 and ended >= len(jobs),
         f"report: {at_end} tasks alive at the end; {tasks.get('terminated')} terminated and "
         f"{tasks.get('blocking_jobs_ended')} jobs ended with their poll (of {len(jobs)} jobs)",
         json.dumps(tasks) + rep.stderr)
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
