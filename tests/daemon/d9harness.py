"""Shared helpers for the daemon and e2e tests: run a real d9d with a temp
state dir and socket, drive it with the real d9ctl, run real Tokio targets,
decode segments with `d9ctl dump`, and print TAP."""
import collections
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import Tap  # noqa: E402,F401  (the tests import it from here)


def unit_nice():
    """The Nice= of systemd/d9d.service.in (0 when it sets none)."""
    unit = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "systemd", "d9d.service.in")
    with open(unit) as f:
        m = re.search(r"^Nice=(-?\d+)$", f.read(), re.M)
    return int(m.group(1)) if m else 0


def _die_with_parent():
    """A test killed by its timeout must not leave its d9d (and its BPF
    programs) running into the next tests: SIGTERM it when the test dies."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class D9d:
    """A d9d process private to one test."""

    def __init__(self, d9d, d9ctl, settings=None, state=None, conf=None, wrap=()):
        """conf: d9d.conf text (keys that repeat, such as attach); else none.
        wrap: a command d9d runs under (strace -D ..., keeping d9d's pid)."""
        self.d9d, self.d9ctl = d9d, d9ctl
        self.wrap = list(wrap)
        self.tmp = state or tempfile.mkdtemp(prefix="d9d-test-")
        os.chmod(self.tmp, 0o755)
        self.sock = os.path.join(self.tmp, "control.sock")
        self.logpath = os.path.join(self.tmp, "d9d.log")
        self.settings = dict(settings or {})
        self.proc = None
        self.conf = "/dev/null"
        if conf is not None:
            self.conf = os.path.join(self.tmp, "d9d.conf")
            with open(self.conf, "w") as f:
                f.write(conf)

    def start(self):
        args = self.wrap + [self.d9d, "--config", self.conf, "--state-dir", self.tmp, "--socket", self.sock,
                            "--foreground"]
        # d9d at the unit's Nice=, as it runs in production; D9_TEST_D9D_NICE
        # overrides it for measurements (docs/performance.md).
        nice = os.environ.get("D9_TEST_D9D_NICE", str(unit_nice()))
        if nice != "0":
            args = ["nice", "-n", nice] + args
        for k, v in self.settings.items():
            args += ["--set", f"{k}={v}"]
        self.log = open(self.logpath, "a")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        # d9d loads its BPF before it listens: 4-6 s at load 12 on this
        # 2-core VM, more than 15 s at load 22-27 (every start of
        # test_symbolize_later.py bailed there, with nothing logged yet).
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("d9d exited at start:\n" + self.logtext())
            if os.path.exists(self.sock) and self.ctl("list").returncode == 0:
                return self
            time.sleep(0.1)
        raise RuntimeError("d9d did not come up:\n" + self.logtext())

    def start_or_bail(self, tap):
        """start(), ending the TAP run with a Bail out! if d9d does not come up."""
        try:
            return self.start()
        except RuntimeError as e:
            tap.bail(str(e))

    def logtext(self):
        with open(self.logpath) as f:
            return f.read()

    def ctl(self, *args, timeout=120, user=None):
        cmd = [self.d9ctl, "--socket", self.sock, *args]
        if user is not None:
            cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    def status(self, pid=None):
        args = ["status", "--json"] + (["--pid", str(pid)] if pid else [])
        r = self.ctl(*args)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def target_status_with_uprobes(self, pid, wait_s=2.0):
        """pid's entry in status, once it says how many uprobes are
        attached: status leaves uprobes_attached out while d9d's BPF thread
        changes the target's links, which the full set's sampled wakes do
        twice every 2.5 s. Read at one instant, a check of that count
        failed when the instant fell inside such a change."""
        def entry():
            return ((self.status(pid) or {}).get("targets") or [{}])[0]

        def with_count():
            e = entry()
            return e if "uprobes_attached" in e.get("probe_plan", {}) else None
        return wait_for(with_count, wait_s, step=0.02) or entry()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def cleanup(self, keep=False):
        self.stop()
        if not keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
            # The traces a test had recorded into (d.out), if it set one.
            if getattr(self, "out", None):
                shutil.rmtree(self.out, ignore_errors=True)

    def raw_request(self, data, timeout=10):
        """Send raw bytes on one connection; return the response lines."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(self.sock)
        s.sendall(data)
        buf = b""
        want = data.count(b"\n")
        try:
            while buf.count(b"\n") < want:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        finally:
            s.close()
        return [json.loads(line) for line in buf.decode().splitlines() if line.strip()]


def exec_done(pid, timeout=10):
    """Wait until pid's exec has returned to user space. Popen returns once
    the child has left the parent's memory, inside execve and before the
    kernel's sched_process_exec event: an attach in that window (seen once
    on a loaded CI machine, 0.3 s after Popen) saw the target's own exec
    and ended the recording. A process runs its own code once the dynamic
    linker mapped libc, or it started a second thread (a static build)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if len(os.listdir(f"/proc/{pid}/task")) > 1:
                return True
            with open(f"/proc/{pid}/maps") as f:
                maps = f.read()
            if "/libc." in maps or "/libc-" in maps:
                return True
            # A static single-threaded program: blocked in a syscall of its own.
            with open(f"/proc/{pid}/syscall") as f:
                call = f.read().split(" ", 1)[0]
            if call not in ("59", "322", "running"):  # execve, execveat
                return True
        except OSError:
            return False
        time.sleep(0.01)
    return False


