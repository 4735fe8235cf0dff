#!/usr/bin/env python3
"""d9d with no target left costs the machine nothing again. Its
system-wide BPF programs (sched_switch, process exit/exec, sched_exit_tp,
the per-CPU 99 Hz sampler) run on every context switch and every CPU of
the machine; they were attached with the first target and stayed attached
for d9d's whole life, through every detach. Now they go with the last
target: at its detach, or, for a session that stopped by itself (`record
--duration`), when the main loop reaps its background teardown.

Checks, on a real d9d and a real Tokio target (links from d9d's fdinfo,
program names from bpftool):
 - before any attach d9d holds none of those links, and status says so
   (daemon.bpf_system_wide_attached);
 - an attached default-set target has them: the switch, exit and
   exec tracepoints and one CPU-clock sampler per online CPU;
 - after its detach they are gone within a few seconds;
 - after a `record --duration` ends they go too, with nothing asking
   status (the main loop's tick reaps the teardown);
 - attaching again puts them back and the recording has parks (from
   sched_switch) and CPU samples: a re-arm records as the first arm did.
Not parallel: it reads every d9 link of its d9d's pid.

Usage: test_idle_after_detach.py D9D D9CTL TARGET"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap, bpf_links_of, bpf_prog_names, dump_summary, start_target, wait_for  # noqa: E402

SYSTEM_WIDE = {"d9_sched_switch", "d9_proc_exit", "d9_proc_exec", "d9_cpu_sample"}
GONE_WITHIN_S = 5   # a detach is immediate; a stopped session is reaped by a 250 ms tick


def system_wide_links(pid):
    """{program name: links} of pid's BPF links running a system-wide program."""
    names = bpf_prog_names()
    found = {}
    for _, prog in bpf_links_of(pid):
        name = names.get(prog, "")
        if name in SYSTEM_WIDE:
            found[name] = found.get(name, 0) + 1
    return found


def armed(d):
    st = d.status()
    return (st or {}).get("daemon", {}).get("bpf_system_wide_attached")


def online_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def check_attached(t, d, what):
    links = system_wide_links(d.proc.pid)
    full = all(links.get(n) for n in SYSTEM_WIDE - {"d9_cpu_sample"})
    t.ok(full and links.get("d9_cpu_sample", 0) >= online_cpus() and armed(d) is True,
         f"{what}: the system-wide programs are attached ({links}; "
         f"status bpf_system_wide_attached={armed(d)})")


def check_gone(t, d, what, ask_status=True):
    """Within GONE_WITHIN_S, by d9d's fds alone (status reaps teardowns
    itself, so it is asked only after)."""
    left = wait_for(lambda: not system_wide_links(d.proc.pid), GONE_WITHIN_S, step=0.1)
    links = system_wide_links(d.proc.pid)
    t.ok(left and not links, f"{what}: no system-wide program of d9d is attached within {GONE_WITHIN_S} s ({links})")
    if ask_status:
        t.ok(armed(d) is False, f"{what}: status says bpf_system_wide_attached=false ({armed(d)})")


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    d = D9d(d9d, d9ctl)
    d.start_or_bail(t)
    tgt = start_target(target, "mixed", "--duration", "60")
    try:
        time.sleep(0.5)
        links = system_wide_links(d.proc.pid)
        t.ok(not links and armed(d) is False,
             f"a started d9d with no target has no system-wide program attached ({links}, {armed(d)})")

        r = d.ctl("attach", "--pid", str(tgt.pid))
        t.ok(r.returncode == 0, "the mixed target attaches with the default set", r.stdout + r.stderr)
        check_attached(t, d, "attached")
        time.sleep(0.5)
        r = d.ctl("detach", "--pid", str(tgt.pid))
        t.ok(r.returncode == 0, "detach succeeds", r.stderr)
        check_gone(t, d, "after the detach")

        # A session that ends by itself: its links go on a teardown thread,
        # and nothing but the main loop's tick reaps it here.
        rec = subprocess.Popen([d9ctl, "--socket", d.sock, "record", "--pid", str(tgt.pid), "--duration", "2s"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = wait_for(lambda: system_wide_links(d.proc.pid).get("d9_sched_switch"), 10, step=0.1)
        t.ok(seen, "record --duration attaches the system-wide programs again")
        out, err = rec.communicate(timeout=120)
        t.ok(rec.returncode == 0 and out.strip(), "record --duration 2s ends and prints its segments", err[-800:])
        check_gone(t, d, "after record --duration ended", ask_status=False)
        # Its recording, made on a re-arm, has what the sched programs give.
        parks = samples = 0
        ok = bool(out.split())
        for path in out.split():
            seg_ok, counts, text = dump_summary(d9ctl, path)
            ok = ok and seg_ok
            parks += counts.get("WorkerParkEvent", 0)
            samples += counts.get("CpuSampleEvent", 0)
        t.ok(ok and parks > 0 and samples > 0,
             f"the re-armed recording decodes and has parks ({parks}) and CPU samples ({samples})")
        t.ok(armed(d) is False, f"and status says bpf_system_wide_attached=false ({armed(d)})")
    finally:
        tgt.kill()
        tgt.wait()
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
