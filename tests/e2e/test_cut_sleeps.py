#!/usr/bin/env python3
"""A sleep inside a poll whose stack is cut before the poll frame is that
poll blocking, not a park, in the default set. npm pact stub server's
request stacks are 46 KiB deep, the deep copies' byte rate was used up,
and all 501 of its workers' parks in an 8 s recording were sleeps inside
a poll: the workers read 13-16 % parked when they were 99 % busy. The
`deepsleep` target sleeps 5 ms inside a poll every 50 ms through one
function, alternately straight from the poll (a stack whole within the
8 KiB copy) and under a 12 KiB frame (cut: d9d runs with stack_deep_rate
0, no deep copies), recorded mid-run with the default set under 2 CPU
hogs. Checks:
 - every off-CPU sample of a worker asleep in `sleep_in_poll` after the
   first whole one is a "blocked" long poll of the sleeper's future from
   the same instant, and no park;
 - the cut ones are at least 40 % of those sleeps (every other one);
 - status counts the cut stacks it placed in a poll by their site.
Usage: test_cut_sleeps.py D9D D9CTL TARGET"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import (D9d, Tap, dump_events, sealed_files, start_cpu_hogs, start_target, stop_procs,  # noqa
                       symbol_names, target_truth)

D9D, D9CTL, TARGET = sys.argv[1:4]
CUT = "[stack cut: callers beyond the copied stack"


def main():
    t = Tap()
    d = D9d(D9D, D9CTL, settings={"stack_deep_rate": "0"})
    d.out = tempfile.mkdtemp(prefix="d9-cut-sleeps-out-")
    d.start_or_bail(t)
    tgt = start_target(TARGET, "deepsleep", "--duration", "9")
    subprocess.run(["sleep", "1"])
    hogs = start_cpu_hogs()
    r = d.ctl("record", "--pid", str(tgt.pid), "--duration", "6s", "--out", d.out)
    stop_procs(hogs)
    st = json.loads(d.ctl("status", "--all", "--json").stdout or "{}")
    truth = target_truth(tgt)
    t.ok(r.returncode == 0 and truth and truth.get("sleeps", 0) >= 100,
         f"record --pid of the deepsleep target, mid-run under 2 CPU hogs, no deep copies: {truth}", r.stderr)
    evs = list(dump_events(D9CTL, sealed_files(d.out)))
    names = symbol_names(evs)

    def frames(f):
        return [names.get(int(x, 16) if isinstance(x, str) else x, "") for x in f.get("callchain") or []]

    sleeps, parks, blocked = [], set(), {}
    for ev in evs:
        f = ev["fields"]
        # Off-CPU samples of the worker in the sleep (not a preemption
        # after it, whose stack is still there: "[runnable: ...]" first).
        chain = frames(f) if ev["event"] == "CpuSampleEvent" and f.get("source") == 1 and \
            f["worker_id"] < 254 else []
        if chain and not chain[0].startswith("[runnable") and any("sleep_in_poll" in x for x in chain):
            sleeps.append((ev["ts"], f["tid"], any(x.startswith(CUT) for x in chain)))
        elif ev["event"] == "WorkerParkEvent":
            parks.add((ev["ts"], f["tid"]))
        elif ev["event"] == "D9LongPollEvent" and f["how"] == "blocked":
            blocked[(ev["ts"] - f["min_ns"], f["tid"])] = f["spawn_loc"]
    sleeps.sort()
    first_whole = next((i for i, s in enumerate(sleeps) if not s[2]), len(sleeps))
    after = sleeps[first_whole:]
    wrong = [(ts, tid, cut) for ts, tid, cut in after
             if (ts, tid) in parks or "deep_sleeper" not in blocked.get((ts, tid), "")]
    n_cut = sum(cut for _, _, cut in after)
    t.ok(len(after) >= 50 and not wrong,
         f"{len(after)} sleeps inside the poll from the first whole one on ({first_whole} before it), each a blocked "
         f"long poll of deep_sleeper and no park; not: {wrong[:6]}")
    t.ok(n_cut >= 0.4 * len(after), f"{n_cut} of them cut before the poll frame (every other one)")
    placed = [tg.get("stacks", {}).get("cut_placed_in_poll_by_site", 0) for tg in st.get("targets", [])]
    t.ok(placed and max(placed) >= n_cut, f"status counts the cut stacks placed in a poll by their site: {placed}")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
