#!/usr/bin/env python3
"""A stripped target, alone in a directory so no debug file is found, gets
terminate events from Harness::complete found through its task vtables:
recorded from its first instruction, every task the target says it spawned
(and awaited: all of mixed's tasks finish before it prints its counts) ends
with one TaskTerminateEvent (>= 95 %), no task id terminates twice, every
terminated id was polled first, and the plan's routes say where terminate
comes from. Wakes come from the task waker vtable's wake_by_val: wake
events whose woken task is polled afterwards (>= 95 %), and spawns say the
tasks are instrumented.
Usage: test_stripped_task_events.py D9D D9CTL STRIPPED_TARGET"""
import bisect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines, start_target  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def check_routes(t, d, binary):
    tgt = start_target(binary, "mixed", "--duration", "5")
    time.sleep(0.5)
    # --wait-plan: the routes this checks are printed once the plan is in
    # (a plain attach to a file not planned yet returns before that).
    r = d.ctl("attach", "--probes", "all", "--wait-plan", "--pid", str(tgt.pid))
    routes = {}
    for line in r.stdout.splitlines():
        if line.startswith("route: "):
            key, _, val = line[7:].partition(" ")
            routes[key] = val.strip()
    d.ctl("detach", "--pid", str(tgt.pid))
    tgt.kill()
    tgt.wait()
    t.ok(r.returncode == 0 and "vtable" in routes.get("terminate", "") and "stripped" in r.stdout,
         f"attach: stripped build, terminate route from the task vtables: {routes.get('terminate')!r}",
         r.stdout + r.stderr)
    t.ok("task waker vtable" in routes.get("wake", "") and "wake_by_ref not attached" in routes.get("wake", ""),
         f"attach: wake route from the task waker vtable, saying what is not traced: {routes.get('wake')!r}")


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="d9-term-")
    binary = os.path.join(tmp, "service")
    shutil.copy(TARGET, binary)
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-term-out-")
    d.start_or_bail(t)
    check_routes(t, d, binary)
    r = d.ctl("record", "--probes", "all", "--wakes", "exact", "--duration", "30s", "--out", d.out, "--", binary, "mixed",
              "--duration", "4")
    truth = None
    for line in r.stderr.splitlines():
        if line.startswith("{"):
            truth = json.loads(line)
    t.ok(r.returncode == 0 and truth, "record -- CMD of the stripped target sealed its trace", r.stderr)
    terms, twice = [], 0
    wakes, polls_of, spawns, instrumented = [], {}, 0, 0
    for p in r.stdout.split():
        rc, out = dump_json_lines(D9CTL, p)
        for line in out.splitlines():
            if line.startswith('{"event":"PollStartEvent"') or line.startswith('{"event":"D9BlockingPollEvent"'):
                ev = json.loads(line)
                # A blocking poll is written at its end: it began duration_ns before.
                start = ev["ts"] - ev["fields"].get("duration_ns", 0)
                polls_of.setdefault(ev["fields"]["task_id"], []).append(start)
            elif line.startswith('{"event":"WakeEventEvent"'):
                ev = json.loads(line)
                wakes.append((ev["ts"], ev["fields"]["woken_task_id"]))
            elif line.startswith('{"event":"TaskSpawnEvent"'):
                spawns += 1
                instrumented += json.loads(line)["fields"]["instrumented"] is True
            elif line.startswith('{"event":"TaskTerminateEvent"'):
                ev = json.loads(line)
                terms.append((ev["ts"], ev["fields"]["task_id"]))
    terminated, unpolled_ids = set(), []
    for ts, tid in terms:
        twice += tid in terminated
        if not polls_of.get(tid) or min(polls_of[tid]) > ts:
            unpolled_ids.append(tid)
        terminated.add(tid)
    finished = truth["tasks_spawned"] if truth else 0
    t.ok(finished > 0 and len(terminated) >= 0.95 * finished,
         f"terminate for {len(terminated)} task ids of the {finished} tasks the target says finished "
         f"({100.0 * len(terminated) / max(finished, 1):.1f} %)")
    # The runtime's own tasks (worker launches: blocking tasks) end too; nothing more.
    t.ok(len(terminated) <= finished + 16, f"no invented terminates ({len(terminated)} for {finished})")
    t.ok(twice == 0, f"no task terminates twice ({twice})")
    # The workers' launch tasks too: their poll encloses the worker's whole
    # loop and is written when the launch task terminates.
    t.ok(not unpolled_ids, f"every terminated task was polled first, the workers' launch tasks too "
         f"({len(unpolled_ids)} were not: ids {sorted(unpolled_ids)})", unpolled_ids)
    for seq in polls_of.values():
        seq.sort()
    # A wake is followed by a poll of the woken task, within 1 s (mixed's
    # tasks are short; only a blocked worker delays one, by 50 ms).
    followed, late = 0, 0
    for ts, tid in wakes:
        seq = polls_of.get(tid, [])
        i = bisect.bisect_left(seq, ts)
        followed += i < len(seq) and seq[i] - ts <= 1_000_000_000
    t.ok(len(wakes) > 1000 and followed >= 0.95 * len(wakes),
         f"{len(wakes)} wakes from the task waker vtable, {followed} "
         f"({100.0 * followed / max(len(wakes), 1):.1f} %) of them followed within 1 s by a poll of the woken task")
    t.ok(spawns > 0 and instrumented == spawns, f"spawns say their wakes are traced ({instrumented} of {spawns})")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if t.failed == 0:
        shutil.rmtree(d.out, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
