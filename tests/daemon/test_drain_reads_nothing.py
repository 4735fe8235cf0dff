#!/usr/bin/env python3
"""The loop that drains every target's ring reads nothing a target or a
user controls (issue 15: translate a pure function of the record stream).
A read of /proc/PID/maps or /proc/PID/mem waits on the target's mmap lock
(and a read of its memory on a page a userfaultfd never fills), and a read
of a file a user owns can wait on whatever serves it; any of them on that
loop would stall every session.

An unprivileged user runs a Tokio release build from its own copy of the
file (the case where the unwinder once read the file with pread). root
records it with stacks on, while strace follows d9d. Checks:
 - the loop thread (d9d's main thread) opens nothing under /proc and reads
   or preads no /proc file and no file of the target's map while it
   records; it is traced at all (it reads its timers and eventfds);
 - another d9d thread did read the target's map and open the files;
 - the CPU samples' stacks still reach the target's own code (busy_block_50ms
   and the poll), unwound from the map and files handed to the loop.

Usage: test_drain_reads_nothing.py D9D D9CTL TARGET"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap, exec_done, sample_chains  # noqa

NOBODY = 65534
SYSCALLS = "open,openat,openat2,read,pread64,preadv,preadv2,readv,readlink,readlinkat"


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    if not shutil.which("strace"):
        t.bail("no strace: scripts/bootstrap installs it")
    home = tempfile.mkdtemp(prefix="d9-drain-reads-")
    os.chmod(home, 0o755)
    own = os.path.join(home, "app")
    shutil.copy(target, own)
    os.chown(own, NOBODY, NOBODY)
    os.chmod(own, 0o755)
    d = D9d(d9d, d9ctl)
    d.start_or_bail(t)
    app = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", own,
                            "mixed", "--duration", "30", "--workers", "2"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    exec_done(app.pid)
    log = os.path.join(d.tmp, "d9d.strace")
    out = tempfile.mkdtemp(prefix="d9-drain-reads-out-", dir=d.tmp)
    strace = None
    try:
        time.sleep(0.5)
        strace = subprocess.Popen(["strace", "-f", "-y", "-qq", "-o", log, "-e", f"trace={SYSCALLS}",
                                   "-p", str(d.proc.pid)], stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # strace has attached to every thread
        r = d.ctl("record", "--pid", str(app.pid), "--duration", "4s", "--out", out)
    finally:
        if strace:
            strace.terminate()
            strace.wait()
        app.kill()
        app.wait()
    t.ok(r.returncode == 0, f"record --pid of the user's target ({r.stdout.split()[-1:] if r.stdout else ''})",
         r.stderr)
    loop = str(d.proc.pid)
    files = {own, os.path.realpath(own)}
    lines = open(log).read().splitlines()
    by_tid = {}
    for line in lines:
        tid, _, rest = line.partition(" ")
        by_tid.setdefault(tid, []).append(rest.strip())
    loop_lines = by_tid.get(loop, [])
    # Between the attach's answer and the end: the attach request itself
    # reads the asker's and the target's credentials (that is the
    # request, not the drain); it ends when the segment is opened.
    start = next((i for i, l in enumerate(loop_lines) if "trace.0.bin.active" in l), None)
    drain = loop_lines[start + 1:] if start is not None else []
    # glibc's malloc reads /proc/sys/vm/overcommit_memory once per process,
    # the first time it shrinks a heap of a thread arena (the loop thread
    # lands in one when the main arena is busy: a CI run under load). A
    # sysctl, nothing a target or a user controls.
    bad = [l for l in drain
           if (re.search(r'"/proc/|</proc/\d', l) and '"/proc/sys/vm/overcommit_memory"' not in l) or
           any(f in l for f in files) or l.startswith("pread")]
    timers = sum(1 for l in drain if "anon_inode:[timerfd]" in l or "anon_inode:[eventfd]" in l)
    t.ok(start is not None and timers >= 10,
         f"strace followed the loop thread while it recorded ({len(drain)} calls, {timers} timer/eventfd reads)")
    t.ok(not bad, f"the loop read no /proc file and no file of the target's map while recording ({len(bad)})",
         "\n".join(bad[:10]))
    others = [l for tid, ls in by_tid.items() if tid != loop for l in ls]
    maps_read = any(re.search(rf"/proc/{app.pid}/maps|/maps>", l) for l in others)
    opened = any(own in l and l.startswith("openat2") for l in others)
    t.ok(maps_read and opened, f"another d9d thread read the target's map ({maps_read}) and opened its file "
         f"({opened})")
    segs = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs if f.endswith((".bin", ".bin.zst")))
    reached, total = 0, 0
    for p in segs:
        _, chains, syms = sample_chains(d9ctl, p, 0)
        for c in chains:
            names = [syms.get(a, "") for a in c]
            if any("busy_block_50ms" in n for n in names):
                total += 1
                reached += any("raw::poll" in n or "RawTask" in n or "poll" in n.split("::")[-1] for n in names[1:])
    t.ok(total >= 10 and reached >= 0.9 * total,
         f"CPU samples in busy_block_50ms unwind past it to the poll: {reached} of {total}")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if not t.failed:
        shutil.rmtree(home, ignore_errors=True)
    t.done()


main()
