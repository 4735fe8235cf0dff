#!/usr/bin/env python3
"""End to end, d9d's own cost in the profile: a real d9d records the real
`mixed` target fully traced (every Tokio probe, CPU samples), and
 - no CPU sample shows the uprobe trap/handler kernel frames themselves
   (asm_exc_int3, uprobe_notify_resume, handle_swbp, ...): they are one
   "[d9d uprobe]" frame (daemon/symbolize/stack_marks.c);
 - the share of CPU samples whose leaf is that frame is printed apart;
 - among the other CPU samples busy_block_50ms (50 ms of CPU per second)
   is one of the top three user functions (the others: the runtime's
   futex syscall, epoll_wait, raw::poll), not hidden under d9d's probe
   path.
Usage: test_record_probe_share.py D9D D9CTL TARGET"""
import collections
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, sample_chains  # noqa

KERNEL_MIN = 0xffff800000000000
PROBE_PATH = ("asm_exc_int3", "exc_int3", "uprobe_notify_resume", "handle_swbp", "handler_chain",
              "uprobe_prog_run", "uprobe_multi_link_handler", "uprobe_handle_trampoline")


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    d = D9d(d9d, d9ctl)
    d.out = tempfile.mkdtemp(prefix="d9-probeshare-out-")
    d.start_or_bail(t)
    r = d.ctl("record", "--duration", "30s", "--out", d.out, "--", target, "mixed", "--duration", "5")
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths, f"record -- CMD sealed {len(paths)} segments", r.stderr)
    samples, in_probe, raw_path, top = 0, 0, [], collections.Counter()
    for p in paths:
        rc, chains, syms = sample_chains(d9ctl, p, 0)
        chains = [[(a, syms.get(a, "")) for a in ch] for ch in chains]
        t.ok(rc == 0, f"{os.path.basename(p)} decodes")
        for ch in chains:
            samples += 1
            names = [n for _, n in ch]
            if any(n.startswith(PROBE_PATH) for n in names):
                raw_path.append(names[:6])
            if ch and names[0] == "[d9d uprobe]":
                in_probe += 1
                continue
            user = [n or hex(a) for a, n in ch if a < KERNEL_MIN and not n.startswith("[")]
            if user:
                top[user[0]] += 1
    print(f"# CPU samples {samples}: {in_probe} ({100.0 * in_probe / max(samples, 1):.1f} %) in d9d's uprobes")
    for name, c in top.most_common(5):
        print(f"#   {c:5d} {name}")
    t.ok(samples >= 30, f"{samples} CPU samples recorded")
    t.ok(not raw_path, f"the uprobe trap/handler frames are one [d9d uprobe] frame ({len(raw_path)} samples show them)",
         raw_path[:5])
    lead = [n for n, _ in top.most_common(3)]
    t.ok(any("busy_block_50ms" in n for n in lead), f"the target's own busy function is in the top three: {lead}")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if t.failed == 0:
        shutil.rmtree(d.out, ignore_errors=True)
    t.done()


main()
