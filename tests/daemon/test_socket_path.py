#!/usr/bin/env python3
"""--socket PATH replaces only a stale socket: a regular file, a directory,
a symlink and another live d9d's socket are refused with one clear line and
left as they were (the other d9d stays reachable); a socket nobody listens
on is replaced. Usage: test_socket_path.py D9D D9CTL"""
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap  # noqa: E402

D9D, D9CTL = sys.argv[1:3]


def start_second(sock):
    """A second d9d on sock with its own state dir: (exit code, log lines)."""
    state = tempfile.mkdtemp(prefix="d9d-sock-")
    try:
        r = subprocess.run([D9D, "--config", "/dev/null", "--state-dir", state, "--socket", sock, "--foreground"],
                           capture_output=True, text=True, timeout=15)
        return r.returncode, [line for line in (r.stdout + r.stderr).splitlines() if "error" in line]
    except subprocess.TimeoutExpired:
        return None, ["still running after 15 s: it took the path over"]
    finally:
        subprocess.run(["rm", "-rf", state])


def main():
    t = Tap()
    first = D9d(D9D, D9CTL)
    first.start_or_bail(t)
    try:
        rc, lines = start_second(first.sock)
        t.ok(rc not in (0, None) and len(lines) == 1 and "running daemon" in lines[0],
             "a second d9d refuses the socket of a live d9d, with one line", (rc, lines))
        r = first.ctl("list", timeout=10)
        t.ok(r.returncode == 0 and os.path.exists(first.sock), "the first d9d is still reachable on its socket",
             r.stderr)

        plain = os.path.join(first.tmp, "plain-file")
        with open(plain, "w") as f:
            f.write("keep me")
        rc, lines = start_second(plain)
        t.ok(rc not in (0, None) and len(lines) == 1 and "not a socket" in lines[0],
             "a regular file at --socket is refused with one line", (rc, lines))
        t.ok(open(plain).read() == "keep me", "and left as it was")

        target = os.path.join(first.tmp, "link-target")
        with open(target, "w") as f:
            f.write("target")
        link = os.path.join(first.tmp, "link.sock")
        os.symlink(target, link)
        rc, lines = start_second(link)
        t.ok(rc not in (0, None) and os.path.islink(link) and open(target).read() == "target",
             "a symlink at --socket is refused and left as it was", (rc, lines))

        d = os.path.join(first.tmp, "a-dir")
        os.mkdir(d)
        rc, lines = start_second(d)
        t.ok(rc not in (0, None) and os.path.isdir(d), "a directory at --socket is refused", (rc, lines))

        # A socket left behind by a daemon that is gone: bound, never closed
        # cleanly (nobody listens any more).
        stale = os.path.join(first.tmp, "stale.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(stale)
        s.close()
        second = D9d(D9D, D9CTL)
        second.sock = stale
        try:
            second.start()
            ok = second.ctl("list", timeout=10).returncode == 0
        except RuntimeError as e:
            ok = False
            print(f"# {e}")
        t.ok(ok, "a stale socket nobody listens on is replaced and d9d serves on it")
        second.cleanup()
        t.ok(first.ctl("list", timeout=10).returncode == 0, "the first d9d still serves at the end")
    finally:
        t.ok(first.stop() == 0, "the first d9d exits 0 on SIGTERM", first.logtext())
        first.cleanup(keep=t.failed > 0)
    t.done()


main()
