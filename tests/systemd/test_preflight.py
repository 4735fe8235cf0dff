#!/usr/bin/env python3
"""d9d's start-up preflight, run for real under three capability sets:
full root, exactly d9d.service's set as a non-root user (the claim that the
unit grants enough), and none at all (it must say what is missing)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdtest import SOURCE_ROOT, Tap  # noqa: E402

REPORT = sys.argv[1]


def unit_caps():
    """CapabilityBoundingSet= of d9d.service, as setpriv's +name list."""
    with open(os.path.join(SOURCE_ROOT, "systemd/d9d.service.in")) as f:
        m = re.search(r"^CapabilityBoundingSet=(.*)$", f.read(), re.M)
    caps = m.group(1).split()
    return ",".join("+" + c.lower().removeprefix("cap_") for c in caps), caps


def run(prefix):
    r = subprocess.run(prefix + [REPORT], capture_output=True, text=True, timeout=30)
    levels = dict(re.findall(r"^d9d: preflight: (\w+): (ok|degraded|FATAL):", r.stdout, re.M))
    return r, levels


tap = Tap(11)
if os.geteuid() != 0:
    tap.bail("must run as root: the test drops capabilities with setpriv")

r, lv = run([])
tap.ok(r.returncode == 0, "as root: no fatal finding", r.stdout + r.stderr)
for check in ("btf", "ringbuf", "uprobe_multi", "uprobe", "task_work"):
    tap.ok(lv.get(check) == "ok", f"as root: {check} works on this kernel", r.stdout)

plus, caps = unit_caps()
tap.diag(f"d9d.service capabilities: {' '.join(caps)}")
as_unit = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
           f"--inh-caps=-all,{plus}", f"--ambient-caps=-all,{plus}", f"--bounding-set=-all,{plus}"]
r, lv = run(as_unit)
bad = {k: v for k, v in lv.items() if v != "ok"}
tap.ok(r.returncode == 0 and not bad and len(lv) == 13,
       "non-root with exactly d9d.service's capabilities: every check ok", r.stdout + r.stderr)

r, lv = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--bounding-set=-all",
             "--inh-caps=-all"])
tap.ok(r.returncode == 1 and lv.get("cap_bpf") == "FATAL" and lv.get("cap_perfmon") == "FATAL",
       "without capabilities: CAP_BPF and CAP_PERFMON reported FATAL, exit 1", r.stdout)
tap.ok(lv.get("ringbuf") == "FATAL" and "needs CAP_BPF" in r.stdout,
       "without CAP_BPF the ring buffer probe blames the capability, not the kernel", r.stdout)
line = next((l for l in r.stdout.splitlines() if "preflight: cap_bpf:" in l), "")
tap.ok("CAP_BPF" in line and "nothing can be traced" in line,
       "the CAP_BPF line names what is missing and what d9d does without it", line or r.stdout)

# The probe must not depend on the path maps shows: with PrivateTmp the
# executable's directory may be hidden from d9d itself.
hidden = tempfile.mkdtemp(prefix="d9-preflight-", dir="/tmp")
try:
    shutil.copy(REPORT, hidden)
    r, lv = run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                 f"cd {hidden} && mount -t tmpfs tmpfs /tmp && exec ./{os.path.basename(REPORT)}", "sh"])
finally:
    shutil.rmtree(hidden, ignore_errors=True)
tap.ok(r.returncode == 0 and lv.get("uprobe_multi") == "ok" and lv.get("uprobe") == "ok",
       "uprobe checks work when the executable's path is hidden (PrivateTmp)", r.stdout + r.stderr)
tap.done()
