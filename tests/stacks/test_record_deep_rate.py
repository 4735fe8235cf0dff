#!/usr/bin/env python3
"""Stacks the deep copies' byte rate cut are said so, in the trace and the
report. A thread whose stack was cut at the plain 8 KiB copy gets whole
copies while the per-target byte bucket (stack_deep_rate) has room; one the
bucket refuses is cut as before, but a larger rate would have copied it
whole, and only status said how many (npm steady, default set: 852 of 861
cut stacks; the report blamed them all on the copy's length). Now such a
stack ends in "[stack cut: callers beyond the copied stack, deep copies'
byte rate used up]" and the report's "Not in the trace" line says how many.

The target's `deeper` mode (50 ms on CPU every 200 ms, 84 KiB deep under
its poll) recorded with the default set at stack_deep_rate 64K: most deep
copies are refused. Checks: some samples end in the rate's mark; the
report's stacks_cut_by_byte_rate equals them and its text says it; status
counts at least as many in cut_by_byte_cap (it counts run ticks' stacks
too); and the plain cut mark still marks the rest of the cut stacks.
Usage: test_record_deep_rate.py D9D D9CTL TARGET"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, outer_frame_names, report_missing, start_target, stop_procs  # noqa

RATE = "[stack cut: callers beyond the copied stack, deep copies' byte rate used up]"
CUT = "[stack cut: callers beyond the copied stack]"


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    d = D9d(d9d, d9ctl, conf="stack_deep_rate = 64K\n")
    out = tempfile.mkdtemp(prefix="d9-deep-rate-out-")
    procs = []
    try:
        d.start_or_bail(t)
        procs.append(start_target(target, "deeper", "--flavor", "current-thread", "--duration", "8"))
        pid = procs[0].pid
        r = d.ctl("record", "--pid", str(pid), "--duration", "5s", "--out", out)
        paths = r.stdout.split()
        t.ok(r.returncode == 0 and paths, f"recorded the deep target with the default set ({len(paths)} segments)",
             r.stderr)
        outer = outer_frame_names(d9ctl, paths)
        rate, cut = outer[RATE], outer[CUT]
        st = d.status(pid) or {}
        tg = st["targets"][0] if st.get("targets") else {}
        by_cap = tg.get("stacks", {}).get("cut_by_byte_cap", -1)
        t.ok(rate > 0 and by_cap >= rate, f"{rate} samples end in the rate's mark ({cut} in the plain cut mark); "
             f"status cut_by_byte_cap {by_cap}", json.dumps(tg.get("stacks")))
        missing, line = report_missing(d9ctl, paths)
        t.ok(missing.get("stacks_cut_by_byte_rate") == rate and missing.get("stacks_cut", 0) >= rate + cut > 0 and
             f"{rate} of them because the deep copies' byte rate" in line,
             f"the report counts them ({missing.get('stacks_cut_by_byte_rate')} of {missing.get('stacks_cut')} "
             f"cut) and says so", line)
        t.ok(d.stop() == 0, "d9d stops cleanly")
    finally:
        stop_procs(procs)
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
