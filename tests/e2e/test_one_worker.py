#!/usr/bin/env python3
"""A multi-thread runtime with one worker (worker_threads(1); what Tokio's
default gives in a container with one CPU), stripped, recorded mid-run with
the default set: its worker is named by its Tokio index, read from the
Worker on its stacks, not given an id by thread. Before, the Worker search
needed workers 0 and 1 both: npm postgrestools under taskset -c 1 never
confirmed (247 finds of index 0 at the loop's depth), its worker had an id
by thread, its first second of samples no worker, and the report said no
Worker was on its stacks. Checks, on the `mixed` target (a 50 ms spin and
a 20 ms sleep inside polls every second):
 - the trace's runtime has worker 0 from the stacks, no ids by thread;
 - status says the search found the Worker's depth;
 - one thread is worker 0, and no other worker id appears;
 - its spins are running long polls on worker 0;
 - the report does not say the worker is a thread's.
Usage: test_one_worker.py D9D D9CTL TARGET"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, sealed_files, start_target, target_truth  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def main():
    t = Tap()
    # Alone in a directory and stripped: no debug file, no symbols.
    binary = os.path.join(tempfile.mkdtemp(prefix="d9-one-worker-"), "service")
    shutil.copy(TARGET, binary)
    subprocess.run(["strip", "--strip-all", binary], check=True)
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-one-worker-out-")
    d.start_or_bail(t)
    tgt = start_target(binary, "mixed", "--workers", "1", "--duration", "6")
    subprocess.run(["sleep", "1"])
    r = d.ctl("record", "--pid", str(tgt.pid), "--duration", "4s", "--out", d.out)
    st = json.loads(d.ctl("status", "--all", "--json").stdout or "{}")
    truth = target_truth(tgt)
    t.ok(r.returncode == 0 and truth, "record --pid of the one-worker target, mid-run", r.stderr)
    meta, workers, longs = {}, {}, []
    for ev in dump_events(D9CTL, sealed_files(d.out)):
        f = ev["fields"]
        if ev["event"] == "SegmentMetadataEvent":
            meta = f["entries"]
        elif ev["event"] == "CpuSampleEvent" and f["worker_id"] < 254:
            workers.setdefault(f["worker_id"], set()).add(f["tid"])
        elif ev["event"] == "D9LongPollEvent":
            longs.append(f)
    t.ok(meta.get("runtime.main") == "0" and not meta.get("worker_ids_by_thread"),
         f"worker 0 from the Worker on its stacks: runtime.main {meta.get('runtime.main')!r}, ids by thread "
         f"{meta.get('worker_ids_by_thread')}")
    search = [tg.get("workers", {}).get("search") for tg in st.get("targets", [])]
    t.ok(len(search) == 1 and search[0] and search[0]["state"] == "found",
         f"status: the search found the Worker's depth: {search}")
    t.ok(list(workers) == [0] and len(workers[0]) == 1,
         f"one thread is worker 0, no other worker id: {dict((w, sorted(v)) for w, v in workers.items())}")
    spins = [f for f in longs if f["how"] == "running" and f["min_ns"] >= 25e6]
    t.ok(len(spins) >= 2 and all(f["worker_id"] == 0 for f in spins),
         f"the 50 ms spins are running long polls on worker 0: {[(f['worker_id'], f['min_ns']) for f in spins]}")
    rep = subprocess.run([D9CTL, "report"] + sealed_files(d.out), capture_output=True, text=True, timeout=120)
    t.ok(rep.returncode == 0 and "Workers" in rep.stdout and "not one of Tokio's workers" not in rep.stdout,
         "the report does not call the worker a thread's", rep.stdout[-3000:])
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
