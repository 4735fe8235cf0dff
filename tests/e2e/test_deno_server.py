#!/usr/bin/env python3
"""A Tokio release nobody here built: Deno from the npm registry (stripped
glibc PIE, Tokio 1.47). Its JavaScript runs on a current-thread runtime on
the main thread; its `tokio-runtime-w` threads are only the blocking pool
(file reads). A Deno.serve HTTP server on loopback stalls its JS thread for
30 ms every STALL_EVERY requests; it is attached mid-run, under load and
with two CPU hogs on the cores, and the report must say what happened:
 - one worker (runtime.main "0"), the main thread, and no blocking-pool
   thread counted as a worker; the file reads are blocking-pool jobs;
 - the stalls are polls of 30 ms or more on that worker, as many as the
   server counted in the window (a poll may hold two stalls), with a CPU
   stack that goes through the JIT's code, named from V8's perf map, to the
   clock call the busy loop makes;
 - the worker has parked time (from sched_switch: the build has no park
   symbol) and every event lost is counted.
Usage: test_deno_server.py D9D D9CTL DENO"""
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
from d9harness import D9d, Tap  # noqa

D9D, D9CTL, DENO = sys.argv[1:4]
STALL_EVERY = 100
SERVER_JS = """
let n = 0, stalls = 0, at = [];
Deno.serve({ port: 0, hostname: "127.0.0.1",
             onListen(a) { console.log(JSON.stringify({ port: a.port })); } }, async (req) => {
  if (new URL(req.url).pathname === "/stats") return new Response(JSON.stringify({ requests: n, stalls, at }));
  n++;
  if (n % %d === 0) { stalls++; const t = Date.now(); at.push(t); while (Date.now() - t < 30) {} }
  if (n % 20 === 0) await Deno.readTextFile("/etc/hostname");
  return new Response("ok");
});
""".replace("%d", str(STALL_EVERY))