def start_slow_plan_d9d(tap, d9d, d9ctl, delay_s):
    """A started d9d whose plans take delay_s on demand: it runs under
    strace, which holds each of its execve calls (the plan child is d9d run
    again) for delay_s before it returns. --seccomp-bpf stops d9d at execve
    only (the drain loop runs at full speed); -D keeps d9d the harness's
    child. Bails out without strace."""
    if not shutil.which("strace"):
        tap.bail("no strace: scripts/bootstrap installs it")
    wrap = ["strace", "-D", "-f", "--seccomp-bpf", "-qq", "-o", "/dev/null", "-e", "trace=execve",
            "-e", f"inject=execve:delay_exit={delay_s * 1000000}"]
    d = D9d(d9d, d9ctl, wrap=wrap)
    d.start_or_bail(tap)
    return d


def start_cpu_hogs(n=2):
    """n busy shells (one per core here): a loaded production machine. They
    die with the test, so one killed by its timeout leaves no CPU hog
    slowing every test after it."""
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"], preexec_fn=_die_with_parent) for _ in range(n)]


_STALL_WATCH = r"""
import json, os, sys, time
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
stalls, last = [], time.monotonic_ns()
print("watching", flush=True)
try:
    while True:
        time.sleep(0.002)
        now = time.monotonic_ns()
        if now - last > 20_000_000:
            stalls.append((last, now))
        last = now
except KeyboardInterrupt:
    print(json.dumps(stalls), flush=True)
"""


