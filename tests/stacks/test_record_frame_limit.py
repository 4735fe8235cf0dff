#!/usr/bin/env python3
"""A stack deeper than the frames d9d unwinds says so, real BPF, every probe.

d9d unwinds 128 user frames of a stack. A recursive-descent parser's stack
is deeper (npm postgrestools: 128 frames of one function, its poll frame
beyond): such a stack ended with no mark and no count, as if its callers
were all there was. The target's `recurse` mode spins 50 ms every 200 ms
200 calls deep. Checks, on the on-CPU samples in the busy loop:
 - there are some, and every one copied whole (no `[stack cut: callers
   beyond the copied stack]`: deep copies once the thread was found cut)
   either ends in `[stack cut: callers beyond 128 frames]` after 100 or
   more of the loop's frames, or is a shallower one that reaches the
   thread's start in fewer frames: a sample on the way down or back up
   (seen once: 21 levels deep, its leaf in the prologue);
 - status counts them in stacks.cut_at_frame_limit.

Usage: test_record_frame_limit.py D9D D9CTL TARGET"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, sample_chains, start_target, target_truth  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def main():
    t = Tap()
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-frames-out-")
    d.start_or_bail(t)
    tgt = start_target(TARGET, "recurse", "--duration", "5")
    r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "3s", "--out", d.out)
    st = ((d.status(tgt.pid) or {}).get("targets") or [{}])[0].get("stacks", {})
    truth = target_truth(tgt)
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths and truth, f"record --probes all of the recurse target ({truth})", r.stderr)
    busy, whole, marked, shallow = 0, 0, 0, 0
    for path in paths:
        _, chains, syms = sample_chains(D9CTL, path, 0)
        for chain in chains:
            names = [syms.get(a, "") for a in chain]
            if not any("recurse_nest" in n for n in names):
                continue
            busy += 1
            if any(n.startswith("[stack cut: callers beyond the copied") for n in names):
                continue
            whole += 1
            nests = sum(1 for n in names if "recurse_nest" in n)
            if names[-1] == "[stack cut: callers beyond 128 frames]":
                marked += nests >= 100
            else:
                shallow += len(names) < 128 and names[-1] in ("clone3", "clone", "start_thread")
    t.ok(busy >= 20 and marked >= 10 and marked + shallow == whole,
         f"{busy} samples in the 200-deep busy loop, {whole} copied whole: {marked} end in the "
         f"frame-limit mark, {shallow} shallower reach the thread's start")
    t.ok(st.get("cut_at_frame_limit", 0) >= marked > 0, f"status counts them: {st.get('cut_at_frame_limit')}",
         str(st))
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