def stats(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/stats")
    return json.loads(c.getresponse().read())


def load(port, stop, counts):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        c.request("GET", "/")
        c.getresponse().read()
        counts[0] += 1


def main():
    t = Tap()
    if not os.access(DENO, os.X_OK):
        t.bail(f"{DENO} is missing: scripts/bootstrap fetches it from the npm registry")
    tmp = tempfile.mkdtemp(prefix="d9-deno-")
    os.chmod(tmp, 0o755)
    deno = os.path.join(tmp, "deno")
    shutil.copy2(DENO, deno)
    with open(os.path.join(tmp, "server.js"), "w") as f:
        f.write(SERVER_JS)
    env = dict(os.environ, HOME=tmp, DENO_DIR=os.path.join(tmp, "cache"), DENO_NO_UPDATE_CHECK="1",
               NO_COLOR="1")
    # --perf-basic-prof: V8 writes /tmp/perf-PID.map, which the sealer reads
    # to name the JIT's frames.
    srv = subprocess.Popen([deno, "run", "--v8-flags=--perf-basic-prof", "--allow-net=127.0.0.1", "--allow-read=/etc/hostname",
                            os.path.join(tmp, "server.js")], cwd=tmp, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = srv.stdout.readline()
    try:
        port = json.loads(line)["port"]
    except (ValueError, KeyError):
        srv.kill()
        t.bail(f"deno did not start its server: {line!r} {srv.stdout.read()[:2000]!r}")
    d = D9d(D9D, D9CTL)
    d.start_or_bail(t)
    out = os.path.join(tmp, "out")
    stop, counts = threading.Event(), [0]
    clients = [threading.Thread(target=load, args=(port, stop, counts)) for _ in range(2)]
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)]
    try:
        for c in clients:
            c.start()
        time.sleep(2)  # mid-run: the server is busy before d9d arrives
        before = stats(port)
        r = d.ctl("record", "--pid", str(srv.pid), "--duration", "6s", "--out", out)
        after = stats(port)
    finally:
        stop.set()
        for h in hogs:
            h.kill()
            h.wait()
        for c in clients:
            c.join()
    segs = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs if f.endswith(".bin.zst"))
    t.ok(r.returncode == 0 and segs, f"record --pid of the running Deno server sealed {len(segs)} segments",
         r.stdout + r.stderr + d.logtext()[-3000:])
    rep = subprocess.run([D9CTL, "report", "--json"] + segs, capture_output=True, text=True, timeout=120)
    try:
        report = json.loads(rep.stdout)
    except ValueError:
        t.bail(f"report --json failed: {rep.stderr}")
    meta = report["metadata"]
    workers = [w["worker"] for w in report["workers"]]
    t.ok(meta.get("runtime.main") == "0" and workers == [0],
         f"one worker, the current-thread runtime (runtime.main {meta.get('runtime.main')!r}, workers {workers})",
         json.dumps(report["workers"]))
    threads = {}
    for tid in os.listdir(f"/proc/{srv.pid}/task"):
        with open(f"/proc/{srv.pid}/task/{tid}/comm") as f:
            threads[int(tid)] = f.read().strip()
    dump = subprocess.run([D9CTL, "dump", "--json"] + segs, capture_output=True, text=True, timeout=120)
    parks, pool_tids, started, long_ns, span, wall = set(), set(), None, [], [None, None], None
    polls_from = polls_to = None
    for line in dump.stdout.splitlines():
        if not line.startswith("{"):
            continue
        ev = json.loads(line)
        if ev["ts"]:
            span = [span[0] or ev["ts"], ev["ts"]]
        if ev["event"] == "ClockSyncEvent" and wall is None:
            wall = ev["fields"]["realtime_ns"] - ev["ts"]
        kind, f = ev["event"], ev["fields"]
        if kind == "PollStartEvent":
            started = ev["ts"]
            polls_from = polls_from or started
        elif kind == "PollEndEvent" and started is not None:
            polls_to = ev["ts"]
            if ev["ts"] - started >= 29_000_000:
                long_ns.append((started, ev["ts"]))
            started = None
        elif kind == "WorkerParkEvent":
            parks.add(f["tid"])
        elif kind == "D9BlockingPollEvent":
            pool_tids.add(f["tid"])
    t.ok(parks == {srv.pid}, f"parks are the main thread's only (tids {sorted(parks)}, main {srv.pid})")
    t.ok(report["blocking_pool_jobs"] > 0 and srv.pid not in pool_tids,
         f"the file reads are blocking-pool jobs ({report['blocking_pool_jobs']}) on other threads "
         f"({sorted(pool_tids)}; the target's threads: {sorted(set(threads.values()))})")

    # The server's stall times (its wall clock, ms) in the trace's clock,
    # kept when they fall inside what was recorded.
    at = [ms * 1_000_000 - wall for ms in after["at"]] if wall is not None else []
    # From the first poll event on: the segment also holds samples from
    # before the uprobes were live (see docs/performance.md, attach).
    first, last = polls_from or 0, polls_to or 0
    inside = [a for a in at if first + 10_000_000 < a < last - 40_000_000]
    print(f"# the segment starts {(first - span[0]) / 1e6:.0f} ms before its first poll event")
    covered = [a for a in inside if any(s - 2_000_000 <= a and a + 29_000_000 <= e + 2_000_000 for s, e in long_ns)]
    print(f"# {len(inside)} stalls inside the recording, {len(covered)} inside a long poll; "
          f"{len(long_ns)} long polls, workers {json.dumps(report['workers'])}")
    t.ok(len(inside) >= 3 and len(covered) >= 0.9 * len(inside),
         f"the stalls are long polls on worker 0: {len(covered)} of the {len(inside)} stalls made while "
         f"recording lie inside a poll of >= 29 ms ({len(long_ns)} such polls)")
    long_polls = [p for p in report["longest_polls"] if p["duration_ns"] >= 29_000_000]
    busy = [p for p in long_polls if p["cpu_samples"]]
    jit = [p for p in busy if any(s.startswith(("[anonymous code]", "JS:")) for s in p["stack"])]
    clock = [p for p in busy if any(s in ("gettimeofday", "__vdso_gettimeofday", "clock_gettime",
                                           "__vdso_clock_gettime") for s in p["stack"][:3])]
    t.ok(busy and len(jit) >= len(busy) * 0.5 and clock,
         f"their CPU stacks go through the JIT's code ({len(jit)} of {len(busy)}) to the clock call "
         f"({len(clock)})", json.dumps([p["stack"][:12] for p in busy[:3]]))
    handler = [p for p in busy if any(s.startswith("JS:") and "server.js:" in s for s in p["stack"])]
    t.ok(busy and len(handler) >= len(busy) * 0.5,
         f"the JIT's frames are named from V8's perf map: the request handler in server.js "
         f"({len(handler)} of {len(busy)})", json.dumps([p["stack"][:12] for p in busy[:3]]))
    w = report["workers"][0] if report["workers"] else {}
    t.ok(w.get("parked_ns", 0) > 0 and w.get("busy_ns", 0) > 0,
         f"worker 0 is busy {w.get('busy_share', 0):.0%} and parked {w.get('parked_share', 0):.0%} of the time")
    miss = report["missing"]
    t.ok("lost_events" in miss, f"events lost are counted ({miss.get('lost_events')})", json.dumps(miss))
    t.ok(counts[0] > 0 and srv.poll() is None, f"the server kept serving ({counts[0]} requests)")
    srv.kill()
    srv.wait()
    try:
        os.unlink(f"/tmp/perf-{srv.pid}.map")
    except FileNotFoundError:
        pass
    t.ok(d.stop() == 0, "d9d stops cleanly")
    if t.failed == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        d.cleanup()
    t.done()


if __name__ == "__main__":
    main()
