#!/usr/bin/env python3
"""d9ctl serve and dump against hostile local users (issue 16, finding 8):
other uids get nothing without the token printed at start; seg= serves only
trace files; zstd bombs are cut off with a clear status and bounded memory
(also 4 at once); 1500 slow clients neither starve real requests nor stay
connected past the timeout; `d9ctl dump` refuses a 96 KB bomb in one line
without GB of memory. Usage: serve_hostile.py D9CTL (env as the other
viewer tests: D9_VIEWER_DIR, D9_DIAL9_FIXTURE)"""
import gzip
import os
import pwd
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import Tap  # noqa: E402

D9CTL = sys.argv[1]
FIXTURE = os.environ["D9_DIAL9_FIXTURE"]


def zstd_bomb(path, gib):
    """A zstd file of GIB GiB of zeros, made of one 256 MiB frame repeated."""
    frame = subprocess.run(["zstd", "-q", "-1", "-c"], input=b"\0" * (256 << 20), capture_output=True,
                           check=True).stdout
    with open(path, "wb") as f:
        for _ in range(gib * 4):
            f.write(frame)
    return os.path.getsize(path)


def peak_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))


def http(port, path, headers=None, timeout=20):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)
    except OSError as e:
        return None, str(e).encode(), {}


def as_user(uid, code, *args):
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c",
                           code, *args], capture_output=True, text=True, timeout=60)


FETCH_AS_USER = """
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        print(r.status, len(r.read()))
except urllib.error.HTTPError as e:
    print(e.code, len(e.read()))
"""


