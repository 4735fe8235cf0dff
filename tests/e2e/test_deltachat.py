#!/usr/bin/env python3
"""A Tokio release nobody here built, doing real work: deltachat-rpc-server
from the npm registry (musl static-pie, stripped, Tokio 1.53), whose
multi-thread runtime calls SQLite through block_in_place, so its worker
cores move between threads many times a second. The test drives it over
its stdio JSON-RPC (an account, then contacts, chats and drafts, four
requests in flight), attaches mid-run with --probes all while two CPU hogs
hold both cores, TRIES times, and checks what the trace says:
 - runtime.main is the runtime's workers and nothing else (Tokio's default
   is one per CPU), every task poll is on one of them, polls on one worker
   never overlap, and the cores did move (several threads park as one
   worker): ids come from the runtime's own Worker, not from threads;
 - the blocking pool's jobs are D9BlockingPollEvents, not polls on workers;
 - parks from sched_switch (no park symbol) alternate with unparks;
 - a terminate for >= 95 % of the tasks seen spawning, and the woken tasks
   are polled afterwards;
 - status says no poll needed a thread to stand in for its worker.
With PROBES default (no uprobes) the same recording has no poll, spawn or
wake events: the ids are still the runtime's workers alone (each stack
names its worker), the long polls are on them or on none, no sample is on
another id, and the cores move.
Usage: test_deltachat.py D9D D9CTL DELTACHAT_RPC_SERVER [all|default] [TRIES]"""
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

D9D, D9CTL, DC = sys.argv[1:4]
PROBES = sys.argv[4] if len(sys.argv) > 4 else "all"
TRIES = int(sys.argv[5]) if len(sys.argv) > 5 else 1


class Rpc:
    """deltachat's JSON-RPC over the server's stdin/stdout."""

    def __init__(self, accounts):
        env = dict(os.environ, DC_ACCOUNTS_PATH=accounts, RUST_LOG="error")
        self.p = subprocess.Popen([DC], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  env=env, text=True, bufsize=1)
        self.lock, self.next, self.waiting, self.answered = threading.Lock(), 0, {}, 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            try:
                m = json.loads(line)
            except ValueError:
                continue
            slot = self.waiting.get(m.get("id"))
            if slot:
                slot[1] = m.get("result", m.get("error"))
                slot[0].set()
                self.answered += 1

    def call(self, method, *params):
        with self.lock:
            self.next += 1
            i, ev = self.next, threading.Event()
            self.waiting[i] = [ev, None]
            self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": list(params)}) + "\n")
            self.p.stdin.flush()
        ev.wait(30)
        return self.waiting.pop(i)[1]

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


def drive(rpc, acc, k, stop):
    n = 0
    while not stop.is_set():
        c = rpc.call("create_contact", acc, f"u{k}x{n}@example.org", f"user {k} {n}")
        if isinstance(c, int):
            chat = rpc.call("create_chat_by_contact_id", acc, c)
            if isinstance(chat, int):
                rpc.call("misc_set_draft", acc, chat, f"draft {n}", None, None, None, None)
        rpc.call("get_contact_ids", acc, 0, None)
        rpc.call("batch_get_config", acc, ["displayname", "addr"])
        n += 1


