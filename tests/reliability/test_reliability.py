#!/usr/bin/env python3
"""Reliability under load and faults: a real d9d (optionally the ASan/UBSan
build) tracing real Tokio targets with real BPF.
Usage: test_reliability.py D9D D9CTL TARGET MODE [SHIM]
MODE multi:     8 targets recorded at once by one d9d with a small ring.
MODE overflow:  a tiny ring under a busy target; drops counted exactly once.
MODE diskfull:  the state dir is a small tmpfs that fills up.
MODE lifecycle: the target forks, then execs; a pid is exited and reused.
MODE fuzz:      random lines on the control socket."""
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from d9harness import (D9d, Tap, active_files, dump_json_lines, dump_summary, sealed_files,  # noqa: E402
                       start_target, target_truth, wait_for)

D9D, D9CTL, TARGET, MODE = sys.argv[1:5]
SHIM = sys.argv[5] if len(sys.argv) > 5 else None


def segment_facts(path):
    """(decodes strictly, ring-lost sum, metadata entries, event counts) of
    one segment. Only source "ring" is what status counts as drops; stacks
    the unwinder had no budget for are lost events of source
    "stack_unwind" (records kept, stacks not)."""
    ok, counts, text = dump_summary(D9CTL, path)
    rc, out = dump_json_lines(D9CTL, path)
    lost, meta = 0, None
    for line in out.splitlines():
        if line.startswith('{"event":"D9LostEventsEvent"'):
            f = json.loads(line)["fields"]
            if f["source"] == "ring":
                lost += int(f["lost"])
        elif line.startswith('{"event":"SegmentMetadataEvent"'):
            meta = json.loads(line)["fields"]["entries"]
    return ok and rc == 0, lost, meta, counts


def alive(d):
    return d.proc.poll() is None and d.ctl("list", timeout=30).returncode == 0


def target_status(d, pid):
    st = d.status(pid)
    return st["targets"][0] if st and st.get("targets") else None


def multi(t):
    # ring_size is one d9d-wide setting (no per-attach size), so the busy
    # targets and the idle ones share it; each target still has its own ring.
    d = D9d(D9D, D9CTL, {"ring_size": "64K"}).start()
    busy = [start_target(TARGET, "mixed", "--duration", "14", "--workers", "2") for _ in range(6)]
    idle = [start_target(TARGET, "server", "--listen", "127.0.0.1:0", "--duration", "14") for _ in range(2)]
    time.sleep(0.5)
    res = {}

    def rec(p):
        out = os.path.join(d.tmp, f"out-{p.pid}")
        res[p.pid] = d.ctl("record", "--probes", "all", "--pid", str(p.pid), "--duration", "10s", "--out", out)
    threads = [threading.Thread(target=rec, args=(p,)) for p in busy + idle]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for p in busy + idle:
        p.kill()
        p.wait()
    t.ok(all(r.returncode == 0 for r in res.values()), "all 8 concurrent records succeeded",
         "\n".join(r.stderr for r in res.values()))
    total_drops = 0
    for kind, procs in (("busy", busy), ("idle", idle)):
        for p in procs:
            paths = res[p.pid].stdout.split()
            st = target_status(d, p.pid)
            drops = st["drops"] if st else -1
            total_drops += max(drops, 0)
            good, lost, pids = True, 0, set()
            for path in paths:
                ok, l, meta, _ = segment_facts(path)
                good &= ok
                lost += l
                pids.add((meta or {}).get("pid"))
            t.ok(paths and good, f"{kind} pid {p.pid}: {len(paths)} segments decode strictly")
            t.ok(pids == {str(p.pid)}, f"{kind} pid {p.pid}: every segment's metadata names its own pid {pids}")
            t.ok(all(f"/out-{p.pid}/" in x for x in paths), f"{kind} pid {p.pid}: segments only in its own --out")
            t.ok(drops == lost, f"{kind} pid {p.pid}: status drops {drops} == ring lost events in its trace {lost}")
            if kind == "idle":
                t.ok(drops == 0, f"idle pid {p.pid} has no drops while busy neighbours overflowed ({drops})")
    t.ok(alive(d), f"d9d still serving after 8 concurrent sessions ({total_drops} drops in all)")
    t.ok("AddressSanitizer" not in d.logtext(), "no sanitizer report")
    d.cleanup(keep=t.failed > 0)