def main():
    t = Tap()
    top = tempfile.mkdtemp(prefix="d9-serve-hostile-")
    os.chmod(top, 0o755)
    root = os.path.join(top, "root")
    seg_dir = os.path.join(root, "svc", "4242-1")
    os.makedirs(seg_dir)
    shutil.copy(FIXTURE, os.path.join(seg_dir, "trace.0.bin.gz"))
    raw = gzip.decompress(open(FIXTURE, "rb").read())
    with open(os.path.join(root, "svc", "notes.txt"), "w") as f:
        f.write("not a trace")
    with open(os.path.join(seg_dir, "ship.key"), "w") as f:
        f.write("SECRET")
    zst = subprocess.run(["zstd", "-q", "-c"], input=raw, capture_output=True, check=True).stdout
    with open(os.path.join(seg_dir, "trace.2.bin.zst"), "wb") as f:
        f.write(zst[:len(zst) // 2])
    with open(os.path.join(seg_dir, "trace.3.bin.gz"), "wb") as f:
        f.write(gzip.compress(raw[:1000]) + gzip.compress(raw[1000:]))
    bomb = os.path.join(seg_dir, "trace.1.bin.zst")
    bomb_size = zstd_bomb(bomb, 4)
    print(f"# zstd bomb: {bomb_size} bytes -> 4 GiB")
    user = f"d9srv{os.getpid() % 100000}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                   check=True, capture_output=True)
    uid = pwd.getpwnam(user).pw_uid
    proc = subprocess.Popen([D9CTL, "serve", "--dir", root, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"serving (http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]+))", line)
        if not m:
            t.bail(f"serve did not print a URL with a token: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}")
        url, port, token = m.group(1), int(m.group(2)), m.group(3)
        t.ok(len(token) >= 32, f"serve prints its URL once with a {len(token) * 4}-bit token")
        auth = {"Authorization": f"Bearer {token}"}
        seg = "/api/trace?seg=svc/4242-1/trace.0.bin.gz"

        # Another local user on the loopback port: nothing without the token.
        base = f"http://127.0.0.1:{port}"
        for path in ("/api/list", seg, "/", "/static/app.js"):
            r = as_user(uid, FETCH_AS_USER, base + path)
            t.ok(r.stdout.startswith("401 "), f"uid {uid} without the token gets 401 for {path}", r.stdout + r.stderr)
        r = as_user(uid, FETCH_AS_USER, base + seg + "&token=" + "0" * len(token))
        t.ok(r.stdout.startswith("401 "), "a wrong token gets 401", r.stdout + r.stderr)
        st, body, hdr = http(port, f"/?token={token}")
        cookie = hdr.get("Set-Cookie", "")
        t.ok(st == 200 and token in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie,
             "the URL with the token opens the viewer and sets an HttpOnly SameSite=Strict cookie", cookie)
        st, body, _ = http(port, seg, {"Cookie": cookie.split(";")[0]})
        t.ok(st == 200 and body == raw, "the cookie alone is enough for the viewer's own requests")
        st, body, _ = http(port, seg, auth)
        t.ok(st == 200 and body == raw, "a Bearer token works for scripts")

        st, body, _ = http(port, "/api/trace?seg=svc/4242-1/trace.2.bin.zst", auth)
        t.ok(st == 422 and b"corrupt" in body, "a truncated zstd segment gets 422 before any body", (st, body[:100]))
        st, body, _ = http(port, "/api/trace?seg=svc/4242-1/trace.3.bin.gz&seg=svc/4242-1/trace.0.bin.gz", auth)
        t.ok(st == 200 and body == raw + raw, "a two-member gzip and a second segment stream out byte-identical")

        # seg= serves trace files only.
        for p in ("svc/notes.txt", "svc/4242-1/ship.key"):
            st, body, _ = http(port, f"/api/trace?seg={p}", auth)
            t.ok(st == 403 and b"SECRET" not in body and b"not a trace" in body and b"trace file" in body,
                 f"seg={p} (a regular file, not a trace) is refused with 403", (st, body[:120]))

        # Bombs: a clear 413, memory bounded, also 4 at once.
        rss0 = peak_rss_kb(proc.pid)
        t0 = time.time()
        st, body, _ = http(port, "/api/trace?seg=svc/4242-1/trace.1.bin.zst", auth, timeout=60)
        took = time.time() - t0
        t.ok(st == 413 and b"too large" in body, f"a {bomb_size // 1024} KiB zstd bomb gets 413 in {took:.1f} s",
             (st, body[:200]))
        res = []
        ths = [threading.Thread(target=lambda: res.append(
            http(port, "/api/trace?seg=svc/4242-1/trace.1.bin.zst", auth, timeout=60)[0])) for _ in range(4)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        peak = peak_rss_kb(proc.pid)
        t.ok(res == [413] * 4, f"4 bombs at once: each 413 ({res})")
        t.ok(peak < 100 * 1024, f"serve's peak RSS stays {peak // 1024} MiB (was {rss0 // 1024} MiB before the bombs)")

        # 1500 slow clients: half a request each, then nothing.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
        slow = []
        for _ in range(1500):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /api/list HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            slow.append(s)
        time.sleep(0.5)
        lat, codes = [], []
        for _ in range(20):
            t0 = time.time()
            st, body, _ = http(port, seg, auth, timeout=10)
            lat.append(time.time() - t0)
            codes.append(st)
        t.ok(all(c == 200 for c in codes) and max(lat) < 3,
             f"with 1500 slow clients connected, 20 real requests all served (worst {max(lat) * 1000:.0f} ms)",
             codes)
        # They are cut off after the per-connection timeout.
        deadline = time.time() + 30
        for s in slow:
            s.settimeout(max(0.1, deadline - time.time()))
        closed = 0
        for s in slow:
            try:
                closed += s.recv(1) == b""
            except ConnectionResetError:
                closed += 1
            except OSError:
                pass
            s.close()
        t.ok(closed == 1500, f"the slow clients are disconnected by the connection timeout ({closed} of 1500)")
        st, _, _ = http(port, "/api/list", auth)
        t.ok(st == 200 and proc.poll() is None, "serve still answers afterwards")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run(["userdel", user], capture_output=True)

    # d9ctl dump: the same cap. A ~96 KB bomb (several GiB of zeros).
    small = os.path.join(top, "bomb.bin.zst")
    frame = subprocess.run(["zstd", "-q", "-1", "-c"], input=b"\0" * (256 << 20), capture_output=True,
                           check=True).stdout
    with open(small, "wb") as f:
        while f.tell() < 96 * 1024:
            f.write(frame)
    size = os.path.getsize(small)
    probe = ("import resource, subprocess, sys, time; t0 = time.time(); "
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
             "round(time.time() - t0, 2)); print(r.stderr, end='')")
    r = subprocess.run([sys.executable, "-c", probe, D9CTL, "dump", "--summary", small], capture_output=True,
                       text=True, timeout=300)
    head, _, err = r.stdout.partition("\n")
    rc, rss, secs = head.split()
    print(f"# dump of a {size // 1024} KiB bomb ({size // len(frame) * 256} MiB of zeros): "
          f"exit {rc}, peak RSS {int(rss) // 1024} MiB, {secs} s")
    t.ok(rc != "0" and len(err.strip().splitlines()) == 1 and "expands" in err,
         "d9ctl dump refuses the bomb with one clear line", err)
    t.ok(int(rss) < 200 * 1024, f"and stays under 200 MiB of memory ({int(rss) // 1024} MiB)")
    r = subprocess.run([D9CTL, "dump", "--summary", os.path.join(seg_dir, "trace.0.bin.gz")], capture_output=True,
                       text=True, timeout=60)
    t.ok(r.returncode == 0, "a real segment still dumps", r.stderr)
    shutil.rmtree(top, ignore_errors=True)
    t.done()


main()
