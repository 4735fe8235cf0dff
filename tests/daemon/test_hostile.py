#!/usr/bin/env python3
"""Issue 16: a hostile local user against a private d9d (run as root), with
unprivileged users this test creates and removes. One finding per mode:
 sigbus   - a Tokio binary truncated by its owner while d9d plans it does not
            kill d9d (finding 1);
 bomb     - planning a crafted 250 KB ELF takes bounded time and memory
            (the planning part of finding 5);
 pidreuse - the PID of a user's process, handed to a root process while
            d9d attaches to it, never gets the user a session on root's
            process (finding 4);
 fifo     - a FIFO named as the executable, or planted at "<exe> (deleted)"
            of a deleted executable, blocks neither the control loop nor the
            sealer (finding 2);
 setuid   - a user's `record -- CMD` of a setuid-root program ends with a
            clear line when the exec raises its privileges (finding 3);
 files    - a state directory owned by a user is refused; record --out into
            a directory with a planted symlink does not write through it
            (finding 6);
 access   - sealed traces readable by the recording uid, the trace readers
            group and root only; no kernel addresses for a user whose
            /proc/kallsyms shows zeros; an exe path a user names is never
            read (nothing told about files it cannot read); detach errors
            say nothing about other users' sessions; a process owner cannot
            detach root's session on it (finding 7).
Usage: test_hostile.py D9D D9CTL TARGET MODE"""
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap, dump_json_lines, start_target, wait_for  # noqa: E402

D9D, D9CTL, TARGET, MODE = sys.argv[1:5]
KERNEL_MIN = 0xffff800000000000


class Users:
    """Throw-away system users (and a group), removed at exit."""

    def __init__(self):
        self.users, self.groups = [], []
        self.tag = f"{os.getpid() % 100000}"

    def user(self, name, groups=()):
        n = f"d9h{self.tag}{name}"
        args = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        if groups:
            args += ["--groups", ",".join(groups)]
        subprocess.run(args + [n], check=True, capture_output=True)
        self.users.append(n)
        return pwd.getpwnam(n).pw_uid

    def group(self, name):
        n = f"d9h{self.tag}{name}"
        subprocess.run(["groupadd", "--system", n], check=True, capture_output=True)
        self.groups.append(n)
        return n

    def cleanup(self):
        for n in self.users:
            subprocess.run(["userdel", n], capture_output=True)
        for n in self.groups:
            subprocess.run(["groupdel", n], capture_output=True)


def as_user(uid, *cmd, **kw):
    pw = pwd.getpwuid(uid)
    groups = ",".join(str(g) for g in os.getgrouplist(pw.pw_name, pw.pw_gid))
    return ["setpriv", f"--reuid={uid}", f"--regid={pw.pw_gid}", f"--groups={groups}", *cmd]


def run_as(uid, *cmd, timeout=60):
    return subprocess.run(as_user(uid, *cmd), capture_output=True, text=True, timeout=timeout)


def request_as(uid, d, req, timeout=15):
    """One request line sent from uid's own connection; the reply (or {})."""
    code = ("import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(float(sys.argv[3])); "
            "s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode()+b'\\n'); b=b''\n"
            "while not b.endswith(b'\\n'):\n c=s.recv(65536)\n if not c: break\n b+=c\nprint(b.decode())")
    try:
        r = run_as(uid, sys.executable, "-c", code, d.sock, json.dumps(req), str(timeout), timeout=timeout + 5)
    except subprocess.TimeoutExpired:
        return {}
    return json.loads(r.stdout) if r.stdout.strip() else {}


def root_request(d, req, timeout=10):
    try:
        resp = d.raw_request((json.dumps(req) + "\n").encode(), timeout=timeout)
    except OSError:
        return {}
    return resp[0] if resp else {}