class StallWatch:
    """Times when the whole machine stopped: a real-time (SCHED_FIFO)
    process that wakes every 2 ms, so no process of the test's or d9d's
    (all SCHED_OTHER) can hold it off a core; a wake over 20 ms late means
    no core ran anything for that long (this VM's vCPUs paused: CI run 46
    saw every process, the target's 11 ms timer too, stop for 130 ms).
    Tests that hold d9d to a wall-clock schedule excuse exactly that time."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _STALL_WATCH], stdout=subprocess.PIPE,
                                     text=True, preexec_fn=_die_with_parent)
        self.proc.stdout.readline()
        self.stalls = None

    def stop(self):
        """The stalls seen, as (start_ns, end_ns) on CLOCK_MONOTONIC."""
        if self.stalls is None:
            self.proc.send_signal(signal.SIGINT)
            out, _ = self.proc.communicate(timeout=10)
            self.stalls = [tuple(s) for s in json.loads(out or "[]")]
        return self.stalls

    def stalled_ns(self, lo, hi):
        """How long the machine stood still between lo and hi."""
        return sum(max(0, min(b, hi) - max(a, lo)) for a, b in self.stop())


def stop_procs(procs):
    """Kill and reap each process (a hog, a target)."""
    for p in procs:
        p.kill()
        p.wait()


def start_target(binary, *args, stdout=subprocess.PIPE):
    proc = subprocess.Popen([binary, *args], stdout=stdout, stderr=subprocess.DEVNULL, text=True)
    exec_done(proc.pid)
    return proc


def start_loaded_server(binary, procs):
    """The target's `server` on a loopback port under its own `load` (8
    connections, 25 s), both appended to procs; returns the server."""
    srv = start_target(binary, "server", "--listen", "127.0.0.1:0", "--duration", "30")
    procs.append(srv)
    addr = srv.stdout.readline().split()[1]
    procs.append(subprocess.Popen([binary, "load", "--connect", addr, "--conns", "8", "--duration", "25"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return srv


def target_truth(proc, timeout=60):
    out, _ = proc.communicate(timeout=timeout)
    for line in out.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return None


class LspServer:
    """A language server on stdio (argv, in root) and a client of it:
    requests, and the answers' times, errors and results."""

    def __init__(self, argv, root, env=None):
        self.err = open(os.path.join(root, "server.err"), "wb")
        self.proc = subprocess.Popen(argv, cwd=root, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err)
        exec_done(self.proc.pid)
        self.lock, self.next_id = threading.Lock(), 0
        self.answers = {}  # id -> (time, error or None, result)
        self.cond = threading.Condition()
        threading.Thread(target=self.reader, daemon=True).start()

    def send(self, obj):
        b = json.dumps(obj).encode()
        with self.lock:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(b) + b)
            self.proc.stdin.flush()

    def reader(self):
        f = self.proc.stdout
        while True:
            n = None
            while True:
                line = f.readline()
                if not line:
                    return
                if not line.strip():
                    break
                k, v = line.decode().split(":", 1)
                if k.strip().lower() == "content-length":
                    n = int(v)
            msg = json.loads(f.read(n))
            if "method" in msg and "id" in msg:  # a request of the server's own
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            elif "id" in msg:
                with self.cond:
                    self.answers[msg["id"]] = (time.monotonic(), msg.get("error"), msg.get("result"))
                    self.cond.notify_all()

    def request(self, method, params, timeout=30):
        """The answer (time, error, result), or None after timeout."""
        with self.cond:
            self.next_id += 1
            i = self.next_id
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        with self.cond:
            self.cond.wait_for(lambda: i in self.answers or self.proc.poll() is not None, timeout)
            return self.answers.get(i)

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def stop(self):
        try:
            self.request("shutdown", None, timeout=3)
            self.notify("exit", None)
            self.proc.wait(timeout=3)
        except Exception:  # noqa: BLE001 (a server gone already, a full pipe)
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()


def dump_summary(d9ctl, path, strict=True):
    """(ok, {event name: count}, text) from `d9ctl dump --summary`."""
    args = [d9ctl, "dump", "--summary"] + (["--strict"] if strict else []) + [path]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    counts = {}
    in_events = False
    for line in r.stdout.splitlines():
        if line.startswith("events:"):
            in_events = True
            continue
        m = re.match(r"\s+(\d+)\s+(\S+)$", line)
        if in_events and m:
            counts[m.group(2)] = counts.get(m.group(2), 0) + int(m.group(1))
        elif in_events and not line.startswith(" "):
            in_events = False
    return r.returncode == 0, counts, r.stdout + r.stderr


