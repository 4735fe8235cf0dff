#!/usr/bin/env python3
"""Control socket: malformed JSON, unknown command, wrong version, a huge
line and bad arguments are each answered with an error line while d9d keeps
serving; a non-root peer may trace its own process but is refused for
another uid's. Usage: test_control.py D9D D9CTL"""
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap  # noqa: E402

NOBODY = 65534


def main():
    t = Tap()
    d = D9d(sys.argv[1], sys.argv[2], {"socket_mode": "0666"})
    d.start_or_bail(t)
    ping = b'{"v":1,"cmd":"ping"}\n'
    cases = [
        (b"{this is not json\n", "malformed JSON"),
        (b'{"v":1,"cmd":"frobnicate"}\n', "unknown command"),
        (b'{"v":99,"cmd":"list"}\n', "version"),
        (b'["v",1]\n', "object"),
        (b'{"v":1,"cmd":"attach"}\n', "pid"),
        (b'{"v":1,"cmd":"attach","pid":"12"}\n', "pid"),
        (b'{"v":1,"cmd":"attach","pid":1,"probes":"poll,bogus"}\n', "probe group"),
        (b'{"v":1,"cmd":"attach","pid":1,"accept_queues":"yes"}\n', "accept_queues"),
        (b'{"v":1,"cmd":"attach","pid":1,"resources_interval_ms":5}\n', "resources_interval_ms"),
        (b'{"v":1,"cmd":"attach","pid":1,"resources_interval_ms":-1}\n', "resources_interval_ms"),
        (b'{"v":1,"cmd":"detach","pid":999999}\n', "not being traced"),
    ]
    for raw, expect in cases:
        resp = d.raw_request(raw + ping)
        t.ok(len(resp) == 2 and resp[0].get("ok") is False and expect in resp[0].get("error", "")
             and resp[0].get("v") == 1,
             f"{raw[:40]!r} answered with an error mentioning '{expect}'", resp)
        t.ok(len(resp) == 2 and resp[1].get("ok") is True, "same connection still served afterwards", resp)
    huge = b'{"v":1,"cmd":"list","pad":"' + b"x" * (200 * 1024) + b'"}\n'
    resp = d.raw_request(huge + ping)
    t.ok(len(resp) == 2 and resp[0].get("ok") is False and "longer than" in resp[0].get("error", ""),
         "a 200 KiB line is refused as too long", resp)
    t.ok(len(resp) == 2 and resp[1].get("ok") is True, "the request after the huge line is served", resp)
    t.ok(d.proc.poll() is None and d.ctl("list").returncode == 0, "d9d still alive and serving new connections")
    # Replies larger than the socket buffer (a status of many sessions):
    # 20000 pipelined status requests, ~4 MB of replies, read only a second
    # after all were sent.
    n, err = 0, ""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(d.sock)
            s.sendall(b'{"v":1,"cmd":"status"}\n' * 20000)
            time.sleep(1)
            buf = b""
            while buf.count(b"\n") < 20000:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
            n = sum(1 for line in buf.splitlines() if json.loads(line).get("ok") is True)
    except OSError as e:
        err = str(e)
    t.ok(n == 20000, f"20000 pipelined status requests all answered though the replies exceed the socket buffer ({n})",
         err)

    # Peer credentials: nobody vs root's process, and nobody's own process.
    root_proc = subprocess.Popen(["sleep", "30"])
    nobody_proc = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                    "sleep", "30"])
    time.sleep(0.3)
    try:
        r = d.ctl("attach", "--pid", str(root_proc.pid), "--probes", "sched,cpu", user=NOBODY)
        t.ok(r.returncode != 0 and "permission denied" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
             "uid 65534 refused for root's process, with one clear line", r.stderr)
        r = d.ctl("status", "--pid", str(root_proc.pid))
        t.ok(r.returncode == 1 and "not traced" in r.stderr, "nothing was attached to root's process", r.stderr)
        r = d.ctl("attach", "--pid", str(nobody_proc.pid), "--probes", "sched,cpu", "--duration", "1s", user=NOBODY)
        t.ok(r.returncode == 0 and "attached to pid" in r.stdout,
             "uid 65534 may attach to its own process", r.stdout + r.stderr)
        r = d.ctl("list", user=NOBODY)
        t.ok(r.returncode == 0 and str(nobody_proc.pid) in r.stdout, "its list shows its own target", r.stdout)
        r = d.ctl("detach", "--pid", str(nobody_proc.pid), user=NOBODY)
        t.ok(r.returncode == 0, "and it may detach it", r.stderr)
        secret = os.path.join(d.tmp, "secret-exe")
        with open(secret, "w") as f:
            f.write("not for uid 65534")
        os.chmod(secret, 0o600)
        req = json.dumps({"v": 1, "cmd": "attach", "pid": nobody_proc.pid, "exe": secret})
        r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                            "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
                            "s.sendall(sys.argv[2].encode()+b'\\n'); print(s.recv(65536).decode())", d.sock, req],
                           capture_output=True, text=True, timeout=30)
        resp = json.loads(r.stdout) if r.stdout.strip() else {}
        t.ok(resp.get("ok") is False and "permission denied" in resp.get("error", ""),
             "a non-root peer cannot make d9d read an executable it cannot read", r.stdout + r.stderr)
        r = d.ctl("attach", "--pid", str(root_proc.pid), "--probes", "sched,cpu", "--duration", "1s")
        t.ok(r.returncode == 0, "root may attach to any process", r.stderr)
        r = d.ctl("attach", "--pid", str(root_proc.pid), "--probes", "sched,cpu")
        t.ok(r.returncode != 0 and "already being traced" in r.stderr, "one session per target", r.stderr)
        r = d.ctl("attach", "--pid", "999999")
        t.ok(r.returncode != 0 and "no process" in r.stderr, "attach to a missing pid: clear error", r.stderr)
        r = d.ctl("attach", "--pid", "abc")
        t.ok(r.returncode == 2 and r.stderr.count("\n") == 1, "d9ctl rejects a non-numeric pid in one line", r.stderr)
        r = subprocess.run([sys.argv[2], "--socket", "/nonexistent/sock", "list"], capture_output=True, text=True)
        t.ok(r.returncode != 0 and "cannot reach d9d" in r.stderr, "no daemon: one clear line", r.stderr)
    finally:
        root_proc.kill()
        nobody_proc.kill()
    t.ok(d.stop() == 0, "d9d exits 0 on SIGTERM", d.logtext())
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
