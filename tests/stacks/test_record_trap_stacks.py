#!/usr/bin/env python3
"""End to end, CPU samples taken inside d9d's own uprobe traps: a real d9d
records the real `server` target under a loopback load with every Tokio
probe, attached mid-run. A good share of such a target's samples land in
a trap, and there the thread's user pc is one past the int3 while the
probed instruction has not run. Most of this build's probed functions
begin with a one-byte `push`, which the CFI one byte on already counts as
done: unwound from that pc, the walk took the wrong word for the return
address, and 31 of 67 such stacks ended at the probed function itself
(raw::poll, park_timeout, wake_by_val). The unwinder now starts such a
sample at the probe's site (daemon/record/unwind.c, trap_site_pc), and
 - at least 90 % of the samples whose leaf is [d9d uprobe] reach the
   thread's start (clone3), like the target's other samples;
 - status counts the samples unwound from a trap site.
Usage: test_record_trap_stacks.py D9D D9CTL TARGET"""
import collections
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, sample_chains, start_loaded_server, stop_procs  # noqa

THREAD_START = "clone3"


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    d = D9d(d9d, d9ctl)
    out = tempfile.mkdtemp(prefix="d9-trapstacks-out-")
    procs = []
    try:
        d.start_or_bail(t)
        srv = start_loaded_server(target, procs)
        r = d.ctl("record", "--probes", "all", "--pid", str(srv.pid), "--duration", "8s", "--out", out)
        st = d.status(srv.pid)
        paths = r.stdout.split()
        t.ok(r.returncode == 0 and paths, f"recorded the loaded server mid-run, every probe ({len(paths)} segments)",
             r.stderr)
        in_trap, other, ends = 0, 0, collections.Counter()
        whole_other = 0
        for p in paths:
            _, chains, syms = sample_chains(d9ctl, p, 0)
            for ch in chains:
                names = [syms.get(a, hex(a)) for a in ch]
                if names and names[0] == "[d9d uprobe]":
                    in_trap += 1
                    ends[names[-1]] += 1
                elif names:
                    other += 1
                    whole_other += names[-1] == THREAD_START
        whole = ends[THREAD_START]
        print(f"# {in_trap} of {in_trap + other} CPU samples in d9d's uprobes; their last frames: "
              f"{ends.most_common(5)}; other samples reaching {THREAD_START}: {whole_other} of {other}")
        t.ok(in_trap >= 20, f"{in_trap} CPU samples in d9d's uprobe traps")
        t.ok(whole * 10 >= in_trap * 9,
             f"{whole} of {in_trap} stacks of samples in a trap reach the thread's start",
             str(ends.most_common(5)))
        trap_sites = ((st or {}).get("targets") or [{}])[0].get("stacks", {}).get("unwound_from_trap_site", 0)
        t.ok(trap_sites > 0, f"status counts the samples unwound from their probe's site ({trap_sites})")
    finally:
        stop_procs(procs)
        d.cleanup(keep=t.failed > 0)
        if t.failed == 0:
            shutil.rmtree(out, ignore_errors=True)
    t.done()


main()
