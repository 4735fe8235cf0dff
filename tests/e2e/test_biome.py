#!/usr/bin/env python3
"""A fourth Tokio release nobody here built: Biome's daemon from the npm
registry (glibc PIE, stripped, 100 MB, Tokio 1.54), formatting and linting
a few hundred files for clients over its local socket. d9d attaches mid-run
while two CPU hogs hold both cores, records with the default set and then
with every probe, and the two recordings must agree with the runtime:
 - runtime.main is the runtime's workers (Tokio's default: one per CPU),
   in both;
 - no worker id was given to a thread standing in for its worker (status
   `workers.ids_by_thread` 0): with the default set BPF found where the
   Worker lies on the stack, which it never did here before (112 words
   dereferenced before it, 7,040 bytes down, against a cap of 96);
 - the same thread is the same worker in both: ids are Tokio's own index
   of the Worker, whichever set read it (a thread stand-in numbered them
   in the order threads showed up);
 - with every probe, task polls are on those workers only and never
   overlap on one, the blocking pool's jobs are blocking-pool polls, and a
   terminate comes for >= 95 % of the tasks seen spawning.
Usage: test_biome.py D9D D9CTL BIOME"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events  # noqa

D9D, D9CTL, BIOME = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])


def make_project(root):
    src = os.path.join(root, "src")
    os.makedirs(src)
    with open(os.path.join(root, "biome.json"), "w") as f:
        f.write("{}\n")
    for i in range(120):
        with open(os.path.join(src, f"f{i}.js"), "w") as f:
            f.write("\n".join(f"const  x{j} = {{a:1,b:[1,2,3], c: function( y ){{ return y*{j} }} }};"
                              for j in range(150)))


def server_pid(marker):
    """The daemon `biome start` left behind: its command line names our log dir."""
    for _ in range(100):
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if b"__run_server" in cmd and any(marker.encode() in a for a in cmd):
                return int(p)
        time.sleep(0.1)
    return None


def drive(env, root, stop, done):
    """done: {"answered": [(start, end) of each run the daemon answered],
    "not": runs it did not, "why": the first such run's output}."""
    while not stop.is_set():
        for verb in ("format", "lint"):
            t0 = time.monotonic()
            # No diagnostics printed: the client's printing took twice the
            # daemon's work, and under load the daemon sat idle through
            # whole recordings (the clean-root failure of this test).
            r = subprocess.run([BIOME, verb, "--use-server", "--max-diagnostics=0", "src"], cwd=root, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            # format and lint exit 1 for the files they find to fix; a
            # client that reached no daemon says so and exits otherwise.
            if r.returncode in (0, 1) and b"Checked" in r.stdout:
                done["answered"].append((t0, time.monotonic()))
            else:
                done["not"] += 1
                done["why"] = done["why"] or r.stdout.decode(errors="replace")[-400:]


def answered_within(done, window):
    """Client runs the daemon answered that overlap the window (start, end)."""
    return sum(1 for a, b in done["answered"] if a < window[1] and b > window[0])


def read(paths):
    """What one recording says about workers, polls and tasks."""
    r = {"meta": {}, "lanes": {}, "polls": 0, "off": [], "overlaps": 0, "blocking": 0,
         "spawned": set(), "terminated": set()}
    open_poll = {}
    for ev in dump_events(D9CTL, paths):
        name, f = ev.get("event"), ev.get("fields", {})
        if name == "SegmentMetadataEvent":
            r["meta"] = f.get("entries", {})
        elif name in ("WorkerParkEvent", "WorkerUnparkEvent"):
            r["lanes"].setdefault(f["worker_id"], set()).add(f["tid"])
        elif name == "PollStartEvent":
            w = f["worker_id"]
            r["polls"] += 1
            if not 0 <= w < os.cpu_count():
                r["off"].append(w)
            r["overlaps"] += w in open_poll
            open_poll[w] = True
        elif name == "PollEndEvent":
            open_poll.pop(f["worker_id"], None)
        elif name == "D9BlockingPollEvent":
            r["blocking"] += 1
        elif name == "TaskSpawnEvent":
            r["spawned"].add(f["task_id"])
        elif name == "TaskTerminateEvent":
            r["terminated"].add(f["task_id"])
    return r


def main():
    t = Tap()
    if not os.access(BIOME, os.X_OK):
        t.bail(f"no {BIOME}: scripts/bootstrap fetches it from the npm registry")
    tmp = tempfile.mkdtemp(prefix="d9-biome-")
    root = os.path.join(tmp, "proj")
    make_project(root)
    logs = os.path.join(tmp, "log")
    env = dict(os.environ, HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, "cache"), BIOME_LOG_PATH=logs)
    subprocess.run([BIOME, "start"], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=30)
    pid = server_pid(logs)
    if not pid:
        t.bail("biome start left no daemon")
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-biome-out-")
    d.start_or_bail(t)
    workers = os.cpu_count()
    stop, done = threading.Event(), {"answered": [], "not": 0, "why": ""}
    # Two clients at a time: the daemon has work through every recording.
    drivers = [threading.Thread(target=drive, args=(env, root, stop, done)) for _ in range(2)]
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)]
    runs, status, windows = {}, {}, {}
    try:
        for driver in drivers:
            driver.start()
        time.sleep(1.5)  # mid-run: the daemon is already formatting
        for probes in ("default", "all"):
            args = ["--probes", "all"] if probes == "all" else []
            out = tempfile.mkdtemp(prefix=f"d9-biome-{probes}-", dir=d.out)
            t0 = time.monotonic()
            runs[probes] = d.ctl("record", *args, "--pid", str(pid), "--duration", "4s", "--out", out)
            windows[probes] = (t0, time.monotonic())
            status[probes] = ((d.status(pid) or {}).get("targets") or [{}])[0].get("workers", {})
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        stop.set()
        for driver in drivers:
            driver.join()
        subprocess.run([BIOME, "stop"], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=30)
    got = {}
    for probes, r in runs.items():
        t.ok(r.returncode == 0, f"record --pid ({probes}) of biome's daemon under 2 CPU hogs", r.stderr)
        got[probes] = read(r.stdout.split())
    during = {p: answered_within(done, w) for p, w in windows.items()}
    t.ok(all(n >= 2 for n in during.values()) and not done["not"],
         f"the daemon answered clients during each recording ({during}; {done['not']} runs not answered)",
         done["why"])
    want = ",".join(str(i) for i in range(workers))
    for probes, g in got.items():
        t.ok(g["meta"].get("runtime.main") == want,
             f"{probes}: runtime.main is the runtime's {workers} workers: {g['meta'].get('runtime.main')!r}",
             f"{g['polls']} polls, park lanes {sorted(g['lanes'])}, status {status[probes]}")
        t.ok(status[probes].get("ids_by_thread") == 0 and status[probes].get("polls_by_thread") == 0,
             f"{probes}: every worker id came from the runtime's Worker, none from a thread (status: "
             f"{status[probes]})")
    lanes = {p: {w: sorted(tids) for w, tids in g["lanes"].items()} for p, g in got.items()}
    moved = status["default"].get("hand_offs", 0) + status["all"].get("hand_offs", 0)
    t.ok(moved == 0 and lanes["default"] == lanes["all"] and len(lanes["all"]) == workers,
         f"each worker is the same thread under both sets (Tokio's own index; cores moved {moved} times): "
         f"default {lanes['default']}, all {lanes['all']}")
    a = got["all"]
    t.ok(a["polls"] > 1000 and not a["off"] and not a["overlaps"],
         f"all: {a['polls']} task polls on the workers ({len(a['off'])} not: {a['off'][:5]}), "
         f"none overlapping on a lane ({a['overlaps']})")
    t.ok(a["blocking"] >= 50, f"all: the blocking pool's jobs are blocking-pool polls ({a['blocking']})")
    ended = len(a["spawned"] & a["terminated"])
    t.ok(a["spawned"] and ended >= 0.95 * len(a["terminated"]) and len(a["terminated"]) >= 0.9 * len(a["spawned"]) - 100,
         f"all: {len(a['terminated'])} terminates for {len(a['spawned'])} tasks seen spawning ({ended} both)")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if not t.failed:
        shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
