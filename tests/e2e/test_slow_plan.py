#!/usr/bin/env python3
"""A plan that takes seconds loses nothing recorded meanwhile (issue 18,
goal 6), real BPF, default probe set.

A fresh d9d records a running target at once and holds its records until
the probe plan lands. Under load the plan child, niced below d9d, took 3-6 s
for Deno, and the hold (8 MiB) filled with raw stack copies in about 2 s:
the records after that were dropped (counted, `plan_hold`), and so were the
first seconds' stalls. Stacks are now unwound as they are held.

Here the plan is made slow on purpose: d9d runs under strace, which holds
every execve of d9d's (the plan child is d9d run again) for DELAY seconds
before it returns; strace stops nothing else. The mixed target (one 50 ms
busy poll a second, two workers that park about 900 times a second, each
with an off-CPU stack) is attached mid-run with the default set. Checks:
 - the plan landed after DELAY (the hold lasted that long);
 - while it was pending, status showed the held records and their bytes:
   under 1 KiB a record, where a raw stack copy is 8 KiB and more;
 - no held record was dropped (status, and no plan_hold D9LostEventsEvent);
 - the stalls made while the plan was pending are in the trace: a running
   D9LongPollEvent of at least 40 ms per stall, before the plan's
   D9ProbesEvent, its stack through busy_block_50ms.

Usage: test_slow_plan.py D9D D9CTL TARGET"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import (Tap, dump_json_lines, sealed_files, start_slow_plan_d9d, start_target,  # noqa
                       symbol_names, wait_for)

D9D, D9CTL, TARGET = sys.argv[1:4]
DELAY = 4


def main():
    t = Tap()
    d = start_slow_plan_d9d(t, D9D, D9CTL, DELAY)
    proc = start_target(TARGET, "mixed", "--workers", "2", "--duration", str(DELAY + 5))
    time.sleep(0.5)
    r = d.ctl("attach", "--pid", str(proc.pid), "--json")
    t.ok(r.returncode == 0, "attach --pid with the default set", r.stderr)
    pending = []

    def target():
        st = d.status(proc.pid)
        return st["targets"][0] if st and st.get("targets") else {}

    def plan_state():
        p = target().get("plan", {})
        if p.get("state") == "pending" and p.get("held"):
            pending.append(p)
        return p.get("state") not in (None, "pending")
    wait_for(plan_state, DELAY + 30, step=0.5)
    proc.wait(timeout=60)

    def done():
        st = target()
        return st.get("state") == "done" and st
    st = wait_for(done, 60) or {}
    p = st.get("plan", {})
    t.ok(p.get("state") == "ready" and p.get("landed_ms", 0) >= (DELAY - 0.5) * 1000,
         f"the plan landed {p.get('landed_ms')} ms after recording began", json.dumps(p))
    last = pending[-1] if pending else {}
    per = last.get("held_bytes", 1 << 30) / max(last.get("held", 0), 1)
    t.ok(last.get("held", 0) >= 1000 and per < 1024,
         f"while pending: {last.get('held')} records held in {last.get('held_bytes')} bytes ({per:.0f} a record)",
         json.dumps(pending[-3:]))
    t.ok("held_dropped" not in p, "no held record dropped", json.dumps(p))
    evs, lost = [], {}
    for path in sealed_files(os.path.join(d.tmp, "traces")):
        _, out = dump_json_lines(D9CTL, path)
        for line in out.splitlines():
            if line.startswith(('{"event":"D9ProbesEvent"', '{"event":"D9LongPollEvent"',
                                '{"event":"D9LostEventsEvent"', '{"event":"SymbolTableEntry"')):
                evs.append(json.loads(line))
    for e in evs:
        if e["event"] == "D9LostEventsEvent":
            lost[e["fields"]["source"]] = lost.get(e["fields"]["source"], 0) + e["fields"]["lost"]
    t.ok("plan_hold" not in lost and "stack_unwind" not in lost, f"nothing lost while held: {lost}")
    landed = [e["ts"] for e in evs if e["event"] == "D9ProbesEvent" and e["fields"]["probes"] == "probe plan"]
    syms = symbol_names(evs)
    early = [e["fields"] for e in evs if e["event"] == "D9LongPollEvent" and landed and e["ts"] < landed[0]
             and e["fields"]["how"] == "running" and e["fields"]["min_ns"] >= 40e6]

    def through_busy(f):
        chain = [int(a, 16) if isinstance(a, str) else a for a in f.get("stack") or []]
        return any("busy_block_50ms" in syms.get(a, "") for a in chain)
    busy = [f for f in early if through_busy(f)]
    t.ok(len(early) >= DELAY - 1 and len(busy) == len(early),
         f"{len(early)} stalls of >= 40 ms before the plan landed, {len(busy)} with busy_block_50ms on the stack "
         f"(one a second for {DELAY} s)", json.dumps(early[:2]))
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
