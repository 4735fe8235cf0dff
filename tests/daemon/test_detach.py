#!/usr/bin/env python3
"""Detach of a real d9d from a real Tokio target: the reply comes once the
target records nothing more and its last segment is queued for sealing;
the uprobe links go away in the background afterwards, which `status`
reports (daemon.bpf_teardowns_pending). Pinned down here:
  - after detach, the pending teardowns reach 0 within a bounded time and
    d9d then holds no uprobe link and no ring buffer of that target
    (read from d9d's own /proc fdinfo);
  - the detached session's segment is sealed and decodes, with its polls;
  - attaching again to the same pid right after a detach works (a new
    attach waits for that pid's teardown) and records polls again;
  - finished sessions stay listed with their plan, but d9d keeps no
    descriptor of the target's executable for them (a big binary's plan
    and fd per session used to stay until 64 finished sessions were kept);
  - d9d stopping right after a detach exits cleanly (it joins the pending
    teardown) and leaves no link or program of its own behind.
Usage: test_detach.py D9D D9CTL TARGET"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap, bpf_links_of, bpf_prog_names, dump_summary, start_target, wait_for  # noqa: E402

D9D, D9CTL, TARGET = sys.argv[1:4]
BPF_MAP_TYPE_RINGBUF = 27
TEARDOWN_LIMIT_S = 5   # a teardown is one RCU-tasks grace period: ~0.1 s


def bpf_fds(pid):
    """(uprobe_multi links, ring buffer maps) held by pid's open fds."""
    links = rings = 0
    fdinfo = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fdinfo):
        try:
            with open(os.path.join(fdinfo, fd)) as f:
                info = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if fields.get("link_type") == "uprobe_multi":
            links += 1
        if fields.get("map_type") == str(BPF_MAP_TYPE_RINGBUF):
            rings += 1
    return links, rings


def d9d_prog_ids(pid):
    """Ids of the BPF programs pid holds by fd or link."""
    ids = {prog for _, prog in bpf_links_of(pid)}
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split(":")[1]))
        except OSError:
            pass
    return ids


def fds_on(pid, path):
    """How many of pid's fds are open on the file at path."""
    real, n = os.path.realpath(path), 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == real
        except OSError:
            pass
    return n


def pending(d):
    st = d.status()
    return st["daemon"].get("bpf_teardowns_pending") if st else None


def wait_teardown(t, d, what):
    """Bounded poll for the background teardown; a clear failure if stuck."""
    n = wait_for(lambda: pending(d) == 0, TEARDOWN_LIMIT_S, step=0.01)
    t.ok(n, f"{what}: status reports no pending BPF teardown within {TEARDOWN_LIMIT_S} s",
         f"still pending: {pending(d)}")
    links, rings = bpf_fds(d.proc.pid)
    t.ok(links == 0 and rings == 0,
         f"{what}: then d9d holds no uprobe_multi link and no ring buffer ({links} links, {rings} rings)")


def polls_of(path):
    ok, counts, text = dump_summary(D9CTL, path)
    return ok, counts.get("PollStartEvent", 0), text


def sealed_of(d, pid, session):
    def find():
        st = d.status(pid)
        for s in (st or {}).get("targets", []):
            if s["session"] == session and s["state"] == "done":
                return s["sealed"]
        return None
    return wait_for(find, 30)


def attach(t, d, pid, what):
    # --wait-plan: the links are counted right after the attach, so it
    # returns once the uprobes are in, not once recording has begun.
    r = d.ctl("attach", "--pid", str(pid), "--probes", "all", "--wait-plan")
    st = d.status(pid)
    live = [s for s in (st or {}).get("targets", []) if s["state"] == "recording"]
    t.ok(r.returncode == 0 and live, f"{what}: attach succeeds", r.stderr)
    return live[0]["session"] if live else None