def alive_and_serving(d):
    if d.proc.poll() is not None:
        return False
    try:
        return d.ctl("list", timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def user_dir(uid, mode=0o755):
    path = tempfile.mkdtemp(prefix="d9-hostile-")
    os.chown(path, uid, pwd.getpwuid(uid).pw_gid)
    os.chmod(path, mode)
    return path


def mode_sigbus(t, users):
    uid = users.user("a")
    home = user_dir(uid)
    d = D9d(D9D, D9CTL, {"socket_mode": "0666"})
    d.start_or_bail(t)
    tgt = subprocess.Popen(as_user(uid, "sleep", "60"))
    exe = os.path.join(home, "victim")
    shutil.copy(TARGET, exe)
    os.chown(exe, uid, -1)
    # The owner keeps cutting its copy short and writing it back, so that
    # whatever d9d has mapped of it keeps losing its pages.
    flapper = subprocess.Popen(as_user(uid, sys.executable, "-c",
                                       "import sys,time\n"
                                       "data=open(sys.argv[1],'rb').read(); end=time.time()+float(sys.argv[2])\n"
                                       "f=open(sys.argv[1],'r+b')\n"
                                       "while time.time()<end:\n"
                                       " f.truncate(4096); f.flush(); time.sleep(0.002)\n"
                                       " f.seek(0); f.write(data); f.flush()\n", exe, "20"))
    crashed, answered, tries = False, 0, 0
    try:
        deadline = time.time() + 15
        while time.time() < deadline and not crashed:
            tries += 1
            resp = root_request(d, {"v": 1, "cmd": "attach", "pid": tgt.pid, "exe": exe, "probes": "poll",
                                    "duration_ms": 100}, timeout=20)
            answered += bool(resp)
            time.sleep(0.05)
            if d.proc.poll() is not None:
                crashed = True
                break
            if resp.get("ok"):
                d.ctl("detach", "--pid", str(tgt.pid))
        flapper.kill()
        t.ok(not crashed, f"d9d survives {tries} plans of an executable its owner keeps truncating",
             f"d9d exit status {d.proc.returncode}\n" + d.logtext()[-2000:])
        t.ok(answered == tries, f"every attach was answered ({answered}/{tries})")
        # The same through record's path for users: the file open in the
        # user's own process (exe_fd), truncated meanwhile.
        shutil.copy(TARGET, exe)
        os.chown(exe, uid, -1)
        holder = subprocess.Popen(as_user(uid, sys.executable, "-c",
                                          "import os,sys,time; fd=os.open(sys.argv[1], os.O_RDONLY); "
                                          "print(fd, flush=True); time.sleep(60)", exe),
                                  stdout=subprocess.PIPE, text=True)
        fd = int(holder.stdout.readline())
        truncate = threading.Timer(0.002, lambda: run_as(uid, "truncate", "-s", "0", exe))
        truncate.start()
        resp = request_as(uid, d, {"v": 1, "cmd": "attach", "pid": holder.pid, "exe_fd": fd, "probes": "poll",
                                   "duration_ms": 200})
        truncate.join()
        time.sleep(0.3)
        t.ok(d.proc.poll() is None and resp != {}, "an exe_fd truncated during planning is answered, d9d alive",
             json.dumps(resp))
        holder.kill()
        t.ok(alive_and_serving(d), "d9d still serves root afterwards")
    finally:
        tgt.kill()
    t.ok(not crashed and d.stop() == 0, "d9d exits 0 on SIGTERM")
    d.cleanup(keep=t.failed > 0)
    shutil.rmtree(home, ignore_errors=True)


def crafted_elf(path, name_len=200000, n_syms=2000):
    """A small x86-64 ELF whose function symbols all share one huge Rust name."""
    import struct
    strtab = b"\0_ZN5tokio" + b"a" * name_len + b"E\0"
    syms = b"\0" * 24 + b"".join(struct.pack("<IBBHQQ", 1, 0x12, 0, 1, 0x1000 + 16 * i, 16)
                                  for i in range(n_syms))
    shstr = b"\0.strtab\0.symtab\0.shstrtab\0"
    off_str = 64 + 56
    off_sym = off_str + len(strtab)
    off_shs = off_sym + len(syms)
    off_sh = (off_shs + len(shstr) + 7) & ~7
    size = off_sh + 4 * 64
    eh = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 3, 62, 1, 0, 64, off_sh, 0,
                     64, 56, 1, 64, 4, 3)
    ph = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 0x1000)
    sh = [b"\0" * 64,
          struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, off_str, len(strtab), 0, 0, 1, 0),
          struct.pack("<IIQQQQIIQQ", 9, 2, 0, 0, off_sym, len(syms), 1, 1, 8, 24),
          struct.pack("<IIQQQQIIQQ", 17, 3, 0, 0, off_shs, len(shstr), 0, 0, 1, 0)]
    body = eh + ph + strtab + syms + shstr
    with open(path, "wb") as f:
        f.write(body + b"\0" * (off_sh - len(body)) + b"".join(sh))
    return size


