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
With the default set (MODE default: sched,cpu,longpoll, no uprobe) the
same recording must show the same runtime from stacks alone: the main
thread as worker 0 (a frame inside a task's raw::poll, whose bounds a code
sweep finds: the build has no symbols and no CFI), its parks from
sched_switch, and each stall as a D9LongPollEvent of the main task's type
whose stack goes through the JIT's frames.
Usage: test_deno_server.py D9D D9CTL DENO [all|default]"""
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
from d9harness import D9d, Tap, start_cpu_hogs, stop_procs, symbol_names  # noqa

D9D, D9CTL, DENO = sys.argv[1:4]
MODE = sys.argv[4] if len(sys.argv) > 4 else "all"
STALL_EVERY = 100
SERVER_JS = """
let n = 0, stalls = 0, at = [];
Deno.serve({ port: 0, hostname: "127.0.0.1",
             onListen(a) { console.log(JSON.stringify({ port: a.port })); } }, async (req) => {
  if (new URL(req.url).pathname === "/stats")
    return new Response(JSON.stringify({ requests: n, stalls, at, now: performance.now() }));
  n++;
  if (n % %d === 0) { stalls++; const t = performance.now(); at.push(t); while (performance.now() - t < 30) {} }
  if (n % 20 === 0) await Deno.readTextFile("/etc/hostname");
  return new Response("ok");
});
""".replace("%d", str(STALL_EVERY))


def stats(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/stats")
    return json.loads(c.getresponse().read())


def js_clock_offset(port):
    """CLOCK_MONOTONIC ns at the server's performance.now() 0 (a monotonic
    clock too), from the /stats request bracketed most narrowly by two
    monotonic reads. Not from the wall clock: this VM's CLOCK_REALTIME is
    stepped against CLOCK_MONOTONIC while it runs (seen: 6 ms in 1.2 s of
    one recording), which moved Date.now() stalls 15 ms off the trace."""
    best = None
    for _ in range(20):
        a = time.monotonic_ns()
        now_ms = stats(port)["now"]
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - int(now_ms * 1_000_000))
        if best[0] < 500_000:
            break
    return best[1]


def load(port, stop, counts):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        c.request("GET", "/")
        c.getresponse().read()
        counts[0] += 1


def check_full_set(t, report, evs, threads, srv, at):
    pool_tids, started, long_ns, span = set(), None, [], [None, None]
    polls_from = polls_to = None
    for ev in evs:
        if ev["ts"]:
            span = [span[0] or ev["ts"], ev["ts"]]
        kind, f = ev["event"], ev["fields"]
        if kind == "PollStartEvent":
            started = ev["ts"]
            polls_from = polls_from or started
        elif kind == "PollEndEvent" and started is not None:
            polls_to = ev["ts"]
            if ev["ts"] - started >= 29_000_000:
                long_ns.append((started, ev["ts"]))
            started = None
        elif kind == "D9BlockingPollEvent":
            pool_tids.add(f["tid"])
    t.ok(report["blocking_pool_jobs"] > 0 and srv.pid not in pool_tids,
         f"the file reads are blocking-pool jobs ({report['blocking_pool_jobs']}) on other threads "
         f"({sorted(pool_tids)}; the target's threads: {sorted(set(threads.values()))})")
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
    check_stacks(t, samples_inside(evs, srv.pid, long_ns))
    w = report["workers"][0] if report["workers"] else {}
    t.ok(w.get("parked_ns", 0) > 0 and w.get("busy_ns", 0) > 0,
         f"worker 0 is busy {w.get('busy_share', 0):.0%} and parked {w.get('parked_share', 0):.0%} of the time")


def samples_inside(evs, tid, spans):
    """Every CPU sample of thread tid inside one of spans [(start, end)], as
    names, leaf first. All of them, not one per stall: how many land in the
    clock call itself is chance (the busy loop spends most of its time in
    V8 and Deno's op around it), and one sample per stall made 0 of 8 a
    matter of luck (CI rehearsal 11)."""
    names = symbol_names(evs)
    return [[names.get(int(a, 16) if isinstance(a, str) else a, a) for a in ev["fields"]["callchain"]]
            for ev in evs if ev["event"] == "CpuSampleEvent" and ev["fields"]["tid"] == tid
            and any(s <= ev["ts"] <= e for s, e in spans)]


def check_stacks(t, stacks):
    """The stalls' stacks (names, leaf first): through the JIT's code, named
    from V8's perf map, to the clock call the busy loop makes."""
    print(f"# {len(stacks)} CPU samples inside the stalls")
    jit = [s for s in stacks if any(f.startswith(("[anonymous code]", "JS:")) for f in s)]
    clock = [s for s in stacks if any(f in ("gettimeofday", "__vdso_gettimeofday", "clock_gettime",
                                           "__vdso_clock_gettime") for f in s[:3])]
    t.ok(stacks and len(jit) >= len(stacks) * 0.5 and clock,
         f"their CPU stacks go through the JIT's code ({len(jit)} of {len(stacks)}) to the clock call "
         f"({len(clock)})", json.dumps([s[:12] for s in stacks[:3]]))
    handler = [s for s in stacks if any(f.startswith("JS:") and "server.js:" in f for f in s)]
    t.ok(stacks and len(handler) >= len(stacks) * 0.5,
         f"the JIT's frames are named from V8's perf map: the request handler in server.js "
         f"({len(handler)} of {len(stacks)})", json.dumps([s[:12] for s in stacks[:3]]))


def check_default_set(t, report, evs, srv, at):
    meta = report["metadata"]
    exact = [ev["event"] for ev in evs if ev["event"] in ("PollStartEvent", "PollEndEvent", "TaskSpawnEvent",
                                                           "WakeEventEvent", "TaskTerminateEvent")]
    t.ok(meta.get("probes") == "sched,cpu,longpoll" and not exact,
         f"the default set: probes {meta.get('probes')!r}, no uprobe event ({len(exact)})")
    longs = [ev for ev in evs if ev["event"] == "D9LongPollEvent"]
    # Each long poll's span as the trace states it: at least [ts - min_ns, ts].
    spans = [(ev["ts"] - ev["fields"]["min_ns"], ev["ts"], ev) for ev in longs]
    first = min((ev["ts"] for ev in evs if ev["event"] == "CpuSampleEvent"), default=0)
    last = max((ev["ts"] for ev in evs if ev["ts"]), default=0)
    inside = [a for a in at if first + 200_000_000 < a < last - 100_000_000]
    # A stall is seen when long polls cover >= 20 ms of its 30 ms: one, or
    # pieces (under load V8's thread sleeps briefly inside the busy loop, a
    # "blocked" piece between two "running" ones).
    def overlap(s, end, a):
        return max(0, min(end, a + 30_000_000) - max(s, a))
    seen = [[e for s, end, e in spans if overlap(s, end, a)] for a in inside]
    seen = [m if sum(overlap(s, end, a) for s, end, _ in spans) >= 20_000_000 else []
            for a, m in zip(inside, seen)]
    covered = [m for m in seen if m]
    for a, m in zip(inside, seen):
        if not m:  # what the trace holds around a stall it missed (ms from the stall's start)
            near = [(round((s - a) / 1e6, 1), round((end - a) / 1e6, 1), e["fields"]["ticks"], e["fields"]["how"])
                    for s, end, e in spans if end > a - 50_000_000 and s < a + 80_000_000]
            print(f"# missed stall at {a}: long polls near it {near}")
    print(f"# {len(inside)} stalls inside the recording, {len(covered)} seen as long polls; {len(longs)} long polls: "
          + json.dumps([(ev["fields"]["min_ns"] // 1000, ev["fields"]["ticks"], ev["fields"]["how"]) for ev in longs[:40]]))
    t.ok(len(inside) >= 10 and len(covered) >= 0.9 * len(inside),
         f"the stalls are long polls: {len(covered)} of the {len(inside)} stalls made while recording are covered "
         f">= 20 ms by D9LongPollEvents ({len(longs)} long polls)")
    stall_polls = [e for m in covered for e in m]
    types = {e["fields"]["spawn_loc"] for e in stall_polls}
    on_main = all(e["fields"]["tid"] == srv.pid and e["fields"]["worker_id"] == 0 for e in stall_polls)
    t.ok(stall_polls and on_main and len(types) == 1 and all(types),
         f"all on worker 0, the main thread, and of one future type (the main task: {sorted(types)})")
    check_stacks(t, samples_inside(evs, srv.pid, [(s, end) for s, end, e in spans if e in stall_polls]))
    w = report["workers"][0] if report["workers"] else {}
    t.ok(0 < w.get("parked_share", 0) < 0.9,
         f"worker 0 is parked {w.get('parked_share', 0):.0%} of the time (from sched_switch)")


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
    hogs = start_cpu_hogs()
    try:
        for c in clients:
            c.start()
        time.sleep(2)  # mid-run: the server is busy before d9d arrives
        before = stats(port)
        probes = ["--probes", "all"] if MODE == "all" else []
        r = d.ctl("record", "--pid", str(srv.pid), "--duration", "6s", "--out", out, *probes)
        after = stats(port)
    finally:
        stop.set()
        stop_procs(hogs)
        for c in clients:
            c.join()
    js_zero = js_clock_offset(port)
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
    evs = [json.loads(line) for line in dump.stdout.splitlines() if line.startswith("{")]
    parks = {ev["fields"]["tid"] for ev in evs if ev["event"] == "WorkerParkEvent"}
    t.ok(parks == {srv.pid}, f"parks are the main thread's only (tids {sorted(parks)}, main {srv.pid})")
    # The server's stall times in the trace's clock (CLOCK_MONOTONIC).
    at = [int(ms * 1_000_000) + js_zero for ms in after["at"]]
    if MODE == "all":
        check_full_set(t, report, evs, threads, srv, at)
    else:
        check_default_set(t, report, evs, srv, at)
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
