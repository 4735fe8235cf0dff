#!/usr/bin/env python3
"""`d9ctl report` of a process d9d had no probe plan for says so, and says
where its CPU went, real BPF, the default set.

A process whose Tokio d9d cannot plan (in a shared library: npm pact-core
ships its mock server only as libpact_ffi.so; or no Tokio at all) is still
recorded: CPU and off-CPU samples, switches. Its report said "none: ...
(idle workers that never woke ...)" while two worker threads served
requests at 0.61 cores, and "Longest blocking-pool jobs: none" where none
can be seen. Here the process is a shell spinning on one core. Checks:
 - record succeeds, with the plan's failure said;
 - the report's JSON says why there was no plan; its text says d9d had no
   probe plan rather than idle workers, and blocking-pool jobs are "not
   recorded";
 - the thread that took the CPU is listed with >= 90 % of the on-CPU
   samples, by tid and name.
A Tokio target recorded for less time than its probe plan takes (plans
held 4 s): the report says the recording ended before the plan was built
(npm restate-server, planned in 7-17 s on a loaded machine: its report
blamed "the probe set" and "idle workers" with every probe asked for).
The plan is still finished and cached: the next recording has it at once
(restate's each began again from nothing: 3 plans for one process).
An idle Tokio server recorded with every probe: no poll, and the report
says none ran with the poll probes attached, not that the probe set has
none (npm pagefind, whose work runs outside Tokio).

Usage: test_report_no_plan.py D9D D9CTL TARGET"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap, start_cpu_hogs, start_slow_plan_d9d, start_target, stop_procs, wait_for  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def report(paths):
    """(JSON document, text) of d9ctl report over paths."""
    rep = subprocess.run([D9CTL, "report", "--json", *paths], capture_output=True, text=True, timeout=120)
    txt = subprocess.run([D9CTL, "report", *paths], capture_output=True, text=True, timeout=120).stdout
    return (json.loads(rep.stdout) if rep.returncode == 0 else {}), txt


def plans_built(d):
    return ((d.status() or {}).get("daemon") or {}).get("plans_built", 0)


def plan_too_late(t):
    d = start_slow_plan_d9d(t, D9D, D9CTL, 4)
    d.out = tempfile.mkdtemp(prefix="d9-lateplan-out-")
    tgt = start_target(TARGET, "mixed", "--duration", "14")
    try:
        r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "1s", "--out", d.out)
        doc, txt = report(r.stdout.split())
        t.ok(r.returncode == 0 and "before its probe plan was built" in r.stderr and
             "before its probe plan was built" in (doc.get("no_plan") or "") and "d9d had no probe plan" in txt and
             "the probe set records none" not in txt and "idle workers" not in txt,
             f"a recording over before its plan: no_plan {doc.get('no_plan')!r}", r.stderr + txt[-2500:])
        # The plan is finished for the cache all the same: the next
        # recording has it at once (each began again from nothing).
        built = wait_for(lambda: plans_built(d) >= 1, 20, step=0.2)
        r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "1s", "--out", d.out)
        doc, _ = report(r.stdout.split())
        t.ok(built and r.returncode == 0 and "before its probe plan" not in r.stderr and doc.get("polls", 0) > 100,
             f"the abandoned plan was built and cached: the next 1 s recording has {doc.get('polls')} polls",
             r.stderr)
    finally:
        stop_procs([tgt])
    d.cleanup(keep=t.failed > 0)


def idle_with_poll_probes(t, d):
    srv = start_target(TARGET, "server", "--listen", "127.0.0.1:0")
    try:
        r = d.ctl("record", "--probes", "all", "--pid", str(srv.pid), "--duration", "1s", "--out", d.out)
    finally:
        stop_procs([srv])
    doc, txt = report(r.stdout.split())
    t.ok(r.returncode == 0 and doc.get("polls") == 0 and "with poll probes attached" in txt and
         "the probe set records none" not in txt,
         "an idle server with every probe: no poll, said as such", r.stderr + txt[-2500:])


def main():
    t = Tap()
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-noplan-out-")
    d.start_or_bail(t)
    hogs = start_cpu_hogs(1)
    try:
        r = d.ctl("record", "--pid", str(hogs[0].pid), "--duration", "2s", "--out", d.out)
    finally:
        stop_procs(hogs)
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths, "record --pid of a process with no Tokio in it", r.stderr)
    doc, txt = report(paths)
    t.ok("not a Tokio binary" in (doc.get("no_plan") or "") and "d9d had no probe plan" in txt and
         "idle workers" not in txt and "not recorded: the trace has no poll events" in txt,
         f"the report says why no worker is named: {doc.get('no_plan')!r}", txt[-2500:])
    busiest = (doc.get("threads_off_workers") or [{}])[0]
    t.ok(busiest.get("tid") == hogs[0].pid and busiest.get("share", 0) >= 0.9 and busiest.get("name") == "sh" and
         f"thread {hogs[0].pid}" in txt,
         f"where the CPU went: {busiest}", json.dumps(doc.get("threads_off_workers")))
    idle_with_poll_probes(t, d)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    plan_too_late(t)
    t.done()


main()
