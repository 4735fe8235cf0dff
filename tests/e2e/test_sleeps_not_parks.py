#!/usr/bin/env python3
"""The default probe set (no uprobe) parks a worker only where Tokio parks
one: a voluntary sleep outside a task poll in an epoll or futex wait. The
mixed target runs with --unpark-sleep-every 40: every 40th unpark of a
worker, the runtime's on_thread_unpark hook sleeps 3 ms in
unpark_hook_sleep_3ms (clock_nanosleep), in the worker's loop, outside any
task poll, as npm tombi's brk in free() was. Each such sleep is an off-CPU
sample on its worker with that frame in its stack, and no park starts
there; the workers' real parks are still written, each with its unpark.
Usage: test_sleeps_not_parks.py D9D D9CTL TARGET"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, symbol_names  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def main():
    t = Tap()
    d = D9d(D9D, D9CTL)
    d.start_or_bail(t)
    out = tempfile.mkdtemp(prefix="d9-not-parks-")
    r = d.ctl("record", "--duration", "30s", "--out", out, "--", TARGET, "mixed", "--duration", "4",
              "--unpark-sleep-every", "40")
    t.ok(r.returncode == 0 and r.stdout.split(), "record -- CMD without --probes sealed its trace", r.stderr)
    hook_sleeps, parks, unparks = {}, {}, {}
    events = list(dump_events(D9CTL, r.stdout.split()))
    syms = symbol_names(events)
    for ev in events:
        f = ev["fields"]
        if ev["event"] == "CpuSampleEvent" and f["source"] == 1:
            names = [syms.get(int(a, 16), "") for a in f.get("callchain") or []]
            if any("unpark_hook_sleep_3ms" in n for n in names):
                hook_sleeps[(f["tid"], ev["ts"])] = f["worker_id"]
        elif ev["event"] == "WorkerParkEvent":
            parks[(f["tid"], ev["ts"])] = f["worker_id"]
        elif ev["event"] == "WorkerUnparkEvent":
            unparks[f["worker_id"]] = unparks.get(f["worker_id"], 0) + 1
    t.ok(len(hook_sleeps) >= 10 and set(hook_sleeps.values()) <= {0, 1},
         f"the hook's sleeps are off-CPU samples on worker lanes: {len(hook_sleeps)}, "
         f"workers {sorted(set(hook_sleeps.values()))}")
    both = sorted(set(hook_sleeps) & set(parks))
    t.ok(not both, f"no park starts at a hook sleep: {len(both)} of {len(hook_sleeps)} did {both[:3]}")
    per = {}
    for w in parks.values():
        per[w] = per.get(w, 0) + 1
    t.ok(all(per.get(w, 0) >= 3 and per.get(w) == unparks.get(w) for w in (0, 1)),
         f"each worker still parks and unparks: parks {per}, unparks {unparks}")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
