#!/usr/bin/env python3
"""The default probe set attached mid-run to the mixed target with two CPU
hogs on the two cores, for 2 s: its workers park ~1000 times a second, each
park of 1 ms or more gets an off-CPU stack (an 8 KiB copy), ~7 MB/s into the
target's 2 MiB ring. Nothing may be lost: the stacks must wake d9d as they
fill the ring (they are most of its bytes), not leave it to its 250 ms
timer. Checks the session's counters (drops 0) and that the stacks really
flowed: at least 500 (4 MB, twice the ring; the target parks less when the
machine is loaded: 550-2 200 seen), off-CPU samples with stacks in the
trace. With the old wakeup rule this dropped 90 records at ~2 000 stacks.
Usage: test_midrun_ring.py D9D D9CTL TARGET"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines, start_target, wait_for, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def main():
    t = Tap()
    d = D9d(D9D, D9CTL, {"finished_keep": "60s"})
    d.start_or_bail(t)
    hogs = start_cpu_hogs()
    tgt = start_target(TARGET, "mixed", "--duration", "15", stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # mid-run: its workers are parking and polling
        r = d.ctl("attach", "--pid", str(tgt.pid))
        t.ok(r.returncode == 0, "attach without --probes (the default set) to the running target", r.stderr)
        time.sleep(2)
        r = d.ctl("detach", "--pid", str(tgt.pid))
        wait_for(lambda: (d.status(tgt.pid) or {"targets": [{}]})["targets"][0].get("state") == "done", 20)
    finally:
        stop_procs(hogs + [tgt])
    rows = json.loads(d.ctl("list", "--all", "--json").stdout or "[]")
    row = next((x for x in rows if x.get("pid") == tgt.pid), {})
    stacks = row.get("stacks", {})
    t.ok(row.get("drops") == 0, f"no record lost: drops {row.get('drops')} of {row.get('records')} records",
         json.dumps(row))
    segs = [os.path.join(dp, f) for dp, _, fs in os.walk(row.get("dir", "/nonexistent")) for f in fs
            if f.endswith(".bin.zst")]
    off_stacks, lost = 0, 0
    for s in segs:
        _, out = dump_json_lines(D9CTL, s)
        for line in out.splitlines():
            ev = json.loads(line)
            f = ev["fields"]
            if ev["event"] == "CpuSampleEvent" and f["source"] == 1 and len(f["callchain"]) > 1:
                off_stacks += 1
            elif ev["event"] == "D9LostEventsEvent":
                lost += f["lost"]
    t.ok(stacks.get("unwound", 0) >= 500 and off_stacks >= 500,
         f"the stacks flowed: {stacks.get('unwound')} unwound, {off_stacks} off-CPU samples with a stack")
    t.ok(lost == 0, f"the trace counts no lost events ({lost})")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    if t.failed == 0:
        d.cleanup()
    t.done()


main()
