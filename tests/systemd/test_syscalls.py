#!/usr/bin/env python3
"""d9d.service's SystemCallFilter= allow list covers what d9d really does:
run the real d9d under strace while it starts (preflight, BPF load), records
a real Tokio target with `d9ctl record`, seals and stops on SIGTERM; every
system call it made must be allowed by the unit's filter, expanded with
`systemd-analyze syscall-filter` exactly as systemd would. Run under
tests/s3/swift-harness (D9_S3_* set), d9d also ships the segments to a real
S3 endpoint on loopback, so libcurl's calls are covered too."""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdtest import SOURCE_ROOT, Tap  # noqa: E402

D9D, D9CTL, TARGET = sys.argv[1:4]
_groups = {}


def expand(item):
    """Syscall names of one filter item (a name or a @group, recursively)."""
    if not item.startswith("@"):
        return {item}
    if item not in _groups:
        out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager", item],
                             capture_output=True, text=True, timeout=30).stdout
        names = set()
        for line in out.splitlines()[1:]:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            names |= expand(line.split()[0])
        _groups[item] = names
    return _groups[item]


def unit_allowed():
    """Allowed syscalls per the unit's SystemCallFilter= lines, in order."""
    with open(os.path.join(SOURCE_ROOT, "systemd/d9d.service.in")) as f:
        lines = re.findall(r"^SystemCallFilter=(.*)$", f.read(), re.M)
    allowed = set()
    for value in lines:
        deny = value.startswith("~")
        items = set().union(*(expand(i) for i in value.lstrip("~").split()))
        allowed = allowed - items if deny else allowed | items
    return lines, allowed


S3 = os.environ.get("D9_S3_ENDPOINT")
tap = Tap(10 if S3 else 9)
lines, allowed = unit_allowed()
tap.ok(lines and not lines[0].startswith("~") and "bpf" in allowed and "perf_event_open" in allowed,
       f"the unit has an allow list ({len(allowed)} syscalls) with bpf and perf_event_open", lines)

tmp = tempfile.TemporaryDirectory(prefix="d9-syscalls-")
trace = os.path.join(tmp.name, "strace.out")
sock = os.path.join(tmp.name, "control.sock")
def loopback_name(endpoint):
    """The endpoint with the host name instead of 127.0.0.1 when that name
    resolves to loopback only, so d9d goes through getaddrinfo() as with a
    real S3 host name, yet never leaves the machine."""
    name = socket.gethostname()
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(name, None)}
    except OSError:
        return endpoint
    return endpoint.replace("127.0.0.1", name) if addrs and all(a.startswith("127.") for a in addrs) else endpoint


s3_args = []
if S3:
    s3_args = [f"--set={k}={v}" for k, v in (
        ("s3_bucket", "d9-syscalls"), ("s3_endpoint", loopback_name(S3)), ("s3_region", os.environ["D9_S3_REGION"]),
        ("s3_access_key_id", os.environ["D9_S3_ACCESS_KEY"]),
        ("s3_secret_access_key", os.environ["D9_S3_SECRET_KEY"]))]