def one_try(t, d, n, tmp):
    workers = os.cpu_count()
    rpc = Rpc(os.path.join(tmp, f"accounts{n}"))
    acc = rpc.call("add_account")
    rpc.call("set_config", acc, "addr", "me@example.org")
    stop = threading.Event()
    drivers = [threading.Thread(target=drive, args=(rpc, acc, k, stop)) for k in range(4)]
    hogs = start_cpu_hogs()
    try:
        for th in drivers:
            th.start()
        time.sleep(1.5)  # mid-run: SQLite calls already blocking in place
        probes = ["--probes", "all"] if PROBES == "all" else []
        r = d.ctl("record", *probes, "--pid", str(rpc.p.pid), "--duration", "5s", "--out", d.out)
        st = d.status(rpc.p.pid)
    finally:
        stop_procs(hogs)
        stop.set()
        for th in drivers:
            th.join()
        answered = rpc.answered
        rpc.close()
    t.ok(r.returncode == 0 and answered > 1000,
         f"try {n}: record --pid ({PROBES}) of deltachat-rpc-server doing real work under 2 CPU hogs "
         f"({answered} requests)", r.stderr)
    meta, open_poll, polls, off, overlaps = {}, {}, 0, [], 0
    longs, samples_off = {}, {}
    blocking, order, lane_tids, bad_order = 0, {}, {}, 0
    spawned, terminated, woken, polled_after = set(), set(), set(), set()
    for ev in dump_events(D9CTL, r.stdout.split()):
        name, f, ts = ev.get("event"), ev.get("fields", {}), ev.get("ts", 0)
        if name == "SegmentMetadataEvent":
            meta = f.get("entries", {})
        elif name == "PollStartEvent":
            w = f["worker_id"]
            polls += 1
            if not 0 <= w < workers:
                off.append(w)
            overlaps += w in open_poll
            open_poll[w] = ts
            if f["task_id"] in woken:
                polled_after.add(f["task_id"])
        elif name == "PollEndEvent":
            open_poll.pop(f["worker_id"], None)
        elif name == "D9BlockingPollEvent":
            blocking += 1
        elif name in ("WorkerParkEvent", "WorkerUnparkEvent"):
            w = f["worker_id"]
            kind = "p" if name == "WorkerParkEvent" else "u"
            bad_order += order.get(w) == kind
            order[w] = kind
            lane_tids.setdefault(w, set()).add(f["tid"])
        elif name == "TaskSpawnEvent":
            spawned.add(f["task_id"])
        elif name == "TaskTerminateEvent":
            terminated.add(f["task_id"])
        elif name == "WakeEventEvent":
            woken.add(f["woken_task_id"])
        elif name == "D9LongPollEvent":
            longs[f["worker_id"]] = longs.get(f["worker_id"], 0) + 1
        elif name == "CpuSampleEvent" and workers <= f["worker_id"] < 254:
            samples_off[f["worker_id"]] = samples_off.get(f["worker_id"], 0) + 1
    listed = meta.get("runtime.main", "")
    t.ok(listed == ",".join(str(i) for i in range(workers)),
         f"try {n}: runtime.main is the runtime's {workers} workers: '{listed}'", meta)
    moved = {w: len(tids) for w, tids in lane_tids.items()}
    t.ok(set(moved) == set(range(workers)) and max(moved.values()) >= 3 and not bad_order,
         f"try {n}: the cores moved between threads (threads parking per worker: {moved}); parks and unparks "
         f"alternate ({bad_order} out of order)")
    if PROBES != "all":
        t.ok(longs and all(w < workers or w == 255 for w in longs) and not samples_off,
             f"try {n}: long polls on the workers or on none ({longs}), no sample on another id ({samples_off})")
        return
    t.ok(polls > 1000 and not off and not overlaps,
         f"try {n}: all {polls} task polls on those workers ({len(off)} not: {off[:5]}), none overlapping "
         f"on a lane ({overlaps})")
    t.ok(blocking >= 100, f"try {n}: the blocking pool's jobs are blocking-pool polls ({blocking})")
    ended = len(spawned & terminated)
    t.ok(spawned and ended >= 0.95 * len(terminated) and len(terminated) >= 0.9 * len(spawned) - 100,
         f"try {n}: {len(terminated)} terminates for {len(spawned)} tasks seen spawning ({ended} both)")
    t.ok(woken and len(polled_after) >= 0.9 * len(woken),
         f"try {n}: {len(polled_after)} of the {len(woken)} woken tasks polled afterwards")
    targets = (st or {}).get("targets") or [{}]
    wk = targets[0].get("workers", {})
    t.ok(wk.get("polls_by_thread") == 0 and wk.get("hand_offs", 0) > 10,
         f"try {n}: every poll named its worker (status: {wk})")


def main():
    t = Tap()
    if not os.access(DC, os.X_OK):
        t.bail(f"no {DC}: scripts/bootstrap fetches it from the npm registry")
    tmp = tempfile.mkdtemp(prefix="d9-dc-")
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-dc-out-")
    d.start_or_bail(t)
    for n in range(1, TRIES + 1):
        one_try(t, d, n, tmp)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