def peak_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def mode_bomb(t, users):
    uid = users.user("a")
    home = user_dir(uid)
    d = D9d(D9D, D9CTL, {"socket_mode": "0666"})
    d.start_or_bail(t)
    tgt = subprocess.Popen(as_user(uid, "sleep", "60"))
    bomb = os.path.join(home, "bomb")
    size = crafted_elf(bomb)
    os.chown(bomb, uid, -1)
    try:
        before = peak_rss_kb(d.proc.pid)
        t0 = time.time()
        resp = root_request(d, {"v": 1, "cmd": "attach", "pid": tgt.pid, "exe": bomb, "probes": "poll"}, timeout=60)
        took = time.time() - t0
        grew = (peak_rss_kb(d.proc.pid) - before) / 1024
        t.ok(resp != {} and took < 1.0, f"a crafted {size // 1024} KB ELF is planned in {took * 1000:.0f} ms (< 1 s)",
             json.dumps(resp)[:500])
        t.ok(grew < 64, f"d9d's peak RSS grew {grew:.0f} MB planning it (< 64 MB)")
        t.ok(alive_and_serving(d), "d9d still serves")
    finally:
        tgt.kill()
    t.ok(d.stop() == 0, "d9d exits 0 on SIGTERM")
    d.cleanup(keep=t.failed > 0)
    shutil.rmtree(home, ignore_errors=True)


def spawn_root_at(pid, tries=20):
    """A root process with exactly this PID (ns_last_pid), or None."""
    for _ in range(tries):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen(["sleep", "30"])
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


