#!/usr/bin/env python3
"""ast-grep's language server (npm @ast-grep/cli-linux-x64-gnu 0.51.1: glibc
PIE, .symtab, no frame pointers, Tokio 1.54), linting TypeScript for an LSP
client over stdio, recorded mid-run with the default set. Its runtime polls
no task of its own: every LSP request is served in block_on on the main
thread, its multi-thread runtime's workers sit parked, and its blocking
pool reads stdin and writes stdout. The plan's only polls are blocking-pool
ones, and the default set then took no worker from stacks at all (it
needed a runtime task's poll body): no worker, no park, the pool threads'
samples on "other", and run ticks whose stacks could show no long poll
(about 1,800 of them per 8 s on the busy main thread). The workers never
wake on their own: a first recording (3 s) has them asleep from before its
start to after its end; in a second (6 s) the test stops and continues the
server once (SIGSTOP, SIGCONT), which wakes every thread. Checks:
 - the plan attached no run sampling and says the build has no task poll
   to be long; no run tick kept a stack after the plan landed (status
   run_ticks), and the trace holds no D9LongPollEvent;
 - the woken workers are workers, ids 0..N-1 (N the CPUs: Tokio's
   default), each with parks and unparks, on N threads named as Tokio
   names its pool's (the runtime's first N threads need not be its
   workers: a CI run had a stdin reader between them);
 - the main thread (block_on) is on no worker, and has most on-CPU samples;
 - the blocking pool's threads are never workers, and their samples are
   the blocking pool's (254), at least 90 % of each busy one's;
 - asleep throughout the first recording, the same threads are the same
   workers, each with one park and no unpark (they were on no worker: the
   stop named only workers translate had seen, and these never ran; the
   attach's sweep now reads each thread's Worker);
 - ast-grep answered the client's requests during the recording; 0 drops.
Usage: test_npm_ast_grep.py D9D D9CTL AST_GREP"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, LspServer, Tap, dump_events, wait_for  # noqa

D9D, D9CTL, BINARY = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
NO_WORKER, BLOCKING = 255, 254
RULES = {
    "no-var": "rule:\n  pattern: var $X = $Y\nfix: let $X = $Y\n",
    "no-eqeq": "rule:\n  pattern: $A == $B\nfix: $A === $B\n",
    "no-console": "rule:\n  pattern: console.log($$$ARGS)\n",
}
FILES = 200


def make_project(root):
    os.makedirs(os.path.join(root, "rules"))
    os.makedirs(os.path.join(root, "src"))
    with open(os.path.join(root, "sgconfig.yml"), "w") as f:
        f.write("ruleDirs:\n  - rules\n")
    for name, rule in RULES.items():
        with open(os.path.join(root, "rules", name + ".yml"), "w") as f:
            f.write(f"id: {name}\nlanguage: TypeScript\nseverity: warning\nmessage: {name}\n{rule}")


def source(i, version):
    """A file with something for each rule on most lines."""
    return "\n".join(f"var v{j} = {j} == {i + version}; console.log(v{j});" if j % 3 else
                     f"export const c{j} = [{version}].map((x) => x + {j});" for j in range(120)) + "\n"


def drive(lsp, root, stop, done):
    """Open every file, then edit one and ask for its code actions every
    20 ms until stop."""
    uri = [f"file://{root}/src/f{i}.ts" for i in range(FILES)]
    for i, u in enumerate(uri):
        lsp.notify("textDocument/didOpen", {"textDocument": {"uri": u, "languageId": "typescript", "version": 1,
                                                              "text": source(i, 0)}})
    version = 1
    while not stop.is_set():
        version += 1
        i = version % FILES
        lsp.notify("textDocument/didChange", {"textDocument": {"uri": uri[i], "version": version},
                                              "contentChanges": [{"text": source(i, version)}]})
        a = lsp.request("textDocument/codeAction", {
            "textDocument": {"uri": uri[i]}, "range": {"start": {"line": 0, "character": 0},
                                                       "end": {"line": 40, "character": 0}},
            "context": {"diagnostics": []}}, timeout=10)
        if a and not a[1]:
            done["ok"].append(a[0])
        else:
            done["errors"] += 1
        time.sleep(0.02)


def threads_by_tid(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                out[int(tid)] = f.read().strip()
        except OSError:
            pass
    return out


def record(d, pid, secs):
    """d9ctl record of pid for secs, started: the process, to communicate."""
    out = tempfile.mkdtemp(prefix="rec-", dir=d.tmp)
    return subprocess.Popen([D9CTL, "--socket", d.sock, "record", "--pid", str(pid), "--duration", f"{secs}s",
                             "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def by_thread(paths):
    """tid -> [(event, worker id, sample source)] of samples, parks and
    unparks; and the D9LongPollEvents."""
    out, longs = {}, []
    for e in dump_events(D9CTL, paths):
        f = e.get("fields", {})
        if e["event"] in ("CpuSampleEvent", "WorkerParkEvent", "WorkerUnparkEvent"):
            out.setdefault(f["tid"], []).append((e["event"], f["worker_id"], f.get("source")))
        elif e["event"] == "D9LongPollEvent":
            longs.append(f)
    return out, longs


def parks_of(by_tid):
    """(tid, worker id) -> [parks, unparks], workers only."""
    parks = {}
    for tid, xs in by_tid.items():
        for ev, w, _ in xs:
            if ev != "CpuSampleEvent" and w < BLOCKING:
                parks.setdefault((tid, w), [0, 0])[ev == "WorkerUnparkEvent"] += 1
    return parks


def main():
    t = Tap()
    if not os.path.exists(BINARY):
        t.bail(f"no ast-grep at {BINARY}: scripts/bootstrap fetches it")
    d = D9d(D9D, D9CTL).start_or_bail(t)
    root = tempfile.mkdtemp(prefix="d9-ast-grep-")
    make_project(root)
    lsp = LspServer([BINARY, "lsp"], root)
    stop, done = threading.Event(), {"ok": [], "errors": 0}
    driver = None
    try:
        init = lsp.request("initialize", {"processId": os.getpid(), "rootUri": f"file://{root}",
                                          "workspaceFolders": [{"uri": f"file://{root}", "name": "p"}],
                                          "capabilities": {}})
        if not init or init[1]:
            t.bail(f"ast-grep lsp did not initialize: {init}")
        lsp.notify("initialized", {})
        driver = threading.Thread(target=drive, args=(lsp, root, stop, done))
        driver.start()
        time.sleep(1.5)  # mid-run: the server busy
        pid = lsp.proc.pid
        idle = record(d, pid, 3)
        idle_out, idle_err = idle.communicate(timeout=60)
        t0 = time.monotonic()
        rec = record(d, pid, 6)
        def target():
            return ((d.status(pid) or {}).get("targets") or [{}])[0]
        landed = wait_for(lambda: target().get("plan", {}).get("state") == "ready", 5, 0.05)
        st1 = target()
        time.sleep(1.0)
        lsp.proc.send_signal(signal.SIGSTOP)  # wakes every thread, the parked workers too
        time.sleep(0.3)
        lsp.proc.send_signal(signal.SIGCONT)
        time.sleep(2.0)
        st2 = target()
        answered = [x for x in done["ok"] if x > t0]
        stdout, stderr = rec.communicate(timeout=60)
        threads = threads_by_tid(pid)
    finally:
        stop.set()
        if driver:
            driver.join()
        lsp.stop()
    t.ok(rec.returncode == 0 and landed, "recorded mid-run with the default set; the plan landed", stderr)
    plan = st2.get("probe_plan") or {}
    t.ok("run_sampling" not in plan.get("attached", {}) and
         plan.get("routes", {}).get("long_poll", "").startswith("none: this build polls no runtime task"),
         f"the plan attached no run sampling and says why ({plan.get('attached')}; long_poll: "
         f"{plan.get('routes', {}).get('long_poll')})")
    t.ok(isinstance(st1.get("run_ticks"), int) and st2.get("run_ticks") == st1.get("run_ticks"),
         f"no run tick kept a stack after the plan landed ({st1.get('run_ticks')} before it, "
         f"{st2.get('run_ticks')} 3 s later)")

    by_tid, longs = by_thread(stdout.split())
    n = os.cpu_count()
    named = {tid for tid, name in threads.items() if name.startswith("tokio-rt-worker")}
    parks = parks_of(by_tid)
    workers = sorted({tid for tid, _ in parks})
    t.ok(len(workers) == n and set(workers) <= named and sorted(w for _, w in parks) == list(range(n)) and
         all(p >= 1 and u >= 1 for p, u in parks.values()),
         f"the woken workers are workers 0..{n - 1} on {n} of the pool's threads, each parks and unparks: "
         f"{parks}")
    idle_parks = parks_of(by_thread(idle_out.split())[0])
    t.ok(idle.returncode == 0 and len(idle_parks) == n and sorted(idle_parks) == sorted(parks) and
         all(p == [1, 0] for p in idle_parks.values()),
         f"asleep throughout the first recording, the same threads are the same workers, each parked once, "
         f"never unparked: {idle_parks}", idle_err)
    pool = sorted(named - set(workers))
    main_samples = [w for ev, w, src in by_tid.get(pid, []) if ev == "CpuSampleEvent" and src == 0]
    on_cpu = sum(1 for xs in by_tid.values() for ev, _, src in xs if ev == "CpuSampleEvent" and src == 0)
    t.ok(main_samples and set(main_samples) == {NO_WORKER} and len(main_samples) * 2 > on_cpu,
         f"the main thread (block_on) is on no worker and has most on-CPU samples "
         f"({len(main_samples)} of {on_cpu}, ids {set(main_samples)})")
    jobs = {tid: [w for ev, w, _ in by_tid.get(tid, []) if ev == "CpuSampleEvent"] for tid in pool}
    busy = {tid: ws for tid, ws in jobs.items() if len(ws) >= 20}
    t.ok(busy and all(w >= BLOCKING for ws in jobs.values() for w in ws) and
         all(ws.count(BLOCKING) * 10 >= len(ws) * 9 for ws in busy.values()),
         f"the blocking pool's threads are no workers, 90 % or more of each busy one's samples the pool's: "
         f"{ {tid: (ws.count(BLOCKING), len(ws)) for tid, ws in jobs.items()} }")
    t.ok(not longs, f"no long poll: this build has no task poll ({len(longs)})")
    t.ok(len(answered) >= 50 and done["errors"] == 0 and st2.get("drops") == 0,
         f"ast-grep answered {len(answered)} code-action requests during the recording, "
         f"{done['errors']} failed; {st2.get('drops')} drops")
    shutil.rmtree(root, ignore_errors=True)
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
