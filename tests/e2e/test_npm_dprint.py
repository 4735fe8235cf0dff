#!/usr/bin/env python3
"""dprint's language server (npm @dprint/linux-x64-glibc 0.57.4: glibc PIE,
stripped, Tokio 1.50) formatting a TypeScript file for an LSP client over
stdio, recorded mid-run with the default set (sched,cpu,longpoll) while two
CPU hogs hold both cores. dprint runs its Tokio tasks on the main thread
(block_on, current-thread style), and every one of its 85 raw::poll
functions is a 16-byte `jmp` stub. The planner took the stub for the poll's
body, a range no stack frame can lie in, so the default set saw no task
poll on any stack: no worker (runtime.main ""), no park, no long poll, an
empty Workers table. It now follows the jumps to the body
(uprobes/func_bounds.c). Checks:
 - the recording used the default set (probes "sched,cpu,longpoll");
 - runtime.main names a worker, and it is the main thread (tid == pid):
   its samples and every one of its parks carry that worker id;
 - that worker parks and unparks (from sched_switch; the counts differ by
   at most one, a park open at either end);
 - at least one D9LongPollEvent on it names its future and has a stack
   (10 in 6 s without hogs; under them, fewer and often preempted ones);
 - dprint answered the client's formatting requests during the recording,
   none with an error (the workload is real);
 - `d9ctl report` shows that worker in its Workers table, its polls and
   busy share "-" (the default set has no poll events).
Usage: test_npm_dprint.py D9D D9CTL DPRINT [PLUGIN_WASM]
(PLUGIN_WASM: @dprint/typescript's plugin.wasm; default: the one
scripts/bootstrap.d/45-npm-dprint puts beside the binary.)"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, LspServer, Tap, dump_events, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, BINARY = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
PLUGIN = os.path.abspath(sys.argv[4]) if len(sys.argv) > 4 else \
    os.path.join(os.path.dirname(BINARY), "dprint-plugins", "typescript-0.96.1.wasm")
NO_WORKER = 255


def source(version):
    """A TypeScript file dprint takes milliseconds to format, every line of
    it badly formatted; version makes each text new."""
    lines = [f"const  x{j} = {{a:{version},b:[1,2,3], c: function( y:number ){{ return y*{j} }} }};"
             for j in range(300)]
    lines += [f"export  class  C{j} {{ m( a:string,b :number ){{ if(a){{return b+{j}}} else {{ return {version} }} }} }}"
              for j in range(60)]
    return "\n".join(lines) + "\n"


def drive(lsp, uri, stop, done):
    """Change the document and ask for its formatting, one request at a
    time, until stop. done: {"ok": [answer times of formatting with edits],
    "errors": n, "timeouts": n, "why": first error}."""
    v = 1
    while not stop.is_set() and lsp.proc.poll() is None:
        v += 1
        lsp.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": v},
                                              "contentChanges": [{"text": source(v)}]})
        a = lsp.request("textDocument/formatting", {"textDocument": {"uri": uri},
                                                    "options": {"tabSize": 2, "insertSpaces": True}})
        if a is None:
            done["timeouts"] += 1
        elif a[1] is not None or not a[2]:
            done["errors"] += 1
            done["why"] = done["why"] or repr(a[1:])[:400]
        else:
            done["ok"].append(a[0])


def main():
    t = Tap()
    for f in (BINARY, PLUGIN):
        if not os.path.isfile(f):
            t.bail(f"no {f}: scripts/bootstrap.d/45-npm-dprint fetches it from the npm registry")
    tmp = tempfile.mkdtemp(prefix="d9-dprint-")
    root = os.path.join(tmp, "proj")
    os.makedirs(root)
    with open(os.path.join(root, "dprint.json"), "w") as f:
        json.dump({"typescript": {}, "plugins": [PLUGIN]}, f)
    path = os.path.join(root, "f.ts")
    with open(path, "w") as f:
        f.write(source(1))
    uri = "file://" + path
    env = dict(os.environ, HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, "cache"),
               DPRINT_CACHE_DIR=os.path.join(tmp, "cache", "dprint"))
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-dprint-out-")
    d.start_or_bail(t)
    lsp, hogs, driver = None, [], None
    stop, done = threading.Event(), {"ok": [], "errors": 0, "timeouts": 0, "why": ""}
    r = window = status = None
    try:
        lsp = LspServer([BINARY, "lsp"], root, env)
        pid = lsp.proc.pid
        init = lsp.request("initialize", {"processId": os.getpid(), "rootUri": "file://" + root, "capabilities": {},
                                          "workspaceFolders": [{"uri": "file://" + root, "name": "proj"}]},
                           timeout=60)
        if init is None or init[1] is not None:
            t.bail(f"dprint lsp did not initialize: {init!r}")
        lsp.notify("initialized", {})
        lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "typescript", "version": 1,
                                                             "text": source(1)}})
        # The first formatting loads (compiles) the wasm plugin: seconds.
        first = lsp.request("textDocument/formatting", {"textDocument": {"uri": uri},
                                                        "options": {"tabSize": 2, "insertSpaces": True}}, timeout=60)
        if first is None or first[1] is not None or not first[2]:
            t.bail(f"dprint lsp did not format the file: {first!r}")
        driver = threading.Thread(target=drive, args=(lsp, uri, stop, done))
        driver.start()
        hogs = start_cpu_hogs()
        time.sleep(1.5)  # mid-run: the server is formatting under the hogs
        t0 = time.monotonic()
        r = d.ctl("record", "--pid", str(pid), "--duration", "6s", "--out", d.out)
        window = (t0, time.monotonic())
        status = ((d.status(pid) or {}).get("targets") or [{}])[0]
    finally:
        stop_procs(hogs)
        stop.set()
        if driver:
            driver.join(timeout=40)
        if lsp:
            lsp.stop()
    t.ok(r.returncode == 0 and r.stdout.split(), f"record --pid {pid} (the default set) of dprint lsp under 2 CPU hogs",
         r.stderr)
    metas, samples, parks, unparks, longs = [], collections.Counter(), collections.Counter(), collections.Counter(), []
    park_ids = collections.Counter()  # the main thread's parks by worker id
    for ev in dump_events(D9CTL, r.stdout.split()):
        name, f = ev.get("event"), ev.get("fields", {})
        if name == "SegmentMetadataEvent":
            metas.append(f.get("entries", {}))
        elif name == "CpuSampleEvent" and f.get("tid") == pid:
            samples[f["worker_id"]] += 1
        elif name == "WorkerParkEvent":
            parks[f["worker_id"]] += 1
            if f.get("tid") == pid:
                park_ids[f["worker_id"]] += 1
        elif name == "WorkerUnparkEvent":
            unparks[f["worker_id"]] += 1
        elif name == "D9LongPollEvent":
            longs.append(f)
    meta = metas[-1] if metas else {}
    probes = sorted({m.get("probes") for m in metas})
    t.ok(metas and probes == ["sched,cpu,longpoll"],
         f"the default set: probes {probes} in {len(metas)} metadata events")
    main_ids = [w for w in (meta.get("runtime.main") or "").split(",") if w]
    named = {w: n for w, n in samples.items() if w != NO_WORKER}
    w = max(named, key=named.get) if named else None
    why = (f"main thread samples by worker {dict(samples)}, parks by worker {dict(parks)}, "
           f"status workers {status and status.get('workers')}, plan {meta.get('probe_plan')!r}")
    t.ok(main_ids and w is not None and str(w) in main_ids,
         f"runtime.main {meta.get('runtime.main')!r} names the main thread (tid {pid}) as worker {w}: "
         f"{named.get(w, 0)} of its {sum(samples.values())} samples carry it", why)
    t.ok(w is not None and park_ids and set(park_ids) == {w},
         f"every park of the main thread is worker {w}'s: {dict(park_ids)}", why)
    p, u = parks.get(w, 0), unparks.get(w, 0)
    t.ok(p > 0 and u > 0 and abs(p - u) <= 1, f"worker {w} parks and unparks: {p} parks, {u} unparks", why)
    mine = [f for f in longs if f["worker_id"] == w and f.get("tid", pid) == pid and f["spawn_loc"] and f["stack"]]
    t.ok(len(mine) >= 1,
         f"{len(mine)} of {len(longs)} long polls on worker {w} name their future and have a stack: "
         f"{[(f['how'], round(f['min_ns'] / 1e6, 2), f['spawn_loc']) for f in sorted(mine, key=lambda f: -f['min_ns'])[:5]]}",
         why)
    during = sum(1 for a in done["ok"] if window[0] < a < window[1])
    t.ok(during >= 5 and not done["errors"] and not done["timeouts"],
         f"dprint formatted the file {during} times during the recording ({len(done['ok'])} in all), "
         f"{done['errors']} errors, {done['timeouts']} requests unanswered", done["why"])
    rep = d.ctl("report", *r.stdout.split())
    lines = rep.stdout.splitlines()
    rows = []
    if any(ln.startswith("Workers") for ln in lines):
        at = next(i for i, ln in enumerate(lines) if ln.startswith("Workers"))
        for ln in lines[at + 2:]:
            if not ln.strip():
                break
            rows.append(ln.strip())
    # No poll events in the default set: its polls and busy share are "-",
    # not a 0 % that reads as an idle worker.
    t.ok(rep.returncode == 0 and any(row.split()[:3] == [str(w), "-", "-"] for row in rows),
         f"d9ctl report lists worker {w} in its Workers table, busy unknown: {rows}", rep.stdout + rep.stderr)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if not t.failed:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(d.out, ignore_errors=True)
    t.done()


main()
