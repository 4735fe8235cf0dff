#!/usr/bin/env python3
"""End to end, samples in a page fault on the stack itself: a real d9d
records tests/stacks/stack_fault.c (two threads that give back stack pages
and fault them in again, one with a 7 KiB frame inside the 8 KiB copy,
one with a 24 KiB frame that takes deep copies), attached mid-run with the
default set under two CPU hogs. A sample there has sp in a page not in
memory; BPF's copy stopped at it and the stack ended at the faulting
function without a mark (npm codex-acp: 2-9 stacks per 6 s; this target:
123 of 225). The copy now goes on past such pages (bpf/d9_stack.bpf.h,
d9_hole), so each thread's page-fault samples must reach the thread's
start or end in a mark saying why not, and 90 % or more must reach it.
Usage: test_record_stack_faults.py D9D D9CTL STACK_FAULT"""
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
SAMPLE = re.compile(r'CpuSampleEvent worker_id=\d+ tid=\d+ source=0 thread_name="([^"]*)" callchain=\[(.*)\]')
THREADS = {"fault-plain": "fault_plain_frame", "fault-deep": "fault_deep_frame"}


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="d9-faults-")
    target = subprocess.Popen([TARGET])
    d, hogs = D9d(D9D, D9CTL), []
    try:
        d.start_or_bail(t)
        time.sleep(0.5)                 # mid-run: its pages come and go already
        hogs = start_cpu_hogs(2)
        out = os.path.join(tmp, "out")
        r = d.ctl("record", "--pid", str(target.pid), "--duration", "8s", "--out", out)
        stop_procs(hogs)
        hogs = []
        paths = r.stdout.split()
        t.ok(r.returncode == 0 and paths, "recorded 8 s mid-run under two CPU hogs", r.stderr)
        kinds = {name: collections.Counter() for name in THREADS}
        bad = []
        for p in paths:
            text = subprocess.run([D9CTL, "dump", p], capture_output=True, text=True, timeout=120).stdout
            for m in SAMPLE.finditer(text):
                name, frames = m.group(1), m.group(2).split(", ")
                if name not in THREADS or "asm_exc_page_fault" not in frames:
                    continue
                user = frames[frames.index("asm_exc_page_fault") + 1:]
                if not user or user[0] != THREADS[name]:
                    continue            # a fault elsewhere (the madvise call's own)
                if user[-1] == "clone3" and "start_thread" in user:
                    kinds[name]["whole"] += 1
                elif user[-1].startswith("["):
                    kinds[name][user[-1]] += 1
                else:
                    kinds[name]["unmarked"] += 1
                    bad.append(f"{name}: ... {', '.join(user[-4:])}")
        for name, k in kinds.items():
            n = sum(k.values())
            print(f"# {name}: {n} page-fault samples: {dict(k)}")
            t.ok(n >= 10 and k["unmarked"] == 0 and k["whole"] * 10 >= n * 9,
                 f"{name}: {k['whole']} of {n} samples in a page fault on the stack reach the thread's start, "
                 f"{k['unmarked']} end early without a mark", "\n".join(bad[:5]))
    finally:
        stop_procs(hogs)
        target.kill()
        target.wait()
        d.cleanup(keep=t.failed > 0)
        shutil.rmtree(tmp, ignore_errors=True)
    t.done()


if __name__ == "__main__":
    main()