def dump_json_lines(d9ctl, path):
    r = subprocess.run([d9ctl, "dump", "--json", path], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout


def dump_events(d9ctl, paths):
    """Every event of the segments, in order, as dump --json gives them."""
    for p in paths:
        _, out = dump_json_lines(d9ctl, p)
        for line in out.splitlines():
            if line.startswith("{"):
                yield json.loads(line)


def symbol_names(evs):
    """{address: name} from the SymbolTableEntry events among evs (the
    address as dump --json gives it, hex text or a number)."""
    names = {}
    for ev in evs:
        if ev["event"] == "SymbolTableEntry":
            f = ev["fields"]
            names[int(f["addr"], 16) if isinstance(f["addr"], str) else f["addr"]] = f["symbol_name"]
    return names


def sample_chains(d9ctl, path, source):
    """(rc, [callchain as ints], {addr: name}) of the segment's CpuSampleEvents
    of one source (0 = on CPU, 1 = off CPU)."""
    rc, out = dump_json_lines(d9ctl, path)
    syms, chains = {}, []
    for line in out.splitlines():
        if line.startswith('{"event":"SymbolTableEntry"'):
            f = json.loads(line)["fields"]
            syms[int(f["addr"], 16) if isinstance(f["addr"], str) else f["addr"]] = f["symbol_name"]
        elif line.startswith('{"event":"CpuSampleEvent"'):
            f = json.loads(line)["fields"]
            if f["source"] == source:
                chains.append([int(a, 16) for a in f.get("callchain") or []])
    return rc, chains, syms


def outer_frame_names(d9ctl, paths):
    """Counter of the outermost frame's name of every CpuSampleEvent (both
    sources) in the segments: where stacks end, a mark saying why if cut."""
    names = collections.Counter()
    for p in paths:
        for source in (0, 1):
            _, chains, syms = sample_chains(d9ctl, p, source)
            names.update(syms.get(ch[-1], "") for ch in chains if ch)
    return names


def report_missing(d9ctl, paths):
    """(`d9ctl report --json`'s "missing" object, the text report's "Not in
    the trace" line) of the segments; ({}, "") where either failed."""
    rep = subprocess.run([d9ctl, "report", "--json"] + paths, capture_output=True, text=True, timeout=120)
    missing = json.loads(rep.stdout).get("missing", {}) if rep.returncode == 0 else {}
    txt = subprocess.run([d9ctl, "report"] + paths, capture_output=True, text=True, timeout=120).stdout
    return missing, next((x for x in txt.splitlines() if x.startswith("Not in the trace")), "")


def metadata_of(d9ctl, path):
    """The segment's latest SegmentMetadataEvent entries (later ones restate
    runtime.<name> once workers are known)."""
    rc, out = dump_json_lines(d9ctl, path)
    meta = None
    for line in out.splitlines():
        if '"SegmentMetadataEvent"' in line:
            meta = json.loads(line)["fields"]["entries"]
    return meta


def bpf_links_of(pid):
    """[(link type, program id)] of the BPF links pid holds open, from its
    fdinfo (bpftool's own "pids" needs a build with its pid iterator)."""
    links = []
    fdinfo = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fdinfo):
        try:
            with open(os.path.join(fdinfo, fd)) as f:
                fields = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except OSError:
            continue
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "link_type" in fields and "prog_id" in fields:
            links.append((fields["link_type"], int(fields["prog_id"])))
    return links


def bpf_prog_names():
    """{program id: name} of every BPF program loaded on the machine."""
    r = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, timeout=30)
    if r.returncode:
        raise RuntimeError("bpftool prog show failed: " + r.stderr)
    return {p["id"]: p.get("name", "") for p in json.loads(r.stdout or "[]")}


def wait_for(cond, timeout, step=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return cond()


def free_port():
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving(port, timeout=30):
    """Whether something accepts connections on 127.0.0.1:port within timeout."""
    def accepts():
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            return False
    return wait_for(accepts, timeout, 0.1)


def sealed_files(root):
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if re.match(r"trace\.\d+\.bin(\.zst|\.gz)?$", f):
                out.append(os.path.join(dirpath, f))
    return sorted(out)


def active_files(root):
    out = []
    for dirpath, _, files in os.walk(root):
        out += [os.path.join(dirpath, f) for f in files if f.endswith(".active")]
    return sorted(out)


# Opens CONNS non-blocking connections to 127.0.0.1:PORT and holds them:
# those the listener's accept queue cannot take stay in SYN retry.
_FLOOD = r"""
import socket, sys, time
conns = []
for _ in range(int(sys.argv[2])):
    host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setblocking(False)
    try:
        s.connect((host, int(sys.argv[1])))
    except BlockingIOError:
        pass
    conns.append(s)
print("flooding", flush=True)
time.sleep(60)
"""


def start_backlog_target(binary, backlog, netns=False, extra=()):
    """d9-target backlog (accepts only after an 'accept' line on stdin), in
    a network namespace of its own if netns. Returns (proc, port or None)."""
    argv = [binary, "backlog", "--backlog", str(backlog), *extra]
    if netns:
        argv = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', *argv]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.match(r"listening (?:127\.0\.0\.1|\[::1\]):(\d+)", p.stdout.readline())
    return p, int(m.group(1)) if m else None


def start_flood(pid, port, conns, netns=False, host="127.0.0.1"):
    """A process holding conns connections to the target's port on host
    (from inside the target's network namespace if netns), started once they
    are open."""
    argv = [sys.executable, "-c", _FLOOD, str(port), str(conns), host]
    if netns:
        argv = ["nsenter", "-t", str(pid), "-n", *argv]
    f = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    f.stdout.readline()
    return f