def overflow(t):
    d = D9d(D9D, D9CTL, {"ring_size": "64K"}).start()
    tgt = start_target(TARGET, "mixed", "--duration", "6", "--workers", "2")
    time.sleep(0.3)
    r = d.ctl("record", "--pid", str(tgt.pid), "--duration", "3s", "--probes", "all")
    target_truth(tgt)
    paths = r.stdout.split()
    st = target_status(d, tgt.pid)
    drops = st["drops"] if st else -1
    t.ok(r.returncode == 0 and drops > 0, f"a 64 KiB ring under a busy target drops records ({drops})", r.stderr)
    lost, good = 0, True
    for p in paths:
        ok, l, _, _ = segment_facts(p)
        good &= ok
        lost += l
    t.ok(paths and good, f"all {len(paths)} segments with drops decode strictly")
    t.ok(lost == drops, f"drops counted exactly once: status {drops} == sum of ring D9LostEventsEvent {lost}")
    time.sleep(1)
    st2 = target_status(d, tgt.pid)
    t.ok(st2 and st2["drops"] == drops, "the count does not move after the session ended")
    t.ok(alive(d), "d9d keeps running and serving after the overflow")
    tgt2 = start_target(TARGET, "mixed", "--duration", "4")
    time.sleep(0.3)
    r2 = d.ctl("record", "--probes", "all", "--pid", str(tgt2.pid), "--duration", "1s")
    target_truth(tgt2)
    t.ok(r2.returncode == 0 and r2.stdout.split(), "a new recording works after the overflow", r2.stderr)
    d.cleanup(keep=t.failed > 0)


def diskfull(t):
    mnt = tempfile.mkdtemp(prefix="d9-rel-tmpfs-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", mnt]).returncode != 0:
        t.bail(f"cannot mount a tmpfs on {mnt}")
    d = D9d(D9D, D9CTL, {"rotate_period": "1s", "disk_budget": "0"}, state=mnt)
    logdir = tempfile.mkdtemp(prefix="d9-rel-log-")
    d.logpath = os.path.join(logdir, "d9d.log")   # the log must not live on the full disk
    filler = os.path.join(mnt, "filler")
    tgt = None
    try:
        d.start()
        tgt = start_target(TARGET, "mixed", "--duration", "40")
        time.sleep(0.3)
        r = d.ctl("attach", "--probes", "all", "--pid", str(tgt.pid), "--duration", "30s")
        t.ok(r.returncode == 0, "attached", r.stderr)
        before = wait_for(lambda: sealed_files(mnt) if len(sealed_files(mnt)) >= 2 else None, 20)
        t.ok(before, f"segments sealed before the disk fills: {before}")
        sums = {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in before or []}
        # On a loaded machine the segments may fill the tmpfs first, so that
        # even creating the filler fails: the disk is full either way.
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        except OSError:
            pass
        full = wait_for(lambda: "No space left on device" in d.logtext(), 20)
        t.ok(full, "d9d logs a clear 'No space left on device' error", d.logtext()[-2000:])
        line = [x for x in d.logtext().splitlines() if "No space left" in x][:1]
        print(f"# {line[0] if line else ''}")
        t.ok(alive(d), "d9d keeps running and serving with the disk full")
        intact = all(os.path.exists(p) and hashlib.sha256(open(p, "rb").read()).hexdigest() == s
                     for p, s in sums.items())
        t.ok(before and intact, "segments sealed before the disk filled are untouched")
        t.ok(before and all(segment_facts(p)[0] for p in before), "and decode strictly")
        # Space returns: the filler goes and the tmpfs grows (a raw segment of
        # a busy target can be bigger than what is left).
        if os.path.exists(filler):
            os.unlink(filler)
        subprocess.run(["mount", "-o", "remount,size=64m", mnt], check=True)
        left = [p for p in active_files(mnt)]
        t.ok(left, f"the segment cut by ENOSPC is kept on disk, not deleted: {left}")
        st = target_status(d, tgt.pid)
        state = st["state"] if st else None
        print(f"# session after ENOSPC: {state} ({st.get('reason', '') if st else ''})")
        if state == "recording":
            # Still recording: a new segment must appear and seal once space is back.
            n0 = len(sealed_files(mnt))
            t.ok(wait_for(lambda: len(sealed_files(mnt)) > n0, 20), "recording resumes into new segments")
            d.ctl("detach", "--pid", str(tgt.pid))
            after = sealed_files(mnt)[n0:]
        else:
            # The session ended on the write error: recording resumes by attaching again.
            wait_for(lambda: target_status(d, tgt.pid) and target_status(d, tgt.pid)["state"] == "done", 20)
            r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "2s")
            after = r.stdout.split()
            t.ok(r.returncode == 0 and after, "with space back, recording the target again works", r.stderr)
        t.ok(after and all(segment_facts(p)[0] for p in after), f"segments written after space returned decode ({len(after)})")
        t.ok(alive(d), "d9d still serving")
    finally:
        if tgt:
            tgt.kill()
            tgt.wait()
        d.stop()
        subprocess.run(["umount", "-l", mnt])
        os.rmdir(mnt)


