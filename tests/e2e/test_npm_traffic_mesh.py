#!/usr/bin/env python3
"""Netlify's traffic-mesh proxy (npm @netlify/traffic-mesh-agent-linux-x64
0.27.10: glibc PIE, legacy symbols, Tokio 1.0.2) forwarding a loopback
client's requests to a local backend, recorded mid-run with the default
set under two CPU hogs. Its Tokio tasks run on actix's current-thread
runtimes (two actix-rt:worker threads), and one tokio-runtime-w thread
runs a spawn_blocking job that waits on a channel for good. Tokio 1.0's
raw::poll reaches the future's poll through AssertUnwindSafe::call_once,
and legacy symbols do not name the future in raw::poll's own name: the
planner labelled those polls by address, did not see BlockingTask's, and
the default set took the job's thread for a third worker, with a 50 ms
"blocked" long poll every 50 ms (125 in 8 s). The planner now looks
through the runtime's wrappers (uprobes/plan_points.c). Checks:
 - the plan labels polls of BlockingTask as the blocking pool's, and no
   poll by a compiler helper (`__rust_probestack`: 63 before);
 - worker ids are only 0 and 1, each on one actix-rt:worker thread;
 - the job's thread (tokio-runtime-w) is never a worker: its samples are
   the pool's (254) or no worker's, and no long poll names it a worker;
 - the proxy answered the client during the recording (the workload is
   real).
Usage: test_npm_traffic_mesh.py D9D D9CTL TRAFFIC_MESH"""
import asyncio
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, exec_done, free_port, serving, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, BINARY = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
POOL = 254
BODY = b'{"ok":true}'
REPLY = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY


def backend(port, ready):
    """A keep-alive HTTP backend the proxy forwards to."""
    async def handle(r, w):
        try:
            while True:
                await r.readuntil(b"\r\n\r\n")
                w.write(REPLY)
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            w.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def client(port, stop, served):
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/x", headers={"Host": "localhost"})
            conn.getresponse().read()
            served[0] += 1
        except (OSError, http.client.HTTPException):
            conn = None
            time.sleep(0.05)


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="d9-mesh-")
    site = os.path.join(tmp, "site")
    os.makedirs(site)
    with open(os.path.join(site, "_redirects"), "w") as f:
        f.write("/api/*  /backend/:splat  200\n")
    plan = subprocess.run([D9CTL, "plan", "--exe", BINARY, "--json"], capture_output=True, text=True, timeout=120)
    points = [p for p in json.loads(plan.stdout or "{}").get("points", []) if p["kind"] == "poll"]
    blocking = [p for p in points if "BlockingTask" in (p["label"] or "")]
    helper = [p for p in points if (p["label"] or "").startswith("__")]
    t.ok(blocking and not helper,
         f"the plan names {len(blocking)} of {len(points)} polls BlockingTask's, none by a compiler helper "
         f"({len(helper)})", plan.stderr)

    d = D9d(D9D, D9CTL)
    stop, served, procs, hogs = threading.Event(), [0], [], []
    back_port, port = free_port(), free_port()
    try:
        ready = threading.Event()
        threading.Thread(target=backend, args=(back_port, ready), daemon=True).start()
        ready.wait(10)
        mesh = subprocess.Popen([BINARY, "start", "local", "-p", str(port), "-f", f"http://127.0.0.1:{back_port}",
                                 "-w", site, "-b", "/bin/true"], cwd=tmp, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        procs.append(mesh)
        exec_done(mesh.pid)
        up = serving(port)
        t.ok(up, f"traffic-mesh serves on 127.0.0.1:{port}")
        clients = [threading.Thread(target=client, args=(port, stop, served)) for _ in range(4)]
        for c in clients:
            c.start()
        d.start_or_bail(t)
        time.sleep(1)                   # mid-run
        hogs = start_cpu_hogs(2)
        before = served[0]
        out = os.path.join(tmp, "out")
        r = d.ctl("record", "--pid", str(mesh.pid), "--duration", "8s", "--out", out)
        during = served[0] - before
        stop_procs(hogs)
        hogs = []
        paths = r.stdout.split()
        t.ok(r.returncode == 0 and paths and during > 0,
             f"recorded 8 s mid-run with the default set ({during} requests answered meanwhile)", r.stderr)
        comm = {}
        for tid in os.listdir(f"/proc/{mesh.pid}/task"):
            with open(f"/proc/{mesh.pid}/task/{tid}/comm") as f:
                comm[int(tid)] = f.read().strip()
        ids, long_polls = {}, []
        for ev in dump_events(D9CTL, paths):
            f = ev.get("fields", {})
            if ev["event"] == "CpuSampleEvent":
                ids.setdefault(f["worker_id"], set()).add(f["tid"])
            elif ev["event"] == "D9LongPollEvent":
                long_polls.append((f["worker_id"], f["tid"]))
        workers = {w: tids for w, tids in ids.items() if w < POOL}
        t.ok(sorted(workers) == [0, 1] and
             all(len(v) == 1 and comm.get(next(iter(v))) == "actix-rt:worker" for v in workers.values()),
             f"worker ids 0 and 1, each one actix-rt:worker thread: "
             f"{ {w: sorted((tid, comm.get(tid)) for tid in v) for w, v in ids.items()} }")
        job = {tid for tid, name in comm.items() if name == "tokio-runtime-w"}
        as_worker = [w for w, tids in workers.items() if tids & job]
        job_polls = [(w, tid) for w, tid in long_polls if tid in job and w < POOL]
        t.ok(job and not as_worker and not job_polls,
             f"the job's thread {sorted(job)} is no worker: named one in {as_worker}, "
             f"{len(job_polls)} long polls on it as a worker's")
    finally:
        stop.set()
        stop_procs(hogs + procs)
        d.cleanup(keep=t.failed > 0)
        if t.failed == 0:
            shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
