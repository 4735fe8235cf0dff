#!/usr/bin/env python3
"""d9ctl as an SRE uses it, driving the real d9ctl and d9d against real Tokio
targets (issue 19).
Usage: test_ctl.py D9D D9CTL TARGET STRIPPED MAN_PAGE MODE
MODE: help | list-status | record | follow | serve-dump"""
import json
import os
import pty
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap, dump_summary, free_port, start_target, wait_for  # noqa: E402

D9D, D9CTL, TARGET, STRIPPED, MAN_PAGE, MODE = sys.argv[1:7]
COMMANDS = ["attach", "detach", "list", "status", "record", "plan", "report", "export", "symbolize", "dump", "serve", "help"]


def ctl(*args, timeout=60, env=None):
    return subprocess.run([D9CTL, *args], capture_output=True, text=True, timeout=timeout, env=env)


def one_line(r):
    return len(r.stderr.strip().splitlines()) == 1


def man_sections(man):
    """{command: its text in COMMANDS}: a section starts at a line '*cmd* ...'."""
    body = man.split("# COMMANDS", 1)[1].split("\n# ", 1)[0]
    out, cur = {}, None
    for ln in body.splitlines():
        m = re.match(r"\*([a-z]+)\*", ln)
        if m:
            cur = m.group(1)
        if cur:
            out[cur] = out.get(cur, "") + ln + "\n"
    return out


def help_mode(t):
    man = man_sections(open(MAN_PAGE).read())
    top = ctl("--help")
    t.ok(top.returncode == 0 and top.stdout.startswith("usage: d9ctl") and not top.stderr,
         "d9ctl --help: usage on stdout, exit 0", top.stdout + top.stderr)
    for must in ["--offcpu-min", "D9_SOCKET", "/run/d9d/control.sock", "--socket"]:
        t.ok(must in top.stdout, f"d9ctl --help mentions {must}", top.stdout)
    t.ok(all(re.search(rf"^  {c} ", top.stdout, re.M) for c in COMMANDS), "d9ctl --help lists every command",
         top.stdout)
    t.ok(ctl("help").stdout == top.stdout, "d9ctl help is d9ctl --help")
    for c in COMMANDS:
        r = ctl(c, "--help")
        t.ok(r.returncode == 0 and r.stdout.startswith(f"usage: d9ctl {c}") and not r.stderr,
             f"d9ctl {c} --help: its usage on stdout, exit 0", r.stdout + r.stderr)
        h = ctl("help", c)
        t.ok(h.returncode == 0 and h.stdout == r.stdout, f"d9ctl help {c} prints the same usage")
        # The man page documents every option the usage names.
        opts = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", r.stdout)) - {"--help"}
        missing = sorted(o for o in opts if f"*{o}*" not in man.get(c, ""))
        t.ok(not missing, f"man page d9ctl(1) covers {c}'s options {sorted(opts)}", f"missing: {missing}")
    r = ctl("status", "--pid", "1", "-h")
    t.ok(r.returncode == 0 and r.stdout.startswith("usage: d9ctl status"), "-h after other options is help too")
    r = ctl("help", "bogus")
    t.ok(r.returncode == 2 and one_line(r) and "bogus" in r.stderr, "d9ctl help bogus: one line, exit 2", r.stderr)
    r = ctl("list", "--bogus")
    t.ok(r.returncode == 2 and one_line(r) and "--bogus" in r.stderr, "unknown option: one line naming it, exit 2",
         r.stderr)
    # `record -- CMD --help` is CMD's option, not d9ctl's.
    r = ctl("--socket", "/nonexistent/sock", "record", "--", "/bin/true", "--help")
    t.ok(r.returncode != 0 and "usage:" not in r.stdout, "--help after -- goes to the command", r.stdout)


def live_pids(d, *extra):
    r = d.ctl("list", "--json", *extra)
    return [x["pid"] for x in json.loads(r.stdout)] if r.returncode == 0 else None


