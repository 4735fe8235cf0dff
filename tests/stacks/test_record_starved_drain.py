#!/usr/bin/env python3
"""A d9d starved of CPU loses stack depth, not records. While d9d does not
drain (a loaded machine: npm sideseat saw 552 ms between drains), a thread
whose stacks get deep copies of ~90 KiB filled the 2 MiB ring in a fraction
of a second and every record after them was lost (default set, 3 stalls of
0.4 s: 94-119 records lost a recording; of 0.6 s, 212-316). Now a deep copy
that would leave the ring over half full is the plain 8 KiB copy instead,
ending in
"[stack cut: callers beyond the copied stack, the ring over half full]".

The target's `deeper` mode (50 ms on CPU every 200 ms, 84 KiB deep under
its poll), recorded with the default set while d9d is stopped (SIGSTOP)
three times for 0.4 s. Checks: no record lost (status and report); some
samples end in the ring's mark, the report counts exactly those and says
so, status counts at least as many (it counts run ticks' stacks too).
Usage: test_record_starved_drain.py D9D D9CTL TARGET"""
import json
import os
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, outer_frame_names, report_missing, start_target, stop_procs  # noqa

ROOM = "[stack cut: callers beyond the copied stack, the ring over half full]"


def starve(pid, start_s, stalls, stall_s):
    """SIGSTOP pid stall_s at a time, stalls times, stall_s apart."""
    time.sleep(start_s)
    for _ in range(stalls):
        os.kill(pid, signal.SIGSTOP)
        time.sleep(stall_s)
        os.kill(pid, signal.SIGCONT)
        time.sleep(stall_s)


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    d = D9d(d9d, d9ctl)
    out = tempfile.mkdtemp(prefix="d9-starved-out-")
    procs = []
    try:
        d.start_or_bail(t)
        procs.append(start_target(target, "deeper", "--flavor", "multi-thread", "--workers", "2",
                                  "--duration", "12"))
        pid = procs[0].pid
        time.sleep(1)
        stalls = threading.Thread(target=starve, args=(d.proc.pid, 2.0, 3, 0.4))
        stalls.start()
        r = d.ctl("record", "--pid", str(pid), "--duration", "6s", "--out", out)
        stalls.join()
        paths = r.stdout.split()
        t.ok(r.returncode == 0 and paths, f"recorded the deep target with d9d stopped 3 x 0.4 s ({len(paths)} segments)",
             r.stderr)
        room = outer_frame_names(d9ctl, paths)[ROOM]
        st = d.status(pid) or {}
        tg = st["targets"][0] if st.get("targets") else {}
        missing, line = report_missing(d9ctl, paths)
        t.ok(tg.get("drops", -1) == 0 and missing.get("lost_events", -1) == 0,
             f"no record lost (status drops {tg.get('drops')}, report lost_events {missing.get('lost_events')})")
        print(f"# ring: {json.dumps(tg.get('ring'))}")
        by_room = tg.get("stacks", {}).get("cut_for_ring_room", -1)
        t.ok(room > 0 and by_room >= room, f"{room} samples end in the ring's mark; status cut_for_ring_room {by_room}",
             json.dumps(tg.get("stacks")))
        t.ok(missing.get("stacks_cut_for_ring_room") == room and
             f"{room} of them because a deep copy would have filled the ring past half" in line,
             f"the report counts them ({missing.get('stacks_cut_for_ring_room')}) and says so", line)
        t.ok(d.stop() == 0, "d9d stops cleanly")
    finally:
        stop_procs(procs)
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
