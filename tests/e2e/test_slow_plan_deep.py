#!/usr/bin/env python3
"""A thread whose stacks are deeper than the plain copy gets whole stacks
while the plan is still being built, real BPF, default probe set.

d9d copies 8 KiB of a thread's user stack; a thread whose stack it finds
cut at that copy's end is switched to whole-stack copies (docs/stacks.md,
"Deep stacks"). A fresh d9d's first recording holds its records until the
plan lands (seconds for a big binary under load) and unwinds stacks as it
holds them; but it switched a thread only when a held stack was replayed,
after the plan: every stack of a deep thread taken while the plan was
pending stayed cut (npm ast-grep's first recording: 42 of 258 stacks).

The plan is made slow on purpose as in test_slow_plan.py: strace holds d9d's
execve of its plan child for DELAY seconds. The target's `deeper` mode
spends 50 ms on CPU every 200 ms 84 KiB deep under its task's poll frame
(current-thread flavour: the poll runs under `main`). Checks, on the on-CPU
samples taken in the busy loop before the plan's D9ProbesEvent:
 - there are some (the hold kept them);
 - at least a quarter of them, and 10, reach the poll (`deeper_poller`)
   and `main`: the first held cut stack switched the thread (before: none
   did, each said cut). Not all: the ones before d9d's first drain are
   cut, and so are the ones over the deep copies' byte rate (status
   `cut_by_byte_cap`; a busy 84 KiB deep thread nears it, and at load 6
   half of the samples were cut, 3-13 of 37-54 on a quiet machine).

Usage: test_slow_plan_deep.py D9D D9CTL TARGET"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import Tap, dump_events, sealed_files, start_slow_plan_d9d, start_target, wait_for  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
DELAY = 4


def main():
    t = Tap()
    d = start_slow_plan_d9d(t, D9D, D9CTL, DELAY)
    proc = start_target(TARGET, "deeper", "--flavor", "current-thread", "--duration", str(DELAY + 4))
    time.sleep(0.5)
    r = d.ctl("attach", "--pid", str(proc.pid))
    t.ok(r.returncode == 0, "attach --pid with the default set", r.stderr)

    def target():
        st = d.status(proc.pid)
        return st["targets"][0] if st and st.get("targets") else {}
    proc.wait(timeout=60)
    st = wait_for(lambda: target().get("state") == "done" and target(), 60) or {}
    p = st.get("plan", {})
    t.ok(p.get("state") == "ready" and p.get("landed_ms", 0) >= (DELAY - 0.5) * 1000,
         f"the plan landed {p.get('landed_ms')} ms after recording began", json.dumps(p))
    syms, landed, samples, stalls = {}, None, [], []
    for e in dump_events(D9CTL, sealed_files(os.path.join(d.tmp, "traces"))):
        f = e.get("fields", {})
        if e["event"] == "SymbolTableEntry":
            a = f["addr"]
            syms[int(a, 16) if isinstance(a, str) else a] = f["symbol_name"]
        elif e["event"] == "D9ProbesEvent" and f.get("probes") == "probe plan" and landed is None:
            landed = e["ts"]
        elif e["event"] == "D9LongPollEvent" and f.get("how") == "running" and f.get("min_ns", 0) >= 40e6:
            stalls.append(e["ts"])
        elif e["event"] == "CpuSampleEvent" and f.get("source") == 0:
            samples.append((e["ts"], [int(a, 16) if isinstance(a, str) else a for a in f.get("callchain") or []]))

    def names(chain):
        return [syms.get(a, "") for a in chain]
    busy = [names(c) for ts, c in samples if landed and ts < landed and any("deeper_nest" in n for n in names(c))]
    whole = [c for c in busy if any("deeper_poller" in n for n in c) and any(n.endswith("main") for n in c)]
    cut = [c for c in busy if any(n.startswith("[stack cut") for n in c)]
    t.ok(landed is not None and len(busy) >= 20,
         f"{len(busy)} on-CPU samples in the 84 KiB deep busy loop before the plan landed", f"landed {landed}")
    stacks = st.get("stacks", {})
    t.ok(len(whole) >= max(10, len(busy) / 4),
         f"{len(whole)} of them reach deeper_poller and main, {len(cut)} said cut (a whole stack once the "
         f"first held one was found cut; in the whole recording {stacks.get('cut_by_byte_cap')} cut by the "
         f"deep copies' byte rate)", json.dumps(cut[:1]))
    early = [ts for ts in stalls if landed and ts < landed]
    t.ok(len(early) >= 2 * DELAY,
         f"{len(early)} running long polls of >= 40 ms before the plan landed (the target made one every 200 ms)")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
