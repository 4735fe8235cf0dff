#!/usr/bin/env python3
"""The default set on a CPU-throttled service (a cgroup CPU quota, as a
container's CPU limit sets one): the echo server target runs in a cgroup
allowed 10 ms of CPU per 100 ms while a client outside it keeps its
connections busy (32: with 8, the workers were mostly between polls when
stopped, at their way out of epoll_wait, and 2-9 of the 63 stops were
inside a poll). Each time the quota runs out, the kernel stops the
server's threads wherever they are for the rest of the period; a worker
stopped inside a task poll keeps that poll, and every task queued behind
it, waiting for up to 90 ms. Such a poll gets less than a run tick of CPU
time, so only the preemption shows it.

Checks: the cgroup was throttled while recording (the premise); the trace
has at least 3 "preempted" D9LongPollEvents of at least 20 ms (eight
connections keep the server's workers in polls that make syscalls, where
the kernel stops a throttled thread), each on a worker lane,
naming one of the server's futures, with a stack through it; and no long
poll of 20 ms or more is invented: no worker has more of them than the
periods the kernel throttled; `d9ctl report` lists the longest of them.
Usage: test_throttled.py D9D D9CTL TARGET"""
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, exec_done  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
QUOTA_US, PERIOD_US = 10000, 100000


def make_cgroup():
    """(directory, procs file, cpu.stat reader) of a new cgroup with the
    quota: cgroup v1's cpu controller where it is mounted (Debian 12's
    hybrid layout), else cgroup v2's."""
    name = f"d9-throttle-{os.getpid()}"
    if os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        cg = f"/sys/fs/cgroup/cpu/{name}"
        os.mkdir(cg)
        with open(f"{cg}/cpu.cfs_period_us", "w") as f:
            f.write(str(PERIOD_US))
        with open(f"{cg}/cpu.cfs_quota_us", "w") as f:
            f.write(str(QUOTA_US))
    else:
        with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
            f.write("+cpu")
        cg = f"/sys/fs/cgroup/{name}"
        os.mkdir(cg)
        with open(f"{cg}/cpu.max", "w") as f:
            f.write(f"{QUOTA_US} {PERIOD_US}")
    return cg


def throttled_periods(cg):
    with open(f"{cg}/cpu.stat") as f:
        stat = dict(line.split() for line in f)
    return int(stat["nr_throttled"])


def main():
    t = Tap()
    cg = make_cgroup()
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-throttled-out-")
    srv = load = None
    try:
        d.start_or_bail(t)

        def join_cgroup():
            with open(f"{cg}/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
        srv = subprocess.Popen([TARGET, "server", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, preexec_fn=join_cgroup)
        exec_done(srv.pid)
        addr = srv.stdout.readline().split()[1]
        load = subprocess.Popen([TARGET, "load", "--connect", addr, "--conns", "32", "--duration", "18"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        before = throttled_periods(cg)
        r = d.ctl("record", "--pid", str(srv.pid), "--duration", "10s", "--out", d.out)
        throttled = throttled_periods(cg) - before
        t.ok(r.returncode == 0 and r.stdout.split(), "record --pid (the default set) sealed its trace", r.stderr)
        t.ok(throttled >= 20, f"the server's cgroup was throttled while recording: {throttled} periods of 100 ms")
        evs = list(dump_events(D9CTL, r.stdout.split()))
        longs = [ev["fields"] for ev in evs if ev["event"] == "D9LongPollEvent"]
        meta = next((ev["fields"]["entries"] for ev in evs if ev["event"] == "SegmentMetadataEvent"), {})
        pre = [f for f in longs if f["how"] == "preempted" and f["min_ns"] >= 20_000_000]
        summary = [(f["how"], f["min_ns"] // 1000, f["ticks"], f["spawn_loc"]) for f in longs[:12]]
        t.ok(meta.get("probes") == "sched,cpu,longpoll", f"the default set: probes {meta.get('probes')!r}")
        # 6-13 of them in 6 s here (2026-12-04, kernel 6.18, 32 connections);
        # the other stopped polls had two run ticks and read as "running".
        # Before this kind, there was none. 2026-12-06: 0, 1, 3, 3, 7, 7, 7,
        # 7, 10 in 6 s runs (the same code gave 0 and 10): 10 s now, while
        # why a run gets so few is not understood.
        t.ok(len(pre) >= 3, f"stopped polls are preempted long polls of >= 20 ms: {len(pre)} ({summary})")
        # A poll stopped before BPF's Worker search named its thread's worker
        # (the recording's first milliseconds) says worker 255, unknown: it
        # must still be on a thread that other events name as a worker.
        named = {ev["fields"]["tid"] for ev in evs if ev["event"] in ("D9LongPollEvent", "CpuSampleEvent")
                 and ev["fields"].get("worker_id") in (0, 1)}
        t.ok(pre and all((f["worker_id"] in (0, 1) or f["tid"] in named) and f["spawn_loc"].startswith("d9_target::")
                         and f["ticks"] <= 1 and f["min_ns"] < 1e9 and f["stack"] for f in pre),
             "each on a worker's thread, naming a server future, with at most one tick, under 1 s, with its stack",
             repr(pre[:3]))
        # d9ctl report lists them: before, a default-set recording's report
        # said "Longest polls: none" whatever its long polls.
        rep = d.ctl("report", "--json", "--top", "5", *r.stdout.split())
        doc = json.loads(rep.stdout) if rep.returncode == 0 else {}
        listed = doc.get("long_polls_from_stacks", [])
        want = sorted((f["min_ns"] for f in longs), reverse=True)[:5]
        t.ok(doc.get("long_polls_from_stacks_total") == len(longs) and [p["min_ns"] for p in listed] == want
             and all(p["how"] in ("running", "blocked", "preempted") and p["future"] and p["stack"] for p in listed),
             f"report --json lists the 5 longest of the {len(longs)} long polls, with how, future and stack",
             rep.stdout[:2000] + rep.stderr)
        text = d.ctl("report", *r.stdout.split()).stdout
        t.ok("Long polls seen from stacks and switches" in text and "preempted" in text,
             "the report's text shows them", text)
        # A throttled period stops each worker at most once, so a worker
        # with more 20 ms long polls than throttled periods has one invented.
        big = dict(collections.Counter(f["worker_id"] for f in longs if f["min_ns"] >= 20_000_000))
        t.ok(all(n <= throttled for n in big.values()),
             f"no long poll invented: of >= 20 ms, {big} by worker, none more than the {throttled} throttled periods")
    finally:
        for p in (load, srv):
            if p:
                p.kill()
                p.wait()
        d.cleanup(keep=t.failed > 0)
        time.sleep(0.2)
        os.rmdir(cg)
    t.done()


main()
