#!/usr/bin/env python3
"""Records the mixed Tokio test target with a real d9d (BPF), then opens the
sealed segments in the viewer (browser_recording.js prints the TAP).
Usage: record_and_view.py D9D D9CTL TARGET NODE"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d  # noqa: E402

D9D, D9CTL, TARGET, NODE = sys.argv[1:5]


def main():
    out = tempfile.mkdtemp(prefix="d9-viewer-rec-")
    d = D9d(D9D, D9CTL)
    try:
        d.start()
        r = d.ctl("record", "--probes", "all", "--duration", "30s", "--out", out, "--", TARGET, "mixed", "--duration", "4")
    except Exception as e:  # noqa: BLE001 - any failure to record is fatal here
        print(f"Bail out! recording failed: {e}")
        return 1
    finally:
        d.stop()
        d.cleanup()
    paths = r.stdout.split()
    if r.returncode != 0 or not paths:
        print(f"Bail out! d9ctl record failed ({r.returncode}): {r.stderr.strip()[-500:]}")
        return 1
    rel = [os.path.relpath(p, out) for p in paths]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "browser_recording.js")
    rc = os.spawnv(os.P_WAIT, NODE, [NODE, script, out, *rel])
    if rc == 0:
        shutil.rmtree(out, ignore_errors=True)
    else:
        print(f"# segments kept in {out}")
    return rc


sys.exit(main())
