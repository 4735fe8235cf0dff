#!/usr/bin/env python3
"""The default probe set (record without --probes: sched,cpu,longpoll, no
uprobe) on the mixed target, recorded from its first instruction: the trace
says what it records and what not (metadata probes / not_recorded), has no
per-poll, spawn, wake or terminate event, names both workers from their
stacks and gives each of them parks and unparks from switches, and shows
the target's long polls with their future type: mixed runs busy_block_50ms
(a spin for 50 ms of wall time inside one poll) at 0, 1, 2, 3 s and sleep_block_20ms
(std::thread::sleep inside a poll) at 0.5, 1.5, 2.5, 3.5 s: each is one
D9LongPollEvent ("running" 25 ms to 1 s, "blocked" 19 ms to 1 s) with the
same future type, and no other poll is reported longer than 5 ms. The
upper bounds are loose on purpose: preempted near its end on a loaded
machine, the 50 ms spin really lasts longer (it resumes inside the poll),
and a sleeper woken after 20 ms waits its turn for a CPU inside the poll
(78 ms seen at load 14); the trace says so; under a second, it is one
poll, not two merged.
KIND fp-stripped: a frame-pointer build without .eh_frame, stripped here of
its symbols too (as Deno ships): the poll functions' bounds come from a
code sweep, the stacks from the frame-pointer chain.
Usage: test_default_set.py D9D D9CTL TARGET [stripped|fp-stripped]"""
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
KIND = sys.argv[4] if len(sys.argv) > 4 else "release"
STRIPPED = KIND in ("stripped", "fp-stripped")