def main():
    t = Tap()
    d = D9d(D9D, D9CTL).start_or_bail(t)
    tgt = start_target(TARGET, "mixed", "--duration", "30")
    time.sleep(0.5)

    s1 = attach(t, d, tgt.pid, "first session")
    links, rings = bpf_fds(d.proc.pid)
    t.ok(links >= 1 and rings == 1, f"while recording d9d holds the links and one ring ({links} links, {rings} rings)")
    time.sleep(1.0)
    r = d.ctl("detach", "--pid", str(tgt.pid))
    t.ok(r.returncode == 0, "detach succeeds", r.stderr)
    n = pending(d)
    t.ok(isinstance(n, int) and n >= 0, f"status reports pending BPF teardowns as a count ({n})")
    wait_teardown(t, d, "after detach")
    sealed = sealed_of(d, tgt.pid, s1)
    ok, polls, text = polls_of(sealed[0]) if sealed else (False, 0, "no sealed segment")
    t.ok(ok and polls > 0, f"the detached session's segment is sealed, decodes, has polls ({polls})", text[-800:])

    # Detach then attach the same pid at once: the old links may still be
    # going away; the new session must start clean and record.
    s2 = attach(t, d, tgt.pid, "re-attach right after a detach")
    r = d.ctl("detach", "--pid", str(tgt.pid))
    s3 = attach(t, d, tgt.pid, "re-attach right after a second detach")
    time.sleep(1.0)
    r = d.ctl("detach", "--pid", str(tgt.pid))
    t.ok(r.returncode == 0, "detach of the third session succeeds", r.stderr)
    for s in (s2, s3):
        sealed = sealed_of(d, tgt.pid, s) if s else None
        t.ok(sealed, f"session {s} ends sealed")
    # Every segment of it: the busy target can fill one just before the
    # detach, and the last then holds only the tail (5 events, 17 us once).
    sealed = sealed_of(d, tgt.pid, s3) if s3 else None
    ok, polls, text = bool(sealed), 0, "no sealed segment"
    for path in sealed or []:
        seg_ok, seg_polls, text = polls_of(path)
        ok, polls = ok and seg_ok, polls + seg_polls
    t.ok(ok and polls > 0, f"the re-attached session records polls ({polls} in {len(sealed or [])} segments)",
         text[-800:])
    wait_teardown(t, d, "after the re-attach round")
    done = [s for s in (d.status(tgt.pid) or {}).get("targets", []) if s["state"] == "done"]
    planned = [s for s in done if s["plan"].get("state") == "ready" and s["probe_plan"]
               and s["probe_plan"]["attached"].get("poll")]
    kept = fds_on(d.proc.pid, TARGET)
    t.ok(len(done) == 3 and len(planned) == 3 and kept == 0,
         f"the {len(done)} finished sessions still show their plan ({len(planned)}), and d9d holds no fd on "
         f"the target's executable ({kept})", json.dumps([s["plan"] for s in done]))

    # Stop d9d right after a detach, teardown still in flight.
    attach(t, d, tgt.pid, "last session")
    time.sleep(0.3)
    progs = d9d_prog_ids(d.proc.pid)
    r = d.ctl("detach", "--pid", str(tgt.pid))
    rc = d.stop()
    t.ok(rc == 0, f"d9d stopped right after a detach exits 0 (rc {rc})", d.logtext()[-1500:])
    # Its programs by id (bpftool here cannot name a link's owner): no
    # link runs one, and none stays loaded (a program goes after an RCU
    # grace period once its last link and fd have).
    def left():
        out = subprocess.run(["bpftool", "-j", "link", "show"], capture_output=True, text=True, timeout=30)
        links = [lk for lk in json.loads(out.stdout or "[]") if lk.get("prog_id") in progs]
        return links, progs & set(bpf_prog_names())
    wait_for(lambda: left() == ([], set()), 5, step=0.1)
    links, loaded = left()
    t.ok(progs and not links and not loaded,
         f"no BPF link or program of that d9d is left ({len(links)} links, {len(loaded)} of its "
         f"{len(progs)} programs)")

    tgt.kill()
    tgt.wait()
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
