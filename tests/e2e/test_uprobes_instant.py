#!/usr/bin/env python3
"""With the plan at hand (here cached by a first recording), the full set's
uprobes join a recording at one instant the trace names, and nothing
before that instant passes for a poll.

npm aptove bridge (stripped, Tokio 1.50), recorded again with its plan
cached: the uprobes recorded as each was attached, up to a second after the
ring began, and no event said when. A CPU sample inside a poll from before
its probe was live then passed for a poll running "since the attach", from
the oldest record on: 21-226 ms polls on workers that were parked, the
report's longest (3 of 6 recordings). npm codex: the first segment's polls
were up to 40 ms older than its span's start.

The server target, stripped, under an open-loop load and 2 CPU hogs is
recorded once to cache its plan, then 3 times more, 2 s each, all with
--probes all. In each of the later 3:
 - a D9ProbesEvent "uprobes: ..." says they joined, attached;
 - no poll, spawn, terminate, wake or park event is older than it, and the
   first segment's span starts no later than any of them;
 - every "at attach" long poll starts at or after it.
Usage: test_uprobes_instant.py D9D D9CTL TARGET"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, sealed_files, start_cpu_hogs, start_target, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
# Parks may be older: a worker asleep since before the uprobes is parked
# from its switch-out on, as the scheduler saw it.
UPROBE_EVENTS = ("PollStartEvent", "PollEndEvent", "TaskSpawnEvent", "TaskTerminateEvent", "WakeEventEvent",
                 "D9BlockingPollEvent")
PARK_EVENTS = ("WorkerParkEvent", "WorkerUnparkEvent")
RECORDINGS = 3


def check(t, n, out):
    segs = sealed_files(out)
    first = segs[:1]
    joined, span, older, parks, at_attach = None, None, [], [], []
    for ev in dump_events(D9CTL, segs):
        f = ev["fields"]
        if ev["event"] == "D9ProbesEvent" and f["probes"].startswith("uprobes:") and f["attached"]:
            joined = joined or ev["ts"]
        elif ev["event"] == "D9LongPollEvent" and f["how"] == "at attach":
            at_attach.append((ev["ts"] - f["min_ns"], f["min_ns"], f["tid"]))
        elif ev["event"] in UPROBE_EVENTS:
            older.append((ev["ts"], ev["event"]))
        elif ev["event"] in PARK_EVENTS:
            parks.append((ev["ts"], ev["event"]))
    for ev in dump_events(D9CTL, first):
        if ev["event"] == "D9SegmentSpanEvent":
            span = ev["fields"]["first_ts"]
            break
    oldest = min(older + parks, default=(None, None))
    before = [e for e in older if joined is None or e[0] < joined]
    early = [a for a in at_attach if joined is None or a[0] < joined]
    print(f"# recording {n}: uprobes joined at {joined}, span from {span}, oldest uprobe event {oldest}, "
          f"at-attach polls (start, min_ns, tid) {at_attach}")
    t.ok(joined is not None, f"recording {n}: a D9ProbesEvent says when the uprobes joined")
    t.ok(older and not before and span is not None and span <= oldest[0],
         f"recording {n}: of {len(older)} poll, spawn and wake events none is older than that instant "
         f"({len(before)} are), nor any of them or of {len(parks)} parks older than the first segment's span "
         f"(oldest {oldest}, span from {span})", str(before[:5]))
    t.ok(not early, f"recording {n}: every one of {len(at_attach)} 'at attach' long polls starts at or after it",
         str(early))


def main():
    t = Tap()
    # Stripped, with no debug file beside it: a plan naming one is not
    # cached (uprobes/plan_cache.c).
    binary = os.path.join(tempfile.mkdtemp(prefix="d9-uprobes-instant-bin-"), "service")
    shutil.copy(TARGET, binary)
    subprocess.run(["strip", "--strip-all", binary], check=True)
    d = D9d(D9D, D9CTL).start_or_bail(t)
    srv = start_target(binary, "server", "--listen", "127.0.0.1:0", "--work-us", "40", "--duration", "60")
    addr = srv.stdout.readline().split()[1]
    load = subprocess.Popen([binary, "load", "--connect", addr, "--conns", "4", "--rate", "2000",
                             "--duration", "55"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hogs = start_cpu_hogs()
    outs = [tempfile.mkdtemp(prefix="d9-uprobes-instant-") for _ in range(RECORDINGS + 1)]
    try:
        runs = [d.ctl("record", "--pid", str(srv.pid), "--duration", "2s", "--probes", "all", "--out", o)
                for o in outs]
    finally:
        stop_procs(hogs + [load, srv])
    t.ok(all(r.returncode == 0 for r in runs), "recorded the loaded server 4 times with --probes all",
         "\n".join(r.stderr for r in runs))
    # "attached, N uprobes": the plan was at hand (session.c); a late one logs
    # "its probe plan being built".
    at_hand = len(re.findall(rf"pid {srv.pid} \([^)]*\): attached, \d+ uprobes", d.logtext()))
    t.ok(at_hand >= RECORDINGS, f"the later {RECORDINGS} recordings attached with the plan cached ({at_hand})",
         d.logtext()[-3000:])
    for n, out in enumerate(outs[1:], 2):
        check(t, n, out)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