def mode_pidreuse(t, users):
    uid = users.user("a")
    stolen, reused, tries = [], 0, 0
    for delay in (0.005, 0.02, 0.05, 0.1, 0.2, 0.3):
        # A fresh d9d each time: its first attach also loads the BPF
        # programs, the widest gap between the checks and the attach.
        d = D9d(D9D, D9CTL, {"socket_mode": "0666"})
        d.start_or_bail(t)
        victim = subprocess.Popen(as_user(uid, TARGET, "mixed", "--duration", "30"), stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        pid, root_proc = victim.pid, None

        def swap():
            nonlocal root_proc
            victim.kill()
            victim.wait()
            root_proc = spawn_root_at(pid)
        timer = threading.Timer(delay, swap)
        timer.start()
        resp = request_as(uid, d, {"v": 1, "cmd": "attach", "pid": pid, "probes": "sched,cpu,poll",
                                   "duration_ms": 3000}, timeout=20)
        timer.join()
        tries += 1
        if root_proc:
            reused += 1
            # A session on the user's own process ends when it exits (its
            # pidfd); one still recording a second later records root's.
            time.sleep(1)
            st = d.status(pid) or {}
            live = [x for x in st.get("targets", []) if x["state"] == "recording"]
            if live:
                stolen.append(f"delay {delay}: {json.dumps(resp)[:300]}")
            root_proc.kill()
            root_proc.wait()
        t.ok(alive_and_serving(d), f"d9d serving after the swap at {delay * 1000:.0f} ms")
        d.stop()
        d.cleanup()
    t.ok(reused > 0, f"the user's PID went to a root process during the attach in {reused}/{tries} tries")
    t.ok(not stolen, "no session of the user ever recorded the root process that took its PID", "\n".join(stolen))


def mode_fifo(t, users):
    uid = users.user("a")
    home = user_dir(uid)
    d = D9d(D9D, D9CTL, {"socket_mode": "0666", "rotate_period": "1s"})
    d.start_or_bail(t)
    try:
        # 1. A FIFO where the executable should be. Root names it (users may
        # not name paths at all): the answer must come, not a blocked open.
        fifo = os.path.join(home, "app")
        run_as(uid, "mkfifo", fifo)
        holder = subprocess.Popen(as_user(uid, "sleep", "60"))
        time.sleep(0.2)
        t0 = time.time()
        resp = root_request(d, {"v": 1, "cmd": "attach", "pid": holder.pid, "exe": fifo, "probes": "poll"},
                            timeout=8)
        t.ok(resp.get("ok") is False and "regular" in resp.get("error", ""),
             f"attach with a FIFO as exe answered with an error in {time.time() - t0:.1f} s", json.dumps(resp))
        t.ok(alive_and_serving(d), "root's list is served right after")
        resp = request_as(uid, d, {"v": 1, "cmd": "attach", "pid": holder.pid, "exe": fifo, "probes": "poll"})
        t.ok(resp.get("ok") is False and "permission denied" in resp.get("error", ""),
             "a user's exe path is refused without being opened", json.dumps(resp))
        holder.kill()
        os.unlink(fifo)

        # 2. The user's running executable deleted and a FIFO planted at
        # "<exe> (deleted)", the name its maps now show: the sealer must
        # still seal (this session's and root's segments) and stop on SIGTERM.
        exe = os.path.join(home, "tokio-app")
        shutil.copy(TARGET, exe)
        os.chown(exe, uid, -1)
        tgt = subprocess.Popen(as_user(uid, exe, "mixed", "--duration", "30"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        root_tgt = start_target(TARGET, "mixed", "--duration", "30", stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        r = d.ctl("attach", "--pid", str(tgt.pid), "--probes", "sched,cpu", "--duration", "4s", user=uid)
        t.ok(r.returncode == 0, "the user attaches to its own Tokio process", r.stderr)
        os.unlink(exe)
        run_as(uid, "mkfifo", exe + " (deleted)")
        r = d.ctl("attach", "--pid", str(root_tgt.pid), "--probes", "sched,cpu", "--duration", "4s")
        t.ok(r.returncode == 0, "root attaches to its own target", r.stderr)

        def both_done():
            st = d.status() or {}
            tg = [x for x in st.get("targets", []) if x["pid"] in (tgt.pid, root_tgt.pid)]
            return len(tg) == 2 and all(x["state"] == "done" and x["segments"] > 0 for x in tg) and tg
        tg = wait_for(both_done, 40)
        t.ok(bool(tg), "both sessions end and their segments are sealed despite the FIFO",
             json.dumps((d.status() or {}).get("daemon")) + "\n" + d.logtext()[-3000:])
        tgt.kill()
        root_tgt.kill()
        t0 = time.time()
        rc = d.stop(timeout=30)
        t.ok(rc == 0, f"SIGTERM finishes d9d ({time.time() - t0:.1f} s, status {rc})")
    finally:
        d.cleanup(keep=t.failed > 0)
        shutil.rmtree(home, ignore_errors=True)


def mode_setuid(t, users):
    uid = users.user("a")
    home = user_dir(uid)
    d = D9d(D9D, D9CTL, {"socket_mode": "0666"})
    d.start_or_bail(t)
    sleep = shutil.which("sleep")
    plain = os.path.join(home, "sleep-plain")
    suid = os.path.join(home, "sleep-suid")
    shutil.copy(sleep, plain)
    shutil.copy(sleep, suid)
    os.chown(suid, 0, 0)
    os.chmod(suid, 0o4755)
    try:
        r = d.ctl("record", "--duration", "3s", "--probes", "sched,cpu", "--", plain, "10", user=uid, timeout=60)
        t.ok(r.returncode == 0 and "duration reached" in r.stderr,
             "control: a user records its own unprivileged command to the end", r.stderr)
        r = d.ctl("record", "--duration", "6s", "--probes", "sched,cpu", "--", suid, "10", user=uid, timeout=60)
        t.ok("gained privileges" in r.stderr, "the session of a setuid-root exec ends with a clear line", r.stderr)
        st = d.status() or {}
        ended = [x for x in st.get("targets", []) if "privileges" in x.get("end_reason", "")]
        t.ok(len(ended) == 1, "status says why it ended", json.dumps(st.get("targets")))
        t.ok(any("gained privileges" in line for line in d.logtext().splitlines()), "d9d logs it")
        # Root may still record the very same program.
        r = d.ctl("record", "--duration", "2s", "--probes", "sched,cpu", "--", suid, "10", timeout=60)
        t.ok(r.returncode == 0 and "duration reached" in r.stderr, "root's session of it is not ended", r.stderr)
    finally:
        t.ok(d.stop() == 0, "d9d exits 0 on SIGTERM")
        d.cleanup(keep=t.failed > 0)
        shutil.rmtree(home, ignore_errors=True)


def mode_files(t, users):
    uid = users.user("a")
    # A state directory the user owns (the docs' quick start used /tmp/d9):
    # it could plant the sealer's tmp file as a symlink there.
    state = user_dir(uid, 0o755)
    victim = tempfile.NamedTemporaryFile(prefix="d9-victim-", delete=False)
    victim.write(b"root's file\n")
    victim.close()
    traces = os.path.join(state, "traces")
    run_as(uid, "mkdir", "-p", traces)
    d = D9d(D9D, D9CTL, {"socket_mode": "0666"}, state=state)
    started = True
    try:
        d.start()
    except RuntimeError:
        started = False
    t.ok(not started and "owned by another user" in d.logtext(),
         "d9d refuses a state directory owned by another user, with one clear line", d.logtext()[-2000:])
    d.stop()
    os.chown(state, 0, 0)
    shutil.rmtree(traces, ignore_errors=True)
    d = D9d(D9D, D9CTL, {"socket_mode": "0666"}, state=state)
    os.chmod(state, 0o777)
    try:
        d.start()
        started = True
    except RuntimeError:
        started = False
    t.ok(not started and "writable by group or others" in d.logtext(),
         "and one anybody can write to", d.logtext()[-2000:])
    d.stop()
    shutil.rmtree(state, ignore_errors=True)

    # record --out into a directory a user prepared with a planted symlink.
    d = D9d(D9D, D9CTL, {"socket_mode": "0666"})
    d.start_or_bail(t)
    out = user_dir(uid, 0o755)
    for n in range(3):
        run_as(uid, "ln", "-s", victim.name, os.path.join(out, f"trace.{n}.bin.zst"))
    r = d.ctl("record", "--duration", "1s", "--probes", "sched", "--out", out, "--", "sleep", "3")
    with open(victim.name, "rb") as f:
        content = f.read()
    t.ok(content == b"root's file\n", "root's record --out does not write through a planted symlink",
         r.stderr + repr(content[:40]))
    t.ok(r.returncode != 0 and "--out" in r.stderr, "and says why it refused the directory", r.stderr)
    # Its own directory, with a stale symlink left in it: replaced, not followed.
    own = tempfile.mkdtemp(prefix="d9-out-")
    os.symlink(victim.name, os.path.join(own, "trace.0.bin.zst"))
    r = d.ctl("record", "--duration", "1s", "--probes", "sched", "--out", own, "--", "sleep", "3")
    with open(victim.name, "rb") as f:
        content = f.read()
    # --out keeps SERVICE/INSTANCE (issue 19): a stale symlink where a level
    # goes (own/sleep) is refused, never followed.
    own2 = tempfile.mkdtemp(prefix="d9-out-")
    os.symlink(os.path.dirname(victim.name), os.path.join(own2, "sleep"))
    r2 = d.ctl("record", "--duration", "1s", "--probes", "sched", "--out", own2, "--", "sleep", "3")
    shutil.rmtree(own2, ignore_errors=True)
    r = d.ctl("record", "--duration", "1s", "--probes", "sched", "--out", own, "--", "sleep", "3")
    copied = (r.stdout.split() or [""])[0]
    t.ok(r.returncode == 0 and content == b"root's file\n" and copied.startswith(own + "/sleep/")
         and not os.path.islink(copied) and os.path.getsize(copied) > 0
         and r2.returncode != 0 and "--out" in r2.stderr,
         "root's own --out: a planted symlink level is refused, the trace lands under SERVICE/INSTANCE",
         r.stderr + r2.stderr)
    t.ok(d.stop() == 0, "d9d exits 0 on SIGTERM")
    d.cleanup(keep=t.failed > 0)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(own, ignore_errors=True)
    os.unlink(victim.name)


def readable_by(uid, path):
    return run_as(uid, "head", "-c", "1", path).returncode == 0


def kernel_addrs(path):
    rc, out = dump_json_lines(D9CTL, path)
    n = 0
    for line in out.splitlines():
        if line.startswith('{"event":"CpuSampleEvent"'):
            f = json.loads(line)["fields"]
            n += sum(1 for a in f.get("callchain") or [] if int(a, 16) >= KERNEL_MIN)
        elif line.startswith('{"event":"SymbolTableEntry"'):
            n += int(json.loads(line)["fields"]["addr"]) >= KERNEL_MIN
    return rc, n


def mode_access(t, users):
    readers = users.group("rd")
    a = users.user("a")
    b = users.user("b")
    c = users.user("c", groups=[readers])
    d = D9d(D9D, D9CTL, {"socket_mode": "0666", "trace_group": readers})
    d.start_or_bail(t)
    ta = subprocess.Popen(as_user(a, TARGET, "mixed", "--duration", "30"), stdout=subprocess.DEVNULL)
    tr = start_target(TARGET, "mixed", "--duration", "30", stdout=subprocess.DEVNULL)
    secret_dir = tempfile.mkdtemp(prefix="d9-secret-")
    os.chmod(secret_dir, 0o700)
    secret = os.path.join(secret_dir, "tokio-app")
    shutil.copy(TARGET, secret)
    os.chmod(secret, 0o755)
    try:
        time.sleep(0.5)
        # Detach: another user's session looks like no session at all.
        r = d.ctl("attach", "--pid", str(ta.pid), "--probes", "sched,cpu", "--duration", "3s", user=a)
        t.ok(r.returncode == 0, "user a attaches to its own process", r.stderr)
        rb = d.ctl("detach", "--pid", str(ta.pid), user=b)
        rn = d.ctl("detach", "--pid", "999999", user=b)
        t.ok(rb.returncode != 0 and str(a) not in rb.stderr and "belongs" not in rb.stderr
             and rb.stderr.replace(str(ta.pid), "N") == rn.stderr.replace("999999", "N"),
             "user b's detach of a's session answers exactly as for an untraced pid", rb.stderr + rn.stderr)
        rl = d.ctl("list", user=b)
        t.ok(str(ta.pid) not in rl.stdout, "b's list does not show a's session", rl.stdout)
        # Root's session on a's second process: a can neither detach it nor see it.
        ta2 = subprocess.Popen(as_user(a, "sleep", "30"))
        time.sleep(0.2)
        r = d.ctl("attach", "--pid", str(ta2.pid), "--probes", "sched", "--duration", "20s")
        t.ok(r.returncode == 0, "root attaches to a's other process", r.stderr)
        r = d.ctl("detach", "--pid", str(ta2.pid), user=a)
        st = d.status(ta2.pid) or {}
        t.ok(r.returncode != 0 and [x["state"] for x in st.get("targets", [])] == ["recording"],
             "a, owner of the process, cannot detach root's session on it", r.stderr + json.dumps(st))
        d.ctl("detach", "--pid", str(ta2.pid))
        ta2.kill()
        # An exe path in a directory a cannot enter: never read, no build-id,
        # the same answer as for a path that does not exist.
        r1 = request_as(a, d, {"v": 1, "cmd": "attach", "pid": ta.pid, "exe": secret, "probes": "poll"})
        r2 = request_as(a, d, {"v": 1, "cmd": "attach", "pid": ta.pid, "exe": secret + "-nope", "probes": "poll"})
        t.ok(r1.get("ok") is False and "build_id" not in json.dumps(r1) and
             r1.get("error", "").replace(secret, "P") == r2.get("error", "x").replace(secret + "-nope", "P"),
             "a file behind a 0700 directory: refused, same answer as a missing one", json.dumps([r1, r2]))
        # Root records its own target with off-CPU stacks (kernel frames).
        r = d.ctl("attach", "--pid", str(tr.pid), "--probes", "sched,cpu", "--duration", "3s")
        t.ok(r.returncode == 0, "root attaches to its own target", r.stderr)

        def done(pid):
            st = d.status(pid) or {}
            tg = st.get("targets", [])
            return tg and tg[-1]["state"] == "done" and tg[-1]["sealed"] and tg[-1]
        sa, sr = wait_for(lambda: done(ta.pid), 40), wait_for(lambda: done(tr.pid), 40)
        t.ok(bool(sa and sr), "both sessions sealed")
        a_path, r_path = (sa or {}).get("sealed", [""])[0], (sr or {}).get("sealed", [""])[0]
        mode_r = stat.S_IMODE(os.stat(r_path).st_mode) if r_path else 0o777
        # Group bits are the ACL mask when an ACL is set; "other" bits are real.
        t.ok(r_path and not (mode_r & 0o004), f"root's sealed trace is not world-readable ({mode_r:o})")
        t.ok(a_path and readable_by(a, a_path), "user a reads its own sealed trace")
        t.ok(a_path and not readable_by(b, a_path), "user b cannot read a's trace")
        t.ok(r_path and not readable_by(a, r_path) and not readable_by(b, r_path), "users a and b cannot read root's")
        t.ok(r_path and readable_by(c, r_path) and readable_by(c, a_path),
             "a member of the trace readers group reads both")
        rc, n_root = kernel_addrs(r_path)
        t.ok(rc == 0 and n_root > 0, f"root's trace has kernel frames ({n_root})")
        zeros = run_as(a, "head", "-1", "/proc/kallsyms").stdout.startswith("0000000000000000")
        rc, n_a = kernel_addrs(a_path)
        t.ok(rc == 0 and (n_a == 0 if zeros else True),
             f"a's trace has no kernel addresses ({n_a}) since a's /proc/kallsyms shows zeros ({zeros})")
    finally:
        ta.kill()
        tr.kill()
        shutil.rmtree(secret_dir, ignore_errors=True)
    t.ok(d.stop() == 0, "d9d exits 0 on SIGTERM")
    d.cleanup(keep=t.failed > 0)


def main():
    t = Tap()
    users = Users()
    try:
        {"sigbus": mode_sigbus, "bomb": mode_bomb, "pidreuse": mode_pidreuse, "fifo": mode_fifo, "setuid": mode_setuid, "files": mode_files,
         "access": mode_access}[MODE](t, users)
    finally:
        users.cleanup()
    t.done()


main()
