#!/usr/bin/env python3
"""d9d configured with s3_* keys ships every sealed segment to a real S3
(Swift + s3api from tests/s3/swift-harness) under dial9's key layout.
Run under `swift-harness run --bucket d9-e2e -- test_s3_ship.py D9D D9CTL TARGET`."""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, start_target, target_truth, wait_for  # noqa: E402

D9D, D9CTL, TARGET = sys.argv[1:4]


def main():
    t = Tap()
    env = os.environ
    if "D9_S3_ENDPOINT" not in env:
        t.bail("run me under tests/s3/swift-harness")
    d = D9d(D9D, D9CTL, {
        "s3_endpoint": env["D9_S3_ENDPOINT"], "s3_region": env.get("D9_S3_REGION", "us-east-1"),
        "s3_bucket": "d9-e2e", "s3_access_key_id": env["D9_S3_ACCESS_KEY"],
        "s3_secret_access_key": env["D9_S3_SECRET_KEY"], "s3_prefix": "e2e", "s3_instance": "testhost",
        "rotate_period": "1s",
    })
    d.start_or_bail(t)
    tgt = start_target(TARGET, "mixed", "--duration", "5")
    time.sleep(0.3)
    r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "2500ms")
    truth = target_truth(tgt)
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and len(paths) >= 2, f"recorded {len(paths)} segments", r.stderr)

    def shipped():
        st = d.status()
        s3 = (st or {}).get("s3") or {}
        return s3 if s3.get("uploads_ok", 0) >= len(paths) and s3.get("queue", 1) == 0 else None
    s3 = wait_for(shipped, 60)
    t.ok(s3 is not None, f"every sealed segment uploaded: {d.status().get('s3')}")
    key = (s3 or {}).get("last_key", "")
    pat = (r"^e2e/\d{4}-\d\d-\d\d/\d{4}/d9-target-[0-9.]+-release/testhost/[a-z]{4}-%d/\d+-\d+\.bin\.zst$"
           % truth["pid"])
    t.ok(re.match(pat, key), f"object key follows dial9's layout: {key}")
    t.ok(s3 and s3.get("uploads_failed") == 0 and s3.get("lost") == 0, "no failed uploads, nothing lost", s3)
    text = d.ctl("status").stdout
    t.ok(re.search(r"^s3: 0 queued, %d uploaded \(\d+ bytes\), 0 failed attempts, 0 lost$" % s3.get("uploads_ok", -1),
                   text, re.M) if s3 else False, "d9ctl status shows queue, uploads and bytes shipped", text)
    t.ok("shipping sealed segments to s3://d9-e2e" in d.logtext(), "d9d logged that it ships to the bucket")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
