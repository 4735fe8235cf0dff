#!/usr/bin/env python3
"""Records d9-target backlog with a real d9d (BPF, resources every 100 ms,
accept queues): its listener is flooded while it accepts nothing, then it
accepts. The viewer then opens the sealed segments (browser_series.js
prints the TAP). Usage: record_series_and_view.py D9D D9CTL TARGET NODE"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, sealed_files, start_backlog_target, start_flood, wait_for  # noqa: E402

D9D, D9CTL, TARGET, NODE = sys.argv[1:5]
BACKLOG = 16


def record(d, out):
    target, port = start_backlog_target(TARGET, BACKLOG)
    flood = None
    try:
        if not port:
            raise RuntimeError("the backlog target did not start")
        r = d.ctl("attach", "--pid", str(target.pid), "--accept-queues")
        if r.returncode:
            raise RuntimeError(f"attach failed: {r.stderr.strip()}")
        time.sleep(0.8)
        flood = start_flood(target.pid, port, 3 * BACKLOG)
        time.sleep(1.6)
        target.stdin.write("accept\n")
        target.stdin.flush()
        time.sleep(1.2)
        d.ctl("detach", "--pid", str(target.pid))
        st = wait_for(lambda: (d.status(target.pid) or {"targets": [{}]})["targets"][0].get("state") == "done", 30)
        if not st:
            raise RuntimeError("the segment was not sealed")
        paths = sealed_files(d.status(target.pid)["targets"][0]["dir"])
        for p in paths:
            shutil.copy(p, out)
        return port, [os.path.basename(p) for p in paths]
    finally:
        for p in (flood, target):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def main():
    out = tempfile.mkdtemp(prefix="d9-viewer-series-")
    d = D9d(D9D, D9CTL)
    try:
        d.start()
        port, segs = record(d, out)
    except Exception as e:  # noqa: BLE001 - any failure to record is fatal here
        print(f"Bail out! recording failed: {e}")
        return 1
    finally:
        d.cleanup()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "browser_series.js")
    rc = os.spawnv(os.P_WAIT, NODE, [NODE, script, out, str(port), str(BACKLOG), *segs])
    if rc == 0:
        shutil.rmtree(out, ignore_errors=True)
    else:
        print(f"# segments kept in {out}")
    return rc


sys.exit(main())