def list_status_mode(t):
    d = D9d(D9D, D9CTL, {"finished_keep": "4s"}).start_or_bail(t)
    tgt = None
    try:
        r = d.ctl("list")
        t.ok(r.returncode == 0 and "no target is being traced" in r.stdout, "list with nothing traced says so",
             r.stdout)
        tgt = start_target(TARGET, "mixed", "--duration", "15", stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        r = d.ctl("attach", "--pid", str(tgt.pid))
        t.ok(r.returncode == 0, "attach to a running target", r.stderr)
        r = d.ctl("list")
        row = [ln for ln in r.stdout.splitlines() if ln.startswith(str(tgt.pid))]
        t.ok(r.returncode == 0 and row and "recording" in row[0] and "/traces/" in row[0],
             "list shows the live target with its folder", r.stdout)
        t.ok(r.stdout.splitlines()[0].split()[:8] ==
             ["PID", "STATE", "SERVICE", "STARTED", "DURATION", "EVENTS", "DROPS", "SEGMENTS"],
             "list columns: pid, state, service, start, duration, events, drops, segments folder", r.stdout)
        time.sleep(2)
        r = d.ctl("status")
        t.ok(r.returncode == 0 and "events/s" in r.stdout and "attached:" not in r.stdout
             and len(r.stdout.splitlines()) <= 6, "status is short: a few lines, no probe plan", r.stdout)
        v = d.ctl("status", "--verbose")
        t.ok(v.returncode == 0 and "attached:" in v.stdout and "probes:" in v.stdout,
             "status --verbose prints the probe plan", v.stdout)
        j = d.status(tgt.pid)
        t.ok(j and j["targets"][0].get("probe_plan", {}).get("attached"), "status --json carries the plan")
        st = j["targets"][0].get("stacks", {}) if j else {}
        line = [ln for ln in v.stdout.splitlines() if ln.strip().startswith("stacks:")]
        words = line[0].replace(",", " ").replace(";", " ").replace("(", " ").split() if line else []
        t.ok(line and st.get("unwound", 0) > 0 and words[1].isdigit() and int(words[1]) <= st["unwound"]
             and "cut:" in words and "deep" in words,
             f"status --verbose says what became of the stacks (unwound, failed, cut and why, deep copies): "
             f"{line} against --json's {st}", v.stdout)
        r = d.ctl("detach", "--pid", str(tgt.pid))
        finished_at = time.time()  # the session ends (and its keep time starts) during detach
        t.ok(r.returncode == 0, "detach", r.stderr)
        wait_for(lambda: (d.status(tgt.pid) or {"targets": [{}]})["targets"][0].get("state") == "done", 20)
        t.ok(live_pids(d) == [], "list hides the finished session", d.ctl("list").stdout)
        r = d.ctl("list")
        t.ok("1 finished session" in r.stdout and "list --all" in r.stdout, "list says finished ones exist",
             r.stdout)
        rows = json.loads(d.ctl("list", "--all", "--json").stdout)
        row = rows[0] if rows else {}
        t.ok(row.get("pid") == tgt.pid and row.get("state") == "done" and row.get("events", 0) > 0
             and row.get("drops") == 0 and 1500 <= row.get("duration_ms", 0) < 20000
             and abs(row.get("started_unix_ms", 0) / 1000 - time.time()) < 60 and row.get("dir"),
             "list --all: finished session with start, duration, events, drops and folder", row)
        txt = d.ctl("list", "--all").stdout
        t.ok(re.search(rf"^{tgt.pid}\s+done\s+\S+\s+\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\s+\d+\.\ds\s+\d+\s+0\s+/",
                       txt, re.M), "list --all text row: start time, duration, events, drops, folder", txt)
        r = d.ctl("status")
        t.ok(r.returncode == 0 and f"pid {tgt.pid}" not in r.stdout and "1 finished session" in r.stdout,
             "status leaves finished sessions out, says how many", r.stdout)
        for args in (["--pid", str(tgt.pid)], ["--all"]):
            r = d.ctl("status", *args)
            t.ok(r.returncode == 0 and f"pid {tgt.pid} " in r.stdout and "done" in r.stdout
                 and "events/s" not in r.stdout, f"status {' '.join(args)}: the finished session, no events/s",
                 r.stdout)
        t.ok("events_per_s" not in d.status(tgt.pid)["targets"][0], "status --json: no rate once finished")
        r = d.ctl("status", "--pid", "999999")
        t.ok(r.returncode == 1 and one_line(r) and "999999" in r.stderr and not r.stdout,
             "status --pid of an untraced pid: one line naming it, exit 1", r.stdout + r.stderr)
        r = d.ctl("detach", "--pid", "999999")
        t.ok(r.returncode == 1 and one_line(r) and "999999" in r.stderr, "detach of an untraced pid: error")
        gone = wait_for(lambda: live_pids(d, "--all") == [], 15)
        age = time.time() - finished_at
        t.ok(gone and 3.5 <= age < 8, f"finished sessions age out after finished_keep=4s ({age:.1f} s)",
             d.ctl("list", "--all").stdout)
        r = d.ctl("status", "--pid", str(tgt.pid))
        t.ok(r.returncode == 1, "status --pid of an aged-out session is an error")
    finally:
        if tgt and tgt.poll() is None:
            tgt.kill()
            tgt.wait()
        d.cleanup(keep=t.failed > 0)


def run_on_pty(args, timeout=60):
    """Run with stderr on a terminal; return (rc, stdout, stderr bytes)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    err = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        rd, _, _ = select.select([master], [], [], 0.5)
        if rd:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
        elif p.poll() is not None:
            break
    out = p.stdout.read().decode()
    p.wait(timeout=10)
    os.close(master)
    return p.returncode, out, err.decode(errors="replace")


def record_mode(t):
    d = D9d(D9D, D9CTL).start_or_bail(t)
    tmp = tempfile.mkdtemp(prefix="d9-ctl-rec-")
    tgt = None
    try:
        out = os.path.join(tmp, "out")
        tgt = start_target(TARGET, "mixed", "--duration", "8", stdout=subprocess.DEVNULL)
        r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "5s", "--out", out)
        lines = r.stderr.splitlines()
        t.ok(r.returncode == 0 and lines and lines[0].startswith(f"d9ctl record: recording pid {tgt.pid}")
             and lines[0].endswith(f"into {out}/d9-target-1.24-release/{tgt.pid}-" + lines[0].split("-")[-1]),
             "the first line names where the trace goes: the --out folder", r.stderr)
        prog = [ln for ln in lines if " left: " in ln]
        t.ok(len(prog) >= 2 and all(re.search(r"recording \d+\.\ds, \d+\.\ds left: \d+ events \(\d+/s\)", ln)
                                    for ln in prog[:-1]) and "\r" not in r.stderr,
             f"not a terminal: plain progress lines with elapsed, remaining and rate ({len(prog)})", r.stderr)
        rates = [int(m.group(1)) for ln in prog[1:] for m in [re.search(r"\((\d+)/s\)", ln)] if m]
        t.ok(rates and max(rates) > 0, f"the rate is measured ({rates})")
        paths = r.stdout.split()
        t.ok(paths and all(re.match(rf"{re.escape(out)}/d9-target-1.24-release/{tgt.pid}-\d+/trace\.\d+\.bin",
                                    p) for p in paths),
             "--out keeps the SERVICE/INSTANCE layout", r.stdout)
        tgt.wait(timeout=30)

        # A terminal gets one line that redraws.
        rc, so, se = run_on_pty([D9CTL, "--socket", d.sock, "record", "--probes", "all", "--duration", "3s", "--",
                                 TARGET, "mixed", "--duration", "6"])
        t.ok(rc == 0 and se.count("\r\x1b[K") >= 3 and re.search(r"\r\x1b\[Kd9ctl record: pid \d+ recording "
                                                                 r"\d+\.\ds, \d+\.\ds left", se),
             f"on a terminal the progress line redraws ({se.count(chr(13))} redraws)", se[-1500:])

        # -- CMD without --duration: until it exits, with its exit status.
        t0 = time.time()
        r = d.ctl("record", "--probes", "all", "--", TARGET, "mixed", "--duration", "3")
        took = time.time() - t0
        t.ok(r.returncode == 0 and r.stdout.split() and 3 <= took < 20 and "target exited" in r.stderr
             and "until the command exits" in r.stderr,
             f"record -- CMD needs no --duration: it runs until CMD exits ({took:.1f} s)", r.stderr)
        r = d.ctl("record", "--probes", "all", "--", TARGET, "mixed", "--duration", "nonsense")
        t.ok(r.returncode == 2 and "exited with status 2" in r.stderr,
             f"record -- CMD returns CMD's exit status (2, got {r.returncode})", r.stderr)
        t0 = time.time()
        r = d.ctl("record", "--probes", "all", "--duration", "2s", "--", TARGET, "mixed", "--duration", "30")
        took = time.time() - t0
        t.ok(r.returncode == 0 and took < 15 and "duration reached" in r.stderr and r.stdout.split(),
             f"--duration with -- CMD stops CMD when reached ({took:.1f} s)", r.stderr)

        # A really stripped build (no debug file beside it): every missing
        # probe kind is warned about before recording starts.
        bare = os.path.join(tmp, "bare", "server-stripped")
        os.makedirs(os.path.dirname(bare))
        shutil.copy(STRIPPED, bare)
        os.chmod(bare, 0o755)
        r = d.ctl("record", "--probes", "park,poll", "--duration", "2s", "--", bare, "mixed", "--duration", "5")
        lines = r.stderr.splitlines()
        warned = {m.group(1) for ln in lines for m in [re.match(r"d9ctl record: warning: no (\S+) probes: .+", ln)] if m}
        plan = json.loads(ctl("plan", "--exe", bare, "--json").stdout or "{}")
        missing = {m["kind"] for m in plan.get("missing", [])}
        first_progress = next((i for i, ln in enumerate(lines) if " left: " in ln), len(lines))
        last_warning = max((i for i, ln in enumerate(lines) if "warning:" in ln), default=len(lines))
        t.ok(r.returncode == 0 and missing and warned == missing and last_warning < first_progress,
             f"record warns up front about every missing probe kind and why ({sorted(warned)} vs plan "
             f"{sorted(missing)})", r.stderr)
        r = ctl("--socket", d.sock, "record", "--pid", "999999", "--duration", "1s")
        t.ok(r.returncode == 1 and one_line(r) and "999999" in r.stderr, "record --pid of no process: one line",
             r.stderr)
    finally:
        if tgt and tgt.poll() is None:
            tgt.kill()
        d.cleanup(keep=t.failed > 0)
        if not t.failed:
            shutil.rmtree(tmp, ignore_errors=True)


def write_exec(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def follow_mode(t):
    d = D9d(D9D, D9CTL).start_or_bail(t)
    tmp = tempfile.mkdtemp(prefix="d9-ctl-follow-")
    os.chmod(tmp, 0o755)
    try:
        # npm's shape: node_modules/.bin/NAME -> a node script that starts
        # the platform package's binary as a child and passes on its status,
        # here after a second of its own work (d9ctl once stopped a launcher
        # still at work when its child had exited, and said 0).
        bindir = os.path.join(tmp, "node_modules", ".bin")
        pkg = os.path.join(tmp, "node_modules", "server-linux-x64", "bin")
        os.makedirs(bindir)
        os.makedirs(pkg)
        shutil.copy(TARGET, os.path.join(pkg, "server"))
        launcher = os.path.join(tmp, "node_modules", "server", "bin", "server.js")
        os.makedirs(os.path.dirname(launcher))
        write_exec(launcher, "#!/usr/bin/env node\n"
                   "const { spawnSync } = require('child_process');\n"
                   "const path = require('path');\n"
                   "const bin = path.join(__dirname, '..', '..', 'server-linux-x64', 'bin', 'server');\n"
                   "const r = spawnSync(bin, process.argv.slice(2), { stdio: 'inherit' });\n"
                   "setTimeout(() => process.exit(r.status === 0 ? 7 : 1), 1000);\n")
        os.symlink("../server/bin/server.js", os.path.join(bindir, "server"))
        npm_bin = os.path.join(bindir, "server")

        r = d.ctl("record", "--probes", "all", "--", npm_bin, "mixed", "--duration", "2")
        t.ok(r.returncode == 1 and one_line(r) and "script" in r.stderr and "--follow-children" in r.stderr,
             "a launcher script without --follow-children: one line suggesting it", r.stderr)
        out = os.path.join(tmp, "out")
        t0 = time.time()
        r = d.ctl("record", "--probes", "all", "--follow-children", "--out", out, "--", npm_bin, "mixed", "--duration", "4")
        took = time.time() - t0
        m = re.search(r"following pid (\d+)", r.stderr)
        paths = r.stdout.split()
        t.ok(m and r.returncode == 7, f"npm launcher: follows its Tokio child and returns the launcher's status 7 "
             f"(got {r.returncode}, {took:.1f} s)", r.stderr)
        ok, counts, text = dump_summary(D9CTL, paths[0]) if paths else (False, {}, "")
        t.ok(ok and counts.get("PollStartEvent", 0) > 100 and all("/server/" in p for p in paths),
             f"the followed child was traced: {counts.get('PollStartEvent', 0)} polls, service 'server'", text)

        # A shell launcher that execs (same pid) ...
        sh_exec = os.path.join(tmp, "run-exec.sh")
        write_exec(sh_exec, f"#!/bin/sh\nsleep 0.3\nexec '{TARGET}' \"$@\"\n")
        r = d.ctl("record", "--probes", "all", "--follow-children", "--", sh_exec, "mixed", "--duration", "3")
        m = re.search(r"following pid (\d+)", r.stderr)
        ok, counts, text = dump_summary(D9CTL, r.stdout.split()[0]) if r.stdout.split() else (False, {}, "")
        t.ok(r.returncode == 0 and ok and counts.get("PollStartEvent", 0) > 100,
             "shell launcher that execs: the exec'd Tokio binary is traced", r.stderr)
        # ... and one that starts it as a child, then fails.
        sh_child = os.path.join(tmp, "run-child.sh")
        write_exec(sh_child, f"#!/bin/sh\n'{TARGET}' \"$@\"\nexit 3\n")
        r = d.ctl("record", "--probes", "all", "--follow-children", "--", sh_child, "mixed", "--duration", "3")
        t.ok(r.returncode == 3 and r.stdout.split() and "target exited" in r.stderr,
             "shell launcher with a child: traced, and record returns the launcher's status 3", r.stderr)
        r = d.ctl("record", "--", "/bin/sh", "-c", "exit 5")
        t.ok(r.returncode == 1 and one_line(r) and "not a Tokio binary" in r.stderr
             and "--follow-children" in r.stderr, "an ELF launcher without --follow-children: one line, exit 1",
             r.stderr)
        # A launcher that never starts Tokio.
        r = d.ctl("record", "--follow-children", "--", "/bin/sh", "-c", "sleep 0.5; exit 4")
        t.ok(r.returncode == 4 and "without starting a Tokio process" in r.stderr,
             "a command with no Tokio process: said so, its status returned", r.stderr)
    finally:
        d.cleanup(keep=t.failed > 0)
        if not t.failed:
            shutil.rmtree(tmp, ignore_errors=True)


def serve(args, env):
    p = subprocess.Popen([D9CTL, "serve", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    line = p.stdout.readline()
    return p, line


def stop(p):
    if p.poll() is None:
        p.terminate()
    p.wait(timeout=10)


def serve_dump_mode(t):
    d = D9d(D9D, D9CTL, {"max_segment_events": "0"}).start_or_bail(t)  # one segment: its span is the run
    tmp = tempfile.mkdtemp(prefix="d9-ctl-serve-")
    env = dict(os.environ)
    try:
        out = os.path.join(tmp, "out")
        r = d.ctl("record", "--probes", "all", "--duration", "30s", "--out", out, "--", TARGET, "mixed", "--duration", "3")
        paths = r.stdout.split()
        t.ok(r.returncode == 0 and paths, "recorded a trace into --out", r.stderr)
        for spec, host in [("PORT", "127.0.0.1"), ("localhost:PORT", "127.0.0.1"), ("127.0.0.1:PORT", "127.0.0.1")]:
            port = free_port()
            p, line = serve(["--dir", out, "--listen", spec.replace("PORT", str(port))], env)
            listed = None
            if line.startswith(f"serving http://{host}:{port}/"):
                token = re.search(r"\?token=(\S+)", line)
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/list",
                                             headers={"Authorization": f"Bearer {token.group(1) if token else ''}"})
                with urllib.request.urlopen(req, timeout=10) as resp:
                    listed = json.loads(resp.read())
            stop(p)
            segs = listed if isinstance(listed, list) else (listed or {}).get("segments", [])
            t.ok(segs and all(s.get("service") == "d9-target-1.24-release" and re.match(r"\d+-\d+$", s["instance"])
                              for s in segs),
                 f"serve --listen {spec}: up, and the --out folder lists service and instance", f"{line} {listed}")
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([D9CTL, "serve", "--dir", out, "--listen", f"localhost:{port}"], capture_output=True,
                           text=True, timeout=10, env=env)
        busy.close()
        t.ok(r.returncode == 1 and one_line(r) and f"port {port} is already in use" in r.stderr,
             "a busy port: one line naming the port", r.stderr)
        r = subprocess.run([D9CTL, "serve", "--dir", out, "--listen", "localhost:http"], capture_output=True,
                           text=True, timeout=10, env=env)
        t.ok(r.returncode == 1 and one_line(r) and "--listen" in r.stderr, "a bad --listen: one line", r.stderr)

        # dump: names where the file has them, and the time span of the events.
        seg = paths[0]
        r = subprocess.run([D9CTL, "dump", seg], capture_output=True, text=True, timeout=120)
        # Names hold brackets ("[unnamed] FILE 0x..."): the chain ends at
        # the last "]" before the next field (cpu= comes last).
        chains = [m.group(1) for ln in r.stdout.splitlines()
                  for m in [re.search(r" callchain=\[(.+)\] cpu=\d+$", ln)] if m]
        named = [c for c in chains if "tokio::" in c]
        j = subprocess.run([D9CTL, "dump", "--json", seg], capture_output=True, text=True, timeout=120).stdout
        names = {}
        for ln in j.splitlines():
            ev = json.loads(ln)
            if ev["event"] == "SymbolTableEntry" and ev["fields"]["inline_depth"] == 0:
                names[ev["fields"]["addr"]] = ev["fields"]["symbol_name"]
        first_json = next((json.loads(ln)["fields"]["callchain"] for ln in j.splitlines()
                           if '"callchain":["' in ln), None)
        want = ", ".join(names.get(int(a, 16), a) for a in first_json) if first_json else None
        t.ok(r.returncode == 0 and named and want and chains and want in chains,
             f"dump names callchain frames from SymbolTableEntry ({len(named)} of {len(chains)} chains show tokio "
             "names; the first one matches --json + the symbol table)", (want, chains[:3]))
        s = subprocess.run([D9CTL, "dump", "--summary", seg], capture_output=True, text=True, timeout=120).stdout
        m = re.search(r"time: (\d+) \.\. (\d+) ns \(([\d.]+) s\)", s)
        t.ok(m and int(m.group(1)) > 0 and 2.0 <= float(m.group(3)) < 10 and "SymbolTableEntry" in s,
             "dump --summary: the span of the timed events (~3 s run), ts=0 symbol records not counted", s[:400])
    finally:
        d.cleanup(keep=t.failed > 0)
        if not t.failed:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    t = Tap()
    {"help": help_mode, "list-status": list_status_mode, "record": record_mode, "follow": follow_mode,
     "serve-dump": serve_dump_mode}[MODE](t)
    t.done()


main()