strace = subprocess.Popen(["strace", "-f", "-qq", "-o", trace, D9D, "--foreground", "--config", "/dev/null",
                           "--state-dir", os.path.join(tmp.name, "state"), "--socket", sock, *s3_args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
for _ in range(300):
    if os.path.exists(sock):
        break
    time.sleep(0.1)
target = subprocess.Popen([TARGET, "mixed", "--duration", "8"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
time.sleep(0.5)
r = subprocess.run([D9CTL, "--socket", sock, "record", "--probes", "all", "--pid", str(target.pid), "--duration", "2s",
                    "--out", os.path.join(tmp.name, "out")], capture_output=True, text=True, timeout=90)
target.kill()
target.wait()
tap.ok(r.returncode == 0 and r.stdout.strip(), "d9d under strace records a real Tokio target", r.stdout + r.stderr)
if S3:
    # A job file per sealed segment stays until S3 confirmed the upload.
    ship = os.path.join(tmp.name, "state", "ship")
    for _ in range(300):
        pending = [f for f in os.listdir(ship) if f.endswith(".job")] if os.path.isdir(ship) else ["?"]
        if not pending:
            break
        time.sleep(0.1)
    tap.ok(not pending, "every sealed segment was uploaded to S3 (no pending job left)", pending)

children = subprocess.run(["pgrep", "-P", str(strace.pid)], capture_output=True, text=True).stdout.split()
for pid in children:
    os.kill(int(pid), signal.SIGTERM)
try:
    strace.wait(timeout=60)
except subprocess.TimeoutExpired:
    strace.kill()
    strace.wait()
err = strace.stderr.read()
tap.ok(len(children) == 1 and strace.returncode == 0, "d9d stops cleanly on SIGTERM", err)

def whole_calls(text):
    """strace -f's lines with each call on one line: a call another thread's
    line interrupted ("<unfinished ...>") joined to its "<... resumed>" rest.
    Left split, an unfinished read-only openat ran into the next lines, whose
    O_RDWR the write pattern then took for its flags (a CI run under load:
    "written elsewhere: libsasl2.so.2", opened read-only by libcurl)."""
    held, out = {}, []
    for line in text.splitlines():
        pid, _, call = line.partition(" ")
        call = call.lstrip()
        if call.endswith("<unfinished ...>"):
            held[pid] = call[:-len("<unfinished ...>")].rstrip()
            continue
        m = re.match(r"<\.\.\. \w+ resumed>\s?(.*)", call)
        if m and pid in held:
            call = held.pop(pid) + m.group(1)
        out.append(f"{pid} {call}")
    return "\n".join(out + [f"{pid} {call}" for pid, call in held.items()])


with open(trace) as f:
    strace_text = whole_calls(f.read())
    used = {}
    for m in re.finditer(r"^\d+\s+(\w+)\(", strace_text, re.M):
        used[m.group(1)] = used.get(m.group(1), 0) + 1
# execve is strace starting d9d: systemd's own exec, not d9d's.
used.pop("execve", None)
tap.diag("syscalls made: " + " ".join(f"{k}:{v}" for k, v in sorted(used.items(), key=lambda kv: -kv[1])))
tap.ok({"bpf", "perf_event_open", "epoll_wait"} <= set(used),
       "the trace covers BPF load/attach and the drain loop", sorted(used))
denied = sorted(set(used) - allowed)
tap.ok(not denied, "every syscall d9d made is allowed by the unit's SystemCallFilter=",
       "denied: " + " ".join(denied))

# ProtectSystem=strict leaves d9d only its state and runtime directories
# (here: the temporary dir holding --state-dir and --socket) to write to.
WRITES = re.compile(r'^\d+\s+(?:openat\(AT_FDCWD, "([^"]+)", [^)\n]*O_(?:WRONLY|RDWR|CREAT)[^)\n]*\)'
                    r'|(?:mkdir|unlink|rmdir|chmod|rename|bind)\((?:\d+, \{sa_family=AF_UNIX, sun_path=)?"([^"]+)")'
                    r'.*= (\d+)', re.M)
written = {m.group(1) or m.group(2) for m in WRITES.finditer(strace_text)}
outside = sorted(p for p in written
                 if not p.startswith(tmp.name + "/") and not re.match(r"/proc/(self|thread-self|\d+)/", p))
tap.ok(any(".bin.active" in p for p in written) and not outside, "d9d writes only under its state and socket directories (ProtectSystem=strict)",
       "written elsewhere: " + " ".join(outside))

# The other seccomp-enforced options, checked against what d9d really did.
calls = re.findall(r"^\d+\s+(\w+)\((.*)$", strace_text, re.M)
wx = [f"{n}({a[:80]}" for n, a in calls
      if (n == "mmap" and "PROT_WRITE" in a and "PROT_EXEC" in a)
      or (n in ("mprotect", "pkey_mprotect") and "PROT_EXEC" in a)]
tap.ok(not wx, "MemoryDenyWriteExecute=yes holds: no writable+executable or mprotect(PROT_EXEC) mapping", wx)
families = sorted({m for n, a in calls if n in ("socket", "socketpair") for m in re.findall(r"^(AF_\w+)", a)})
tap.ok(set(families) <= {"AF_UNIX", "AF_INET", "AF_INET6"},
       f"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 holds (used: {' '.join(families)})", families)
ns = [f"{n}({a[:80]}" for n, a in calls
      if n in ("unshare", "setns", "personality") or (n.startswith("clone") and "CLONE_NEW" in a)
      or (n in ("sched_setscheduler", "sched_setattr") and re.search(r"SCHED_(FIFO|RR|DEADLINE)", a))]
tap.ok(not ns, "RestrictNamespaces, LockPersonality and RestrictRealtime hold: none of their calls made", ns)
tap.done()
