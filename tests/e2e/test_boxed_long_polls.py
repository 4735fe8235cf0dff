#!/usr/bin/env python3
"""The default set names a boxed future's long polls. A task spawned as
`Pin<Box<dyn Future>>` is polled by the box's poll instance, whose label
says only the box; with poll uprobes BPF reads the concrete future's poll
fn from the box's vtable, and the default set has no uprobe. So its long
polls said "unknown future" (npm ace-tool-rs, stripped: 12 of 12, where
the full set named each future by address). Now d9d names a long poll of
such an instance by the function its poll frame called on the stack.

The target's `boxed` mode: two boxed tasks of different future types, each
spinning 5 ms in its poll every 200 ms. Recorded mid-run with the default
set and then with the full set (`--probes all`), the same process.
Checks: the default set's long polls in the spins all carry a label, at
least two different ones; each is a label the full set gives that
future's polls (the same name, or on the stripped build, copied away from
its debug file, the same address); with symbols the label names the
future's own code (`boxed::`).
Usage: test_boxed_long_polls.py D9D D9CTL TARGET"""
import collections
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, start_target, stop_procs  # noqa

def events(d9ctl, paths, kind):
    return [e for e in dump_events(d9ctl, paths) if e.get("event") == kind]


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    stripped = "stripped" in os.path.basename(target)
    if stripped:
        # Away from its debug file (found next to it by .gnu_debuglink): no
        # symbol names anything, as in a shipped stripped binary.
        alone = tempfile.mkdtemp(prefix="d9-boxed-bin-")
        shutil.copy2(target, alone)
        target = os.path.join(alone, os.path.basename(target))
    t = Tap()
    d = D9d(d9d, d9ctl)
    out = tempfile.mkdtemp(prefix="d9-boxed-out-")
    procs = []
    try:
        d.start_or_bail(t)
        procs.append(start_target(target, "boxed", "--duration", "20"))
        pid = str(procs[0].pid)
        time.sleep(1)
        got = {}
        for probes in ("default", "all"):
            args = ["record", "--pid", pid, "--duration", "4s", "--out", os.path.join(out, probes)]
            if probes == "all":
                args[1:1] = ["--probes", "all"]
            r = d.ctl(*args)
            got[probes] = r.stdout.split()
            t.ok(r.returncode == 0 and got[probes], f"recorded the boxed tasks, {probes} set", r.stderr)
        lps = events(d9ctl, got["default"], "D9LongPollEvent")
        # The spins are the target's only polls of a millisecond or more.
        spins = [e for e in lps if e["fields"].get("how") == "running"]
        labels = collections.Counter(e["fields"].get("spawn_loc", "") for e in spins)
        print(f"# default set: {len(lps)} long polls, {len(spins)} in the spins, labels {dict(labels)}")
        t.ok(len(spins) >= 6 and "" not in labels and len(labels) >= 2,
             f"every long poll in the spins is labelled ({labels.get('', 0)} of {len(spins)} not), "
             f"{len(labels)} labels")
        polls = events(d9ctl, got["all"], "PollStartEvent")
        full = collections.Counter(e["fields"].get("spawn_loc", "") for e in polls)
        print(f"# full set: {len(polls)} polls, labels {dict(full.most_common(8))}")
        t.ok(labels and all(full.get(lb, 0) > 0 for lb in labels),
             f"each is a label the full set gives the future's polls ({sum(1 for lb in labels if full.get(lb))} "
             f"of {len(labels)})")
        if not stripped:
            t.ok(labels and all("boxed::" in lb for lb in labels), "with symbols, each names the future's code")
        t.ok(d.stop() == 0, "d9d stops cleanly")
    finally:
        stop_procs(procs)
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
