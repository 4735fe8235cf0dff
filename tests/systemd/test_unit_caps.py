#!/usr/bin/env python3
"""d9d.service runs d9d as a system user with only the capabilities in its
CapabilityBoundingSet=/AmbientCapabilities=. Prove that set is enough, for
real: run d9d as an unprivileged uid holding exactly those capabilities
(setpriv; parsed from the unit, so the test follows the unit), then record a
real Tokio target with `d9ctl record`: running as d9d's own uid, as another
uid (root, as on a host where d9d traces other services), from a private
0700 directory, and from a /tmp that d9d cannot see. Like PrivateTmp=yes,
d9d runs in its own mount namespace with fresh /tmp and /var/tmp, so its
state and socket live in the build directory. The
segments must decode and hold poll events (uprobes) and CPU samples
(sched_switch + perf sampling). A non-dumpable target (exec'd with real and
effective uids apart: its /proc files are root's, /proc/PID/io 0400) still
gets its resource samples, /proc/PID/io included: CAP_SYS_PTRACE passes the
kernel's ptrace access check, CAP_DAC_READ_SEARCH the file mode.
With --without-dac-read-search: the unit's set less CAP_DAC_READ_SEARCH (a
drop-in that removes it). The non-dumpable target is still attached, but
its /proc/PID/io cannot be opened: resource sampling stops with one warning,
`resources_error` in status, and the trace says why (D9SamplingStoppedEvent,
which dial9's readers keep as a custom event; d9ctl report prints it).
Usage: test_unit_caps.py D9D D9CTL TARGET [--without-dac-read-search]"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdtest import SOURCE_ROOT, Tap  # noqa: E402

D9D, D9CTL, TARGET = sys.argv[1:4]
WITHOUT_DAC = sys.argv[4:5] == ["--without-dac-read-search"]
NOBODY = 65534


def unit_caps():
    with open(os.path.join(SOURCE_ROOT, "systemd/d9d.service.in")) as f:
        text = f.read()
    bounding = re.search(r"^CapabilityBoundingSet=(.*)$", text, re.M).group(1).split()
    ambient = re.search(r"^AmbientCapabilities=(.*)$", text, re.M).group(1).split()
    return bounding, ambient


def as_setpriv(caps):
    return ",".join("+" + c.lower().removeprefix("cap_") for c in caps)


def event_counts(paths):
    r = subprocess.run([D9CTL, "dump", "--summary", *paths], capture_output=True, text=True, timeout=60)
    counts = {}
    for name, n in ((m.group(2), int(m.group(1)))
                    for m in re.finditer(r"^\s+(\d+)\s+(\w+Event)\s*$", r.stdout, re.M)):
        counts[name] = counts.get(name, 0) + n
    return r, counts


def resource_samples(paths):
    """(ProcessResourceUsageEvent count, the last D9ProcessResourcesEvent's fields)."""
    n, last = 0, {}
    for p in paths:
        r = subprocess.run([D9CTL, "dump", "--json", p], capture_output=True, text=True, timeout=120)
        for line in r.stdout.splitlines():
            if '"ProcessResourceUsageEvent"' in line:
                n += 1
            elif '"D9ProcessResourcesEvent"' in line and '"fields"' in line:
                last = json.loads(line)["fields"]
    return n, last


def record(tap, sock, target_uid, label, out, exe=TARGET, nondumpable=False):
    cmd = [exe, "mixed", "--duration", "8"]
    if nondumpable:
        # A set-uid-like exec: the kernel makes the process non-dumpable.
        cmd = ["setpriv", f"--ruid={target_uid}", f"--euid={target_uid + 1}", f"--rgid={target_uid}",
               f"--egid={target_uid}", "--clear-groups", *cmd]
    elif target_uid != 0:
        cmd = ["setpriv", f"--reuid={target_uid}", f"--regid={target_uid}", "--clear-groups", *cmd]
    target = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    if nondumpable:
        io = os.stat(f"/proc/{target.pid}/io")
        tap.ok(io.st_uid == 0 and (io.st_mode & 0o777) == 0o400,
               f"{label}: the kernel made it non-dumpable (/proc/PID/io root's, {io.st_mode & 0o777:o})")
    r = subprocess.run([D9CTL, "--socket", sock, "record", "--probes", "all", "--pid", str(target.pid), "--duration", "2s",
                        "--out", out], capture_output=True, text=True, timeout=60)
    target.kill()
    target.wait()
    segs = [l for l in r.stdout.splitlines() if l.strip()]
    tap.ok(r.returncode == 0 and segs, f"{label}: d9ctl record succeeds", r.stdout + r.stderr)
    d, counts = event_counts(segs) if segs else (None, {})
    tap.ok(d is not None and d.returncode == 0 and counts.get("PollStartEvent", 0) > 0,
           f"{label}: segments decode and hold uprobe poll events ({counts.get('PollStartEvent', 0)})",
           (d.stdout + d.stderr) if d else "no segments")
    tap.ok(counts.get("CpuSampleEvent", 0) > 0,
           f"{label}: CPU samples recorded ({counts.get('CpuSampleEvent', 0)})", counts)
    if nondumpable:
        n, last = resource_samples(segs)
        tap.ok(n >= 10 and last.get("rchar", 0) > 0 and last.get("open_fds", 0) > 0,
               f"{label}: {n} resource samples, /proc/PID/io and fd read (rchar {last.get('rchar')}, "
               f"open_fds {last.get('open_fds')})", last)


def stopped_events(paths):
    """Every D9SamplingStoppedEvent's fields in the segments."""
    out = []
    for p in paths:
        r = subprocess.run([D9CTL, "dump", "--json", p], capture_output=True, text=True, timeout=120)
        out += [json.loads(line)["fields"] for line in r.stdout.splitlines()
                if '"D9SamplingStoppedEvent"' in line and '"fields"' in line]
    return out


def record_without_dac(tap, sock, log, out):
    """A non-dumpable target: attached, its resources stop, and the trace says why."""
    target = subprocess.Popen(["setpriv", "--ruid=4242", "--euid=4243", "--rgid=4242", "--egid=4242",
                               "--clear-groups", TARGET, "mixed", "--duration", "8"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        r = subprocess.Popen([D9CTL, "--socket", sock, "record", "--probes", "sched,cpu", "--pid", str(target.pid),
                              "--duration", "2s", "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        st = {}
        for _ in range(40):
            time.sleep(0.1)
            j = subprocess.run([D9CTL, "--socket", sock, "status", "--json"], capture_output=True, text=True)
            try:
                st = next((t for t in json.loads(j.stdout).get("targets", []) if t.get("pid") == target.pid), {})
            except ValueError:
                st = {}
            if st.get("samples", {}).get("resources_error"):
                break
        stdout, stderr = r.communicate(timeout=60)
    finally:
        target.kill()
        target.wait()
    segs = [ln for ln in stdout.splitlines() if ln.strip()]
    tap.ok(r.returncode == 0 and segs, "non-dumpable target: attached and recorded", stdout + stderr)
    err = st.get("samples", {}).get("resources_error")
    tap.ok(err == "Permission denied", f"status says why resources stopped: {err!r}", st.get("samples"))
    log.seek(0)
    warns = re.findall(rf"pid {target.pid}: process resources not sampled any more: (.*)$", log.read(), re.M)
    tap.ok(warns == ["Permission denied"], f"one log warning ({len(warns)})", warns)
    n, _ = resource_samples(segs)
    ev = stopped_events(segs)
    res = [e for e in ev if e.get("kind") == "process_resources"]
    tap.ok(n == 0 and len(res) == 1 and res[0].get("errno") == 13 and res[0].get("reason") == "Permission denied",
           f"the trace says why it has no resource samples ({n} samples): {res}", ev)
    rep = subprocess.run([D9CTL, "report", *segs], capture_output=True, text=True, timeout=120)
    tap.ok(rep.returncode == 0 and "process resources: d9d stopped sampling them: Permission denied" in rep.stdout,
           "d9ctl report says it", rep.stdout + rep.stderr)


tap = Tap(6 if WITHOUT_DAC else 19)
if os.geteuid() != 0:
    tap.bail("must run as root: it runs d9d under another uid with setpriv")
bounding, ambient = unit_caps()
if WITHOUT_DAC:
    bounding = [c for c in bounding if c != "CAP_DAC_READ_SEARCH"]
    ambient = [c for c in ambient if c != "CAP_DAC_READ_SEARCH"]
else:
    tap.ok(set(bounding) == set(ambient) and "CAP_SYS_ADMIN" not in bounding,
           "the unit grants the same capabilities it bounds, without CAP_SYS_ADMIN", (bounding, ambient))
tap.diag("capabilities: " + " ".join(bounding))
# Not under /tmp or /var/tmp (d9d's private ones hide them), nor under a build
# directory that may itself live in /tmp.
tmp = tempfile.mkdtemp(prefix="d9-caps-", dir="/run")
os.chmod(tmp, 0o755)
run = os.path.join(tmp, "run")
os.mkdir(run)
os.chown(run, NOBODY, NOBODY)
sock = os.path.join(run, "control.sock")
log = open(os.path.join(tmp, "d9d.log"), "w+")
plus = as_setpriv(bounding)
private_tmp = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
               'mount -t tmpfs -o mode=1777 tmpfs /tmp && mount -t tmpfs -o mode=1777 tmpfs /var/tmp && exec "$@"',
               "sh"]
d9d = subprocess.Popen(private_tmp + ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        f"--inh-caps=-all,{plus}", f"--ambient-caps=-all,{as_setpriv(ambient)}",
                        f"--bounding-set=-all,{plus}",
                        D9D, "--foreground", "--config", "/dev/null", "--state-dir", os.path.join(run, "state"),
                        "--socket", sock], stdout=log, stderr=subprocess.STDOUT)
for _ in range(150):
    if os.path.exists(sock) or d9d.poll() is not None:
        break
    time.sleep(0.1)
log.seek(0)
start_log = log.read()
if not tap.ok(os.path.exists(sock) and not re.search(r"preflight: \w+: FATAL", start_log),
              "d9d starts as an unprivileged uid with the unit's capabilities, no fatal preflight finding",
              start_log):
    d9d.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    tap.bail("d9d did not start")

try:
    if WITHOUT_DAC:
        record_without_dac(tap, sock, log, os.path.join(tmp, "nodac"))
    else:
        record(tap, sock, NOBODY, "target with d9d's uid", os.path.join(tmp, "same"))
        record(tap, sock, 0, "target of another uid (root)", os.path.join(tmp, "other"))
        record(tap, sock, 4242, "non-dumpable target of another uid", os.path.join(tmp, "nondump"), nondumpable=True)
        # An executable only its owner may read, in a directory only its owner
        # may enter (a 0700 home): CAP_DAC_READ_SEARCH is what lets d9d read it.
        private = os.path.join(tmp, "home")
        os.mkdir(private, 0o700)
        exe = os.path.join(private, os.path.basename(TARGET))
        shutil.copy(TARGET, exe)
        os.chmod(exe, 0o700)
        record(tap, sock, 0, "root target run from a private 0700 directory", os.path.join(tmp, "private"), exe)
        # A target under the real /tmp, which d9d's private /tmp hides.
        # It runs as d9d's uid so that only the mount namespace is in question.
        host_tmp = tempfile.mkdtemp(prefix="d9-hidden-", dir="/tmp")
        os.chmod(host_tmp, 0o755)
        try:
            exe = os.path.join(host_tmp, os.path.basename(TARGET))
            shutil.copy(TARGET, exe)
            record(tap, sock, NOBODY, "target run from a /tmp that d9d cannot see", os.path.join(tmp, "hidden"), exe)
        finally:
            shutil.rmtree(host_tmp, ignore_errors=True)
finally:
    d9d.send_signal(signal.SIGTERM)
    try:
        d9d.wait(timeout=30)
    except subprocess.TimeoutExpired:
        d9d.kill()
    log.seek(0)
    tap.diag("d9d log tail:\n" + "\n".join(log.read().splitlines()[-12:]))
    shutil.rmtree(tmp, ignore_errors=True)
tap.done()