def main():
    t = Tap()
    binary = TARGET
    if STRIPPED:
        # Alone in a directory: no debug file is found, labels are addresses.
        binary = os.path.join(tempfile.mkdtemp(prefix="d9-default-"), "service")
        shutil.copy(TARGET, binary)
        if KIND == "fp-stripped":
            subprocess.run(["strip", "--strip-all", binary], check=True)
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-default-out-")
    d.start_or_bail(t)
    r = d.ctl("record", "--duration", "30s", "--out", d.out, "--", binary, "mixed", "--duration", "4")
    truth = None
    for line in r.stderr.splitlines():
        if line.startswith("{"):
            truth = json.loads(line)
    t.ok(r.returncode == 0 and truth, "record -- CMD without --probes sealed its trace", r.stderr)
    counts, meta, parks, unparks, longs, lost, text = {}, {}, {}, {}, [], {}, ""
    for p in r.stdout.split():
        rc, out = dump_json_lines(D9CTL, p)
        for line in out.splitlines():
            ev = json.loads(line)
            name = ev["event"]
            counts[name] = counts.get(name, 0) + 1
            f = ev["fields"]
            if name == "SegmentMetadataEvent":
                meta = f["entries"]
            elif name == "WorkerParkEvent":
                parks[f["worker_id"]] = parks.get(f["worker_id"], 0) + 1
            elif name == "WorkerUnparkEvent":
                unparks[f["worker_id"]] = unparks.get(f["worker_id"], 0) + 1
            elif name == "D9LongPollEvent":
                longs.append(f)
            elif name == "D9LostEventsEvent":
                lost[f["source"]] = lost.get(f["source"], 0) + f["lost"]
        text += subprocess.run([D9CTL, "dump", p], capture_output=True, text=True, timeout=120).stdout
    t.ok(meta.get("probes") == "sched,cpu,longpoll" and "spawn" in meta.get("not_recorded", "")
         and "wake" in meta.get("not_recorded", "") and "D9LongPollEvent" in meta.get("long_polls", "")
         and meta.get("probe_plan", "").startswith("no uprobe"),
         f"metadata: probes {meta.get('probes')!r}, says what is not recorded ({meta.get('not_recorded')!r}), "
         f"probe_plan {meta.get('probe_plan')!r}")
    exact = {k: counts.get(k, 0) for k in ("PollStartEvent", "PollEndEvent", "TaskSpawnEvent", "WakeEventEvent",
                                           "TaskTerminateEvent")}
    t.ok(not any(exact.values()), f"no per-poll, spawn, wake or terminate events: {exact}")
    # By Tokio's index, read from each loop's Worker on the stack, not one
    # id per thread: the target has 24 KiB of static TLS between each
    # thread's stack and its thread pointer, which the search must look
    # below (npm restate-server's 19 KiB hid every stack from it).
    t.ok(meta.get("runtime.main") == "0,1" and not meta.get("worker_ids_by_thread"),
         f"both workers told by the Worker on their stacks: runtime.main {meta.get('runtime.main')!r}, "
         f"ids by thread {meta.get('worker_ids_by_thread')}")
    # Status and the log say where that search found the Worker: when it
    # finds none, the trace's ids come by thread and only these tell why.
    # (Found before the plan landed, the log measured from the thread
    # pointer; status, below the TLS the plan then gave.)
    st = json.loads(d.ctl("status", "--all", "--json").stdout or "{}")
    search = [tg.get("workers", {}).get("search") for tg in st.get("targets", [])]
    t.ok(len(search) == 1 and search[0] and search[0]["state"] == "found" and search[0]["depth_bytes"] > 0
         and re.search(r"the worker loops' Worker lies (%d bytes below the TLS|\d+ bytes below the thread pointer)"
                       % search[0]["depth_bytes"], d.logtext()),
         f"status and the log give the Worker's depth: {search}")
    t.ok(all(parks.get(w, 0) >= 3 and parks.get(w) == unparks.get(w) for w in (0, 1)),
         f"each worker parks and unparks (from sched_switch): parks {parks}, unparks {unparks}")
    running = [f for f in longs if f["how"] == "running" and f["min_ns"] >= 5000000]
    blocked = [f for f in longs if f["how"] == "blocked" and f["min_ns"] >= 5000000]
    # The spin is 50 ms of wall time. Under load it gets less CPU than that
    # (36 ms of 52 in a clean-root CI run), and after 32 ms of a stretch a
    # tick keeps its stack only every 8 ms, so the run's last tick can come
    # 8 ms before the poll's end: that run read 35.5 ms, a true lower
    # bound. (Counted in ticks, that was 8 ms of CPU: a spin preempted for
    # most of its last 26 ms read 23.5 ms once; bpf d9_run_tick.) 25 ms
    # still tells one poll from pieces (then 5 or more).
    # Another task's poll preempted by the rest of the machine can be a
    # few ms long too (a churn poll read 7.5 ms, 2 ticks): it is no piece
    # of a busy poll, which would be of the busy poll's future.
    spins = [f for f in running if f["min_ns"] >= 25e6]
    pieces = [f for f in running if f["min_ns"] < 25e6 and spins and f["spawn_loc"] == spins[0]["spawn_loc"]]
    t.ok(len(spins) == 4 and all(f["min_ns"] < 1e9 for f in spins) and len({f["spawn_loc"] for f in spins}) == 1
         and not pieces,
         f"4 busy_block_50ms polls, 25 ms-1 s, one future type: "
         f"{[(f['spawn_loc'], f['min_ns'], f['ticks']) for f in running]}; lost {lost}")
    t.ok(len(blocked) == 4 and all(19e6 <= f["min_ns"] < 1e9 for f in blocked)
         and len({f["spawn_loc"] for f in blocked}) == 1,
         f"4 sleep_block_20ms polls, blocked 19 ms-1 s, one future type: "
         f"{[(f['spawn_loc'], f['min_ns']) for f in blocked]}; lost {lost}; off-CPU intervals BPF saw no "
         f"switch-out of: {[tg.get('offcpu_short', {}).get('unseen_switch_outs') for tg in st.get('targets', [])]}")
    t.ok(all(w in (0, 1) for w in [f["worker_id"] for f in running + blocked]), "long polls on worker lanes")
    if not STRIPPED:
        lines = [ln for ln in text.splitlines() if "D9LongPollEvent" in ln and 'how="running"' in ln
                 and int((re.search(r"min_ns=(\d+)", ln) or [0, 0])[1]) >= 25000000]
        t.ok(running and running[0]["spawn_loc"].startswith("d9_target::mixed::blocker")
             and all("d9_target::mixed::busy_block_50ms" in ln for ln in lines) and len(lines) >= 1,
             f"running long polls name the future (blocker) and their stack shows busy_block_50ms: {lines[:1]}")
        sleeps = [f["spawn_loc"] for f in blocked]
        t.ok(sleeps and sleeps[0].startswith("d9_target::mixed::thread_sleeper"),
             f"blocked long polls name the future: {sleeps[:1]}")
    d.cleanup(keep=t.failed > 0)
    if binary != TARGET:
        shutil.rmtree(os.path.dirname(binary), ignore_errors=True)
    t.done()


main()