def spawn_at_pid(want, args, env=None, tries=200):
    """Start a target whose pid is `want`: ns_last_pid makes the kernel hand
    out want next (racing other forks on the machine, hence the retries)."""
    for _ in range(tries):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(want - 1))
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        if p.pid == want:
            return p
        p.kill()
        p.wait()
    return None


def starttime_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def lifecycle(t):
    d = D9d(D9D, D9CTL, {"rotate_period": "1s"}).start()
    # fork, then exec, from inside an unmodified Tokio target (LD_PRELOAD shim).
    env = dict(os.environ, LD_PRELOAD=SHIM, D9_SHIM_FORK_MS="1500", D9_SHIM_EXEC_MS="3500",
               D9_SHIM_EXEC="/bin/sleep", D9_SHIM_EXEC_ARG="6")
    tgt = subprocess.Popen([TARGET, "mixed", "--duration", "20"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=env)
    time.sleep(0.5)
    t0 = time.time()
    r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "15s")
    took = time.time() - t0
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths, f"record of a forking, exec'ing target returned in {took:.1f} s", r.stderr)
    t.ok(took < 12, "the session ended at the exec, not at --duration")
    ended = [x for x in d.logtext().splitlines() if f"pid {tgt.pid}: session ended" in x]
    print(f"# {ended[0] if ended else 'no session-end line'}")
    exe = os.readlink(f"/proc/{tgt.pid}/exe") if tgt.poll() is None else ""
    st = target_status(d, tgt.pid)
    # (d9d names this end "target exited", not "target called exec": the
    # exec's de-thread looks like the runtime's threads exiting.)
    t.ok(ended and exe == "/usr/bin/sleep" and st and st["state"] == "done",
         f"session ended while the pid lives on as {exe or '?'}", st)
    good = all(segment_facts(p)[0] for p in paths)
    pids = {(segment_facts(p)[2] or {}).get("pid") for p in paths}
    t.ok(paths and good and pids == {str(tgt.pid)}, f"segments decode and name only the traced pid {pids}")
    st = d.status()
    sessions = [x for x in (st or {}).get("targets", [])]
    t.ok(len(sessions) == 1 and sessions[0]["pid"] == tgt.pid,
         "the forked child got no session of its own", sessions)
    tgt.kill()
    tgt.wait()

    # exit, then the same pid reused by a new target.
    a = start_target(TARGET, "mixed", "--duration", "3")
    time.sleep(0.3)
    pid = a.pid
    st_a = starttime_of(pid)
    ra = d.ctl("record", "--probes", "all", "--pid", str(pid), "--duration", "10s")
    target_truth(a)
    pa = ra.stdout.split()
    t.ok(ra.returncode == 0 and pa, f"first target (pid {pid}) recorded until it exited", ra.stderr)
    sums = {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in pa}
    b = spawn_at_pid(pid, [TARGET, "mixed", "--duration", "4"])
    if not t.ok(b is not None, f"a new target got the reused pid {pid} (ns_last_pid)"):
        d.cleanup(keep=True)
        return
    time.sleep(0.3)
    st_b = starttime_of(pid)
    rb = d.ctl("record", "--probes", "all", "--pid", str(pid), "--duration", "1500ms")
    target_truth(b)
    pb = rb.stdout.split()
    t.ok(rb.returncode == 0 and pb, "the pid's new owner is recorded", rb.stderr)
    t.ok(st_a != st_b and all(f"/{pid}-{st_a}/" in p or f"/{pid}-" in p for p in pa), f"start times differ ({st_a}, {st_b})")
    dirs_a = {os.path.dirname(p) for p in pa}
    dirs_b = {os.path.dirname(p) for p in pb}
    t.ok(dirs_a and dirs_b and not (dirs_a & dirs_b), f"separate session folders {dirs_a} {dirs_b}")
    t.ok(all(hashlib.sha256(open(p, "rb").read()).hexdigest() == s for p, s in sums.items()),
         "the first target's segments were not touched")
    t.ok(all(segment_facts(p)[0] for p in pa + pb), "both targets' segments decode strictly")
    st = d.status(pid)
    n = len((st or {}).get("targets", []))
    t.ok(n == 2 and len({x["starttime"] for x in st["targets"]}) == 2, f"status keeps two sessions for pid {pid} ({n})",
         st)
    t.ok(alive(d), "d9d still serving")
    d.cleanup(keep=t.failed > 0)


