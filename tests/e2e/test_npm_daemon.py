#!/usr/bin/env python3
"""Tokio releases nobody here built, each a long-lived daemon from the npm
registry kept busy by its own clients:
 - biome: Biome's daemon (glibc PIE, stripped, 100 MB, Tokio 1.54),
   formatting and linting a few hundred files for clients over its local
   socket;
 - turbo: Turborepo's daemon (musl static-pie, stripped, 34 MB, Tokio 1.45),
   watching a workspace whose files keep changing (its inotify thread feeds
   the runtime, the blocking pool hashes) and answering status requests.
d9d attaches mid-run while two CPU hogs hold both cores, records with the
default set and then with every probe, and the two recordings must agree
with the runtime:
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
Usage: test_npm_daemon.py D9D D9CTL biome|turbo BINARY"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_events, start_cpu_hogs, stop_procs  # noqa

D9D, D9CTL, APP, BINARY = sys.argv[1], sys.argv[2], sys.argv[3], os.path.abspath(sys.argv[4])


def make_project(root):
    src = os.path.join(root, "src")
    os.makedirs(src)
    with open(os.path.join(root, "biome.json"), "w") as f:
        f.write("{}\n")
    for i in range(120):
        with open(os.path.join(src, f"f{i}.js"), "w") as f:
            f.write("\n".join(f"const  x{j} = {{a:1,b:[1,2,3], c: function( y ){{ return y*{j} }} }};"
                              for j in range(150)))


def biome_pid(marker):
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


class App:
    """A daemon release: start() -> its pid, client(n) -> (answered, output),
    stop(); polls and blocking: what every probe must see of it in 4 s."""
    root = env = None

    def run(self, *args, timeout=30, capture=True):
        """The release with args in the project. capture=False for a command
        that leaves a daemon behind: it inherits the output pipe, which
        then never closes."""
        out = subprocess.PIPE if capture else subprocess.DEVNULL
        return subprocess.run([BINARY, *args], cwd=self.root, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout)


class Biome(App):
    polls, blocking = 1000, 50  # at least, with every probe, in 4 s

    def __init__(self, tmp):
        self.root = os.path.join(tmp, "proj")
        make_project(self.root)
        self.logs = os.path.join(tmp, "log")
        self.env = dict(os.environ, HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, "cache"), BIOME_LOG_PATH=self.logs)

    def start(self):
        self.run("start", capture=False)
        return biome_pid(self.logs)

    def client(self, n):
        """One client run: did the daemon answer it? (ok, output)."""
        # No diagnostics printed: the client's printing took twice the
        # daemon's work, and under load the daemon sat idle through whole
        # recordings (the clean-root failure of this test).
        r = self.run(("format", "lint")[n % 2], "--use-server", "--max-diagnostics=0", "src", timeout=60)
        # format and lint exit 1 for the files they find to fix; a client
        # that reached no daemon says so and exits otherwise.
        return r.returncode in (0, 1) and b"Checked" in r.stdout, r.stdout

    def stop(self):
        self.run("stop")


class Turbo(App):
    polls, blocking = 300, 10

    def __init__(self, tmp):
        self.root = os.path.join(tmp, "repo")
        self.env = dict(os.environ, HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, "cache"),
                        TURBO_TELEMETRY_DISABLED="1", TURBO_NO_UPDATE_NOTIFIER="1")
        names = [f"p{i}" for i in range(6)]
        files = {"package.json": '{"name": "repo", "private": true, "packageManager": "npm@10.0.0", '
                                 '"workspaces": ["packages/*"]}\n',
                 "turbo.json": '{"tasks": {"build": {"outputs": ["dist/**"]}}}\n'}
        lock = {"": {"name": "repo", "workspaces": ["packages/*"]}}
        for n in names:
            files[f"packages/{n}/package.json"] = json.dumps({"name": n, "version": "1.0.0",
                                                              "scripts": {"build": "true"}}) + "\n"
            for k in range(40):
                files[f"packages/{n}/src/m{k}.js"] = f"export const v{k} = {k};\n" * 50
            lock[f"node_modules/{n}"] = {"resolved": f"packages/{n}", "link": True}
            lock[f"packages/{n}"] = {"version": "1.0.0"}
        files["package-lock.json"] = json.dumps({"name": "repo", "lockfileVersion": 3, "requires": True,
                                                 "packages": lock}, indent=2) + "\n"
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(self.root, rel)), exist_ok=True)
            with open(os.path.join(self.root, rel), "w") as f:
                f.write(text)
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=d9", "-c", "user.email=d9@localhost",
                                                     "commit", "-qm", "repo"]):
            subprocess.run(["git", *args], cwd=self.root, check=True, stdout=subprocess.DEVNULL)
        self.files = sorted(os.path.join(self.root, rel) for rel in files if "/src/" in rel)

    def start(self):
        self.run("daemon", "start", capture=False)
        out = self.run("daemon", "status").stdout.decode(errors="replace")
        pidfile = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("pid file:")), "")
        try:
            with open(pidfile) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def client(self, n):
        """Change 20 files the daemon watches (it rehashes them), then ask it
        for its status over its socket: (answered, output)."""
        for i in range(20):
            with open(self.files[(n * 20 + i) % len(self.files)], "a") as f:
                f.write(f"// {n}\n")
        r = self.run("daemon", "status")
        return r.returncode == 0 and b"daemon is running" in r.stdout, r.stdout

    def stop(self):
        self.run("daemon", "stop")


def drive(app, stop, done):
    """done: {"answered": [(start, end) of each client run the daemon
    answered], "not": runs it did not, "why": the first such run's output}."""
    n = 0
    while not stop.is_set():
        t0 = time.monotonic()
        ok, out = app.client(n)
        n += 1
        if ok:
            done["answered"].append((t0, time.monotonic()))
        else:
            done["not"] += 1
            done["why"] = done["why"] or out.decode(errors="replace")[-400:]


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
    if not os.access(BINARY, os.X_OK):
        t.bail(f"no {BINARY}: scripts/bootstrap fetches it from the npm registry")
    tmp = tempfile.mkdtemp(prefix=f"d9-{APP}-")
    app = {"biome": Biome, "turbo": Turbo}[APP](tmp)
    pid = app.start()
    if not pid:
        t.bail(f"{APP}: starting its daemon left none")
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix=f"d9-{APP}-out-")
    d.start_or_bail(t)
    workers = os.cpu_count()
    stop, done = threading.Event(), {"answered": [], "not": 0, "why": ""}
    # Two clients at a time: the daemon has work through every recording.
    drivers = [threading.Thread(target=drive, args=(app, stop, done)) for _ in range(2)]
    hogs = start_cpu_hogs()
    runs, status, windows = {}, {}, {}
    try:
        for driver in drivers:
            driver.start()
        time.sleep(1.5)  # mid-run: the daemon is already formatting
        for probes in ("default", "all"):
            args = ["--probes", "all"] if probes == "all" else []
            out = tempfile.mkdtemp(prefix=f"d9-{APP}-{probes}-", dir=d.out)
            t0 = time.monotonic()
            runs[probes] = d.ctl("record", *args, "--pid", str(pid), "--duration", "4s", "--out", out)
            windows[probes] = (t0, time.monotonic())
            status[probes] = ((d.status(pid) or {}).get("targets") or [{}])[0].get("workers", {})
    finally:
        stop_procs(hogs)
        stop.set()
        for driver in drivers:
            driver.join()
        app.stop()
    got = {}
    for probes, r in runs.items():
        t.ok(r.returncode == 0, f"record --pid ({probes}) of {APP}'s daemon under 2 CPU hogs", r.stderr)
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
    t.ok(a["polls"] >= app.polls and not a["off"] and not a["overlaps"],
         f"all: {a['polls']} task polls on the workers ({len(a['off'])} not: {a['off'][:5]}), "
         f"none overlapping on a lane ({a['overlaps']})")
    t.ok(a["blocking"] >= app.blocking, f"all: the blocking pool's jobs are blocking-pool polls ({a['blocking']})")
    ended = len(a["spawned"] & a["terminated"])
    t.ok(a["spawned"] and ended >= 0.95 * len(a["terminated"]) and len(a["terminated"]) >= 0.9 * len(a["spawned"]) - 100,
         f"all: {len(a['terminated'])} terminates for {len(a['spawned'])} tasks seen spawning ({ended} both)")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if not t.failed:
        shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
