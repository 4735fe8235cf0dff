#!/usr/bin/env python3
"""Installing and stopping a big target's BPF side (issue 16: 10-850 ms of
verifier, grace periods and uprobe registration) runs on d9d's BPF thread,
not on the loop that drains every other session: root records a busy Tokio
target with an 8 MiB ring while a user's big stripped Tokio release (npm
codex, 7 000+ uprobes) is attached and detached again and again. Root's
session keeps zero drops, the loop's longest turn stays well under the
longest BPF job, and a detach is answered only once its session's end is
through (segment closed and queued), with nothing left behind.

Usage: test_bpf_off_loop.py D9D D9CTL TARGET BIG_BINARY"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, StallWatch, Tap, start_target, wait_for  # noqa


def stalls_logged(d, since=0):
    """The drain loop's long turns d9d logged (over 250 ms), in ms."""
    return [int(line.split("held ")[1].split()[0]) for line in d.logtext()[since:].splitlines()
            if "the drain loop was held" in line]


def main():
    d9d, d9ctl, target, big = sys.argv[1:4] + [os.path.abspath(sys.argv[4])]
    t = Tap()
    if not os.path.exists(big):
        t.bail(f"no big Tokio binary at {big}: scripts/bootstrap fetches it")
    d = D9d(d9d, d9ctl, {"ring_size": "8M"})
    d.start_or_bail(t)
    home = tempfile.mkdtemp(prefix="d9-offloop-home-", dir="/var/tmp")
    busy = start_target(target, "mixed", "--duration", "120", "--workers", "2", stdout=subprocess.DEVNULL)
    def codex():
        return subprocess.Popen([big, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=home,
                                env=dict(os.environ, HOME=home, CODEX_HOME=home, RUST_LOG="off"))
    app = codex()
    # Idle copies of the same file: the kernel registers each uprobe in
    # every address space that maps it, so the installs take several times
    # as long (a quiet machine installed 7,000 uprobes in one copy in 36 ms,
    # too close to the loop's own turns to tell the two apart; with 3
    # copies a CI run's longest install was still 16 ms, and the host's 72).
    copies = [codex() for _ in range(8)]
    watch = None
    try:
        time.sleep(0.5)
        r = d.ctl("attach", "--pid", str(busy.pid), "--probes", "all", "--duration", "100s")
        t.ok(r.returncode == 0, "root attaches to a busy Tokio target", r.stderr)
        time.sleep(1.5)
        st = (d.status(busy.pid) or {}).get("targets", [{}])[0]
        t.ok(st.get("drops") == 0, f"no drops before the big attaches ({st.get('drops')})")
        log_at = len(d.logtext())
        answers = []
        # The loop's longest turn of the last 10-20 s, sampled through the
        # attaches and detaches (the log names only turns over 250 ms).
        window = {"max": 0, "stop": False}

        def sample():
            while not window["stop"]:
                # Root's small session only: a status with the big target's
                # 7,000-point plan is itself a long turn of the loop.
                dj = (d.status(busy.pid) or {}).get("daemon", {})
                window["max"] = max(window["max"], dj.get("loop_recent_max_stall_ms", 0))
                time.sleep(0.5)
        sampler = threading.Thread(target=sample)
        base_stall = (d.status(busy.pid) or {}).get("daemon", {}).get("loop_recent_max_stall_ms", 0)
        time.sleep(20)  # the start's turns age out of the recent maximum
        watch = StallWatch()
        sampler.start()
        for _ in range(3):
            t0 = time.time()
            # --wait-plan: one install job with every uprobe, which is what
            # this measures (a plain attach returns before the plan, and the
            # detach 0.5 s later came before it: no uprobe was ever installed).
            a = d.ctl("attach", "--pid", str(app.pid), "--probes", "all", "--duration", "60s", "--wait-plan")
            attach_s = time.time() - t0
            time.sleep(0.5)
            t0 = time.time()
            x = d.ctl("detach", "--pid", str(app.pid))
            detach_s = time.time() - t0
            sess = [s for s in (d.status(app.pid) or {}).get("targets", []) if s.get("pid") == app.pid]
            answers.append((a, x, attach_s, detach_s, sess[0] if sess else {}))
        attached = [m for m in answers if m[0].returncode == 0]
        uprobes = [line for line in d.logtext()[log_at:].splitlines() if f"pid {app.pid} " in line and "uprobes" in line]
        t.ok(len(attached) == 3 and all(m[1].returncode == 0 for m in answers),
             f"the big target was attached and detached 3 times ({'; '.join(uprobes[-1:])})",
             "\n".join(m[0].stderr + m[1].stderr for m in answers))
        ended = [m[4].get("state") for m in answers]
        t.ok(all(s in ("sealing", "done") for s in ended),
             f"each detach was answered once its session had ended and queued its segment (states {ended})",
             json.dumps([m[4] for m in answers])[:2000])
        window["stop"] = True
        sampler.join()
        # A pause of the whole machine lengthens whichever turn it falls in.
        paused_ms = max([(b - a) // 1_000_000 for a, b in watch.stop()], default=0)
        st = (d.status(busy.pid) or {}).get("targets", [{}])[0]
        daemon = (d.status() or {}).get("daemon", {})
        stalls = stalls_logged(d, log_at) + [window["max"]]
        longest_bpf = daemon.get("bpf_job_longest_ms", 0)
        alive = sum(c.poll() is None for c in copies)
        print(f"# {alive} of {len(copies)} idle copies alive; "
              f"attach s {[round(m[2], 2) for m in answers]}, detach s {[round(m[3], 2) for m in answers]}; "
              f"longest BPF job {longest_bpf} ms, plan {daemon.get('plan_longest_ms')} ms; loop's longest turns "
              f"(logged, then sampled): {stalls} (before: {base_stall}); root's session {st.get('events')} events, "
              f"{st.get('drops')} drops; the machine's longest pause {paused_ms} ms")
        t.ok(st.get("state") == "recording" and st.get("drops") == 0,
             f"root's busy session kept zero drops through the installs and stops ({st.get('drops')} drops)",
             json.dumps(st)[:1000])
        # On the loop, each install would hold it for the whole job, so no
        # turn could be shorter than the longest job; off the loop the turns
        # are independent of it. That tells the two apart only if the job
        # is clearly longer than the loop's own turns before the attaches
        # (a few ms when quiet, 9-10 ms in CI roots beside this busy
        # session): 5 ms more, and 10 ms at least. A fixed 40 ms failed
        # where this kernel installed the 7,000 uprobes in 16 and 36 ms
        # (the host: 72-84 ms); the loop's turns before them were 9 and 10 ms.
        t.ok(longest_bpf >= max(10, base_stall + 5),
             f"the BPF jobs took long enough to tell ({longest_bpf} ms; the loop's turns before: {base_stall} ms)",
             json.dumps(daemon))
        t.ok(max(stalls) - paused_ms < longest_bpf,
             f"the drain loop's longest turn meanwhile ({max(stalls)} ms, less the machine's longest pause "
             f"{paused_ms} ms) was shorter than the longest BPF job ({longest_bpf} ms)", json.dumps(daemon))
        t.ok(wait_for(lambda: (d.status() or {}).get("daemon", {}).get("bpf_teardowns_pending") == 0, 30),
             "the big target's uprobe links are all gone afterwards")
    finally:
        if watch:
            watch.stop()
        busy.kill()
        app.kill()
        for c in copies:
            c.kill()
        app.wait()
        busy.wait()
    t.ok(d.stop() == 0, "d9d exits 0 on SIGTERM")
    d.cleanup(keep=t.failed > 0)
    subprocess.run(["rm", "-rf", home])
    t.done()


main()
