#!/usr/bin/env python3
"""Three runtimes in one process (tests/targets runtimes mode: the
caller's multi-thread runtime with 2 workers, a second with 3, a
current-thread one on a thread of its own; every thread named
tokio-rt-worker), attached mid-run while two CPU hogs compete for both
cores. The segment metadata lists one runtime.<name> per runtime with its
own worker ids (runtime.main first), and the threads behind each entry's
ids (from the CPU samples) are the threads that runtime's tasks ran on,
as the target itself saw them. Run on the stripped build (parks from
sched_switch, a worker is its thread) and the symbolized one (park probes:
a worker is the core its park key names).
Usage: test_runtimes.py D9D D9CTL TARGET"""
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines, start_target, target_truth, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="d9-runtimes-")
    binary = os.path.join(tmp, "service")  # alone: a stripped one has no debug file, as shipped
    shutil.copy(TARGET, binary)
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-runtimes-out-")
    d.start_or_bail(t)
    hogs = start_cpu_hogs()
    try:
        tgt = start_target(binary, "runtimes", "--thread-name", "tokio-rt-worker", "--workers", "2",
                           "--duration", "10")
        time.sleep(1.5)
        r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "6s", "--out", d.out)
        truth = target_truth(tgt)
    finally:
        stop_procs(hogs)
    t.ok(r.returncode == 0 and truth, "record --pid of the 3-runtime target under 2 CPU hogs", r.stderr)
    if not truth:
        t.done()
    meta, tid_of = {}, {}
    polls = {}
    for p in r.stdout.split():
        rc, out = dump_json_lines(D9CTL, p)
        for line in out.splitlines():
            if not line.startswith("{"):
                continue
            ev = json.loads(line)
            name, f = ev.get("event"), ev.get("fields", {})
            if name == "SegmentMetadataEvent":
                meta = {k: v for k, v in (f.get("entries") or {}).items() if k.startswith("runtime.")}
            elif name == "CpuSampleEvent" and f["worker_id"] < 254:
                tid_of.setdefault(f["worker_id"], set()).add(f["tid"])
            elif name == "PollStartEvent":
                polls[f["worker_id"]] = polls.get(f["worker_id"], 0) + 1
    ids = {k: [int(x) for x in v.split(",") if x] for k, v in meta.items()}
    t.ok(list(meta)[:1] == ["runtime.main"] and len(meta) == 3 and
         sorted(len(v) for v in ids.values()) == [1, 2, 3],
         f"3 runtime.<name> entries with 1, 2 and 3 workers: {meta}", meta)
    flat = [w for v in ids.values() for w in v]
    t.ok(len(flat) == len(set(flat)) and set(polls) <= set(flat),
         f"worker ids disjoint across runtimes and every poll on a listed worker ({sorted(polls)})")
    truth_tids = {rt["name"]: set(rt["tids"]) for rt in truth["runtimes"]}
    matched, why = {}, []
    for key, workers in ids.items():
        tids = set().union(*(tid_of.get(w, set()) for w in workers))
        owners = [n for n, s in truth_tids.items() if tids and tids <= s]
        if len(owners) != 1:
            why.append((key, workers, sorted(tids), owners))
        else:
            matched[key] = owners[0]
    t.ok(not why and len(set(matched.values())) == 3,
         f"each entry's workers are the threads of one runtime, each runtime once: {matched}",
         (why, truth_tids))
    sizes = {rt["name"]: rt["workers"] for rt in truth["runtimes"]}
    t.ok(matched and all(len(ids[k]) == sizes[n] for k, n in matched.items()),
         f"each entry lists as many workers as its runtime has ({ {k: len(v) for k, v in ids.items()} })", sizes)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if t.failed == 0:
        shutil.rmtree(d.out, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