def fuzz_lines(rng, n):
    cmds = ["ping", "list", "status", "attach", "detach", "record", "", "ATTACH", "x" * 300]
    vals = [None, True, -1, 0, 2 ** 31, 2 ** 63, -2 ** 63, 1e308, "1", "", [], {}, [1, 2], {"a": 1}, "\u0000", "é" * 50]
    for _ in range(n):
        k = rng.random()
        if k < 0.3:
            line = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b" ")
        elif k < 0.8:
            req = {"v": 1 if rng.random() < 0.9 else rng.choice(vals), "cmd": rng.choice(cmds)}
            for key in rng.sample(["pid", "duration_ms", "probes", "exe", "session", "cmd", "zzz"], rng.randrange(4)):
                req[key] = rng.choice(vals)
            # Never a real pid: the fuzzer must not attach BPF to a live process.
            if isinstance(req.get("pid"), int) and not isinstance(req.get("pid"), bool) and 0 < req["pid"] < 2 ** 22:
                req["pid"] = -req["pid"]
            line = json.dumps(req).encode()
            if rng.random() < 0.2:
                line = line[:rng.randrange(len(line))]
        elif k < 0.9:
            depth = rng.randrange(1, 5000)
            line = b'{"v":1,"cmd":' + b"[" * depth + b"]" * depth + b"}"
        else:
            line = b'{"v":1,"cmd":"ping","pad":"' + b"A" * rng.randrange(1, 2 << 20) + b'"}'
        yield line + b"\n"


def fuzz(t):
    os.environ["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
    os.environ["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=24"
    d = D9d(D9D, D9CTL).start()
    rng = random.Random(int(os.environ.get("D9_FUZZ_SEED", "10")))
    sent, answered, errors, oks, batches, bad_answers = 0, 0, 0, 0, 0, []
    lines = list(fuzz_lines(rng, 1500))
    for i in range(0, len(lines), 25):
        batch = lines[i:i + 25]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        try:
            s.connect(d.sock)
            s.sendall(b"".join(batch))
            s.shutdown(socket.SHUT_WR)
            buf = b""
            while True:
                c = s.recv(65536)
                if not c:
                    break
                buf += c
        except OSError:
            buf = b""
        finally:
            s.close()
        sent += len(batch)
        batches += 1
        for ln in buf.splitlines():
            answered += 1
            try:
                j = json.loads(ln)
                errors += j.get("ok") is False and bool(j.get("error"))
                oks += j.get("ok") is True
            except ValueError:
                bad_answers.append(ln[:200])
        if d.proc.poll() is not None:
            break
    t.ok(d.proc.poll() is None, f"d9d survived {sent} fuzzed lines in {batches} connections")
    t.ok(not bad_answers and errors + oks == answered,
         f"every answer is one JSON line with ok and, when false, an error ({answered} answers)", bad_answers[:5])
    t.ok(errors > sent // 2 and oks > 0, f"bad requests get errors ({errors}), good ones still succeed ({oks})")
    r = d.ctl("list")
    t.ok(r.returncode == 0, "d9d still serving after the fuzz", r.stderr)
    st = d.status()
    t.ok(st is not None and not st.get("targets"), "the fuzz attached nothing", st)
    # The sanitized d9d also records a real target, so attach, drain, seal
    # and detach run instrumented before the leak check at exit.
    tgt = start_target(TARGET, "mixed", "--duration", "5")
    time.sleep(0.3)
    r = d.ctl("record", "--pid", str(tgt.pid), "--duration", "2s", "--probes", "all")
    target_truth(tgt)
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths and all(segment_facts(p)[0] for p in paths),
         f"the sanitized d9d records a real target ({len(paths)} segments decode)", r.stderr)
    rc = d.stop()
    log = d.logtext()
    t.ok(rc == 0, f"d9d exits cleanly on SIGTERM (rc {rc}; 23 = ASan/LSan report, 24 = UBSan)", log[-3000:])
    t.ok("ERROR: AddressSanitizer" not in log and "ERROR: LeakSanitizer" not in log and "runtime error:" not in log,
         "no sanitizer report in the log", log[-3000:])
    d.cleanup(keep=t.failed > 0)


def main():
    t = Tap()
    {"multi": multi, "overflow": overflow, "diskfull": diskfull, "lifecycle": lifecycle, "fuzz": fuzz}[MODE](t)
    t.done()


main()
