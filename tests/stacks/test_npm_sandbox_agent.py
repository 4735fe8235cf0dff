#!/usr/bin/env python3
"""End to end on a real Tokio release nobody here built: sandbox-agent from
the npm registry (musl static-pie, frame pointers, Tokio 1.50, an axum
server). Its file-system handlers call musl's fstatat, which has no unwind
info and keeps 0xc8 bytes of stack whose uninitialised locals hold stale
return addresses; Rust calls it through a GOT slot, sometimes by way of
fstat's tail jump. A real d9d records it mid-run with the default set under
two CPU hogs while a loopback client asks for stats, directory listings and
the agents list (a spawn_blocking job), and the trace must show:
 - the stacks through fstatat reach the thread's start (90 % or more): the
   unwinder's step out of fstatat takes the return address its call and
   prologue fit (daemon/record/unwind_step.c), not a stale one (before:
   125 of 142 went on from a wrong frame or ended there);
 - the runtime's two workers, each on one thread, and no other id;
 - a blocking-pool thread's samples, from its first job on, are the
   pool's (254), not "no worker" (255) as before in the default set; a
   job seen in the first milliseconds, while BPF still searches the build
   for the Worker, makes the thread the pool's at BPF's first answer.
Usage: test_npm_sandbox_agent.py D9D D9CTL SANDBOX_AGENT"""
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, free_port, serving, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, AGENT = sys.argv[1:4]
SAMPLE = re.compile(r"^(\d+) CpuSampleEvent worker_id=(\d+) tid=(\d+) .*?callchain=\[(.*)\]", re.M)
SPAN = re.compile(r"D9SegmentSpanEvent first_ts=(\d+)")
CONFIRMED = re.compile(r"Worker lies \d+ bytes below .*?, confirmed (\d+) ms into the search")


def load(port, paths, stop, served):
    """Requests back to back on one keep-alive connection until stop."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    i = 0
    while not stop.is_set():
        try:
            c.request("GET", paths[i % len(paths)])
            c.getresponse().read()
            served[0] += 1
        except (OSError, http.client.HTTPException):
            c.close()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            time.sleep(0.01)
        i += 1
    c.close()


def main():
    t = Tap()
    if not os.access(AGENT, os.X_OK):
        t.bail(f"{AGENT} missing: scripts/bootstrap fetches it")
    tmp = tempfile.mkdtemp(prefix="d9-sandbox-")
    files = os.path.join(tmp, "files")
    os.makedirs(os.path.join(tmp, "home"))
    os.makedirs(files)
    for i in range(40):
        with open(os.path.join(files, f"f{i:02}.md"), "w") as f:
            f.write("x" * (100 * i))
    port = free_port()
    server = subprocess.Popen([AGENT, "-n", "server", "-p", str(port), "--no-telemetry"],
                              env=dict(os.environ, HOME=os.path.join(tmp, "home")),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d, hogs, stop, served = D9d(D9D, D9CTL), [], threading.Event(), [0]
    clients = []
    try:
        up = serving(port)
        t.ok(up, f"sandbox-agent serves on 127.0.0.1:{port}")
        paths = [f"/v1/fs/stat?path={files}/f{i:02}.md" for i in range(0, 40, 7)] + \
                [f"/v1/fs/entries?path={files}", "/v1/agents", "/v1/health"]
        clients = [threading.Thread(target=load, args=(port, paths, stop, served)) for _ in range(4)]
        for c in clients:
            c.start()
        d.start_or_bail(t)
        time.sleep(1)                   # mid-run: the server is busy before the attach
        hogs = start_cpu_hogs(2)
        out = os.path.join(tmp, "out")
        r = d.ctl("record", "--pid", str(server.pid), "--duration", "6s", "--out", out)
        stop_procs(hogs)
        hogs = []
        paths_rec = r.stdout.split()
        t.ok(r.returncode == 0 and paths_rec, f"recorded 6 s mid-run ({served[0]} requests served)", r.stderr)
        comm = {}
        for tid in os.listdir(f"/proc/{server.pid}/task"):
            with open(f"/proc/{server.pid}/task/{tid}/comm") as f:
                comm[int(tid)] = f.read().strip()
        samples, first_ts = [], []
        for p in paths_rec:
            text = subprocess.run([D9CTL, "dump", p], capture_output=True, text=True, timeout=120).stdout
            first_ts += [int(m.group(1)) for m in SPAN.finditer(text)]
            for m in SAMPLE.finditer(text):
                samples.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4).split(", ")))
        samples.sort()

        through = [fr for _, _, _, fr in samples if any(f.startswith("fstatat") for f in fr)]
        whole = [fr for fr in through if fr[-1] == "start"]
        bad = [fr for fr in through if fr[-1] != "start" and not fr[-1].startswith("[stack cut")]
        t.ok(len(through) >= 20 and len(whole) * 10 >= len(through) * 9,
             f"{len(whole)} of {len(through)} stacks through fstatat reach the thread's start",
             "\n".join(", ".join(fr[-8:]) for fr in bad[:3]))

        ids = {}
        for _, w, tid, _ in samples:
            ids.setdefault(w, set()).add(tid)
        workers = {w: tids for w, tids in ids.items() if w < 254}
        t.ok(sorted(workers) == [0, 1] and all(len(v) == 1 and comm.get(next(iter(v))) == "tokio-rt-worker"
                                               for v in workers.values()),
             f"the runtime's two workers, each one tokio-rt-worker thread, no other id: "
             f"{ {w: sorted(v) for w, v in ids.items()} }")

        # From a pool thread's first sample in a job (a task poll right
        # under the pool's loop), every sample of it is the pool's; while
        # BPF still searches the build for the Worker (d9d's log says how
        # long, from about the recording's start), a job is not told from
        # an idle worker in its launch and may read 255.
        confirmed = CONFIRMED.search(d.logtext())
        searched_until = min(first_ts) + (int(confirmed.group(1)) + 50) * 1000000 if confirmed and first_ts else 0
        worker_tids = set().union(*workers.values()) if workers else set()
        job_seen, wrong, pool_tids = set(), [], set()
        for ts, w, tid, fr in samples:
            if tid in worker_tids:
                continue
            in_job = any(a.startswith("tokio::runtime::task::harness::Harness") and
                         b == "tokio::runtime::blocking::pool::Inner::run" for a, b in zip(fr, fr[1:]))
            if in_job:
                job_seen.add(tid)
            if tid in job_seen:
                pool_tids.add(tid)
                if w != 254 and ts > searched_until:
                    wrong.append((tid, w, ts))
        t.ok(pool_tids and not wrong,
             f"{len(pool_tids)} blocking-pool threads ran jobs; their samples from then on are the pool's (254): "
             f"{len(wrong)} are not", str(wrong[:5]))
    finally:
        stop.set()
        for c in clients:
            c.join(15)
        stop_procs(hogs)
        server.kill()
        server.wait()
        d.cleanup(keep=t.failed > 0)
        shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
