#!/usr/bin/env python3
"""End to end, off-CPU samples of threads that switched out still runnable:
a real d9d records the real `server` target under a loopback load with
every Tokio probe, attached mid-run, on a machine whose two cores the load
client and the server share. The kernel leaves its scheduler functions
out of a sleeping thread's stack, so a cond_resched inside read() showed
as the thread blocking in filemap_read, and the report listed it under
"Blocking inside polls" (npm vaulttools under CPU hogs: 41 of 94 entries).
d9d marks the leaf of such a stack "[runnable: preempted or yielded]"
(daemon/symbolize/stack_marks.h) from the switch's state:
 - every off-CPU stack that shows a preemption (an interrupt's or a
   syscall's return with a reschedule due) carries the mark, and some do;
 - at most 2 % of the off-CPU stacks of a voluntary sleep (futex, epoll,
   nanosleep) do: only a wake that raced the sleep leaves the thread
   runnable at its switch-out (2 of 592 seen);
 - the report's "Blocking inside polls" names no marked stack.
Usage: test_record_runnable_mark.py D9D D9CTL TARGET"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, sample_chains, start_loaded_server, stop_procs  # noqa

MARK = "[runnable: preempted or yielded]"
# A timer or IPI's return, or a syscall's, with a reschedule due.
PREEMPTED = ("asm_sysvec_apic_timer_interrupt", "asm_sysvec_reschedule_ipi", "irqentry_exit_to_user_mode",
             "exit_to_user_mode_loop")
SLEEPS = ("futex_wait", "futex_do_wait", "do_epoll_wait", "ep_poll", "hrtimer_nanosleep", "do_nanosleep")
KERNEL_MIN = 0xffff800000000000


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    d = D9d(d9d, d9ctl)
    out = tempfile.mkdtemp(prefix="d9-runnable-out-")
    procs = []
    try:
        d.start_or_bail(t)
        srv = start_loaded_server(target, procs)
        r = d.ctl("record", "--probes", "all", "--pid", str(srv.pid), "--duration", "6s", "--out", out)
        paths = r.stdout.split()
        t.ok(r.returncode == 0 and paths, f"recorded the loaded server mid-run, every probe ({len(paths)} segments)",
             r.stderr)
        preempted, preempted_marked, sleeps, sleeps_marked, marked = 0, 0, 0, 0, 0
        bad, other = [], collections.Counter()
        for p in paths:
            _, chains, syms = sample_chains(d9ctl, p, 1)
            for ch in chains:
                names = [syms.get(a, "") for a in ch]
                has_mark = bool(names) and names[0] == MARK
                marked += has_mark
                kernel = [n for a, n in zip(ch, names) if a >= KERNEL_MIN]
                if any(n.startswith(PREEMPTED) for n in kernel):
                    preempted += 1
                    preempted_marked += has_mark
                    if not has_mark:
                        bad.append(names[:4])
                elif any(n.startswith(SLEEPS) for n in kernel):
                    sleeps += 1
                    sleeps_marked += has_mark
                    if has_mark:
                        bad.append(names[:4])
                elif has_mark:
                    other[" <- ".join(n or "?" for n in names[1:4])] += 1
        print(f"# other marked stacks: {other.most_common(6)}")
        print(f"# off-CPU stacks: {marked} marked runnable; {preempted} show a preemption ({preempted_marked} "
              f"marked), {sleeps} a voluntary sleep ({sleeps_marked} marked)")
        t.ok(preempted > 0 and preempted_marked == preempted,
             f"every preempted off-CPU stack is marked runnable ({preempted_marked} of {preempted})", bad[:5])
        t.ok(sleeps > 0 and sleeps_marked * 50 <= sleeps,
             f"at most 2 % of voluntary sleeps' stacks are marked runnable, a wake racing the sleep "
             f"({sleeps_marked} of {sleeps})", bad[:5])
        rep = subprocess.run([d9ctl, "report", "--json", *paths], capture_output=True, text=True, timeout=120)
        blocking = json.loads(rep.stdout or "{}").get("blocking_in_polls", [])
        listed = [b for b in blocking if (b.get("stack") or [""])[0] == MARK]
        t.ok(rep.returncode == 0 and not listed,
             f"the report's blocking polls name no runnable stack ({len(blocking)} listed)",
             rep.stderr + json.dumps(listed[:2]))
    finally:
        stop_procs(procs)
        d.cleanup(keep=t.failed > 0)
        if t.failed == 0:
            shutil.rmtree(out, ignore_errors=True)
    t.done()


main()
