#!/usr/bin/env python3
"""End to end: a real d9d records a real Tokio target with real BPF and
the result is checked against the target's own JSON counts.
Usage: test_record.py D9D D9CTL TARGET MODE [FLAVOR]
MODE pid: `d9ctl record --pid <target> --duration 10s` of a running target.
MODE cmd: `d9ctl record --duration 30s -- TARGET mixed ...` from its first
instruction, so spawn/terminate counts must match the target's exactly
(plus the runtime's own few tasks)."""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines, dump_summary, metadata_of, start_target, target_truth  # noqa

D9D, D9CTL, TARGET, MODE = sys.argv[1:5]
FLAVOR = sys.argv[5] if len(sys.argv) > 5 else "multi-thread"
WANTED = ["PollStartEvent", "PollEndEvent", "WorkerParkEvent", "WorkerUnparkEvent", "TaskSpawnEvent",
          "TaskTerminateEvent", "WakeEventEvent", "CpuSampleEvent", "SegmentMetadataEvent", "ClockSyncEvent",
          "SymbolTableEntry"]


def spawn_points(binary):
    """How many spawn points the plan can attach in binary (d9ctl plan)."""
    r = subprocess.run([D9CTL, "plan", "--exe", binary], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        words = line.split()
        if words[:1] == ["spawn"] and words[2:3] == ["usable,"]:
            return int(words[1])
    return 0


def check_common(t, d, paths, truth, counts):
    t.ok(paths and all(p.startswith(d.out) for p in paths), f"record printed {len(paths)} sealed paths in --out")
    for name in WANTED:
        t.ok(counts.get(name, 0) > 0, f"{name} present ({counts.get(name, 0)})")
    # Resources are sampled by default, accept queues only when asked for.
    t.ok(counts.get("ProcessResourceUsageEvent", 0) > 0 and
         counts.get("ProcessResourceUsageEvent") == counts.get("D9ProcessResourcesEvent")
         and not counts.get("SocketAcceptQueueEvent"),
         f"resource samples ({counts.get('ProcessResourceUsageEvent', 0)}) without asking, no accept queues unasked")
    # One JSON dump per segment serves the metadata, sample-source and worker checks.
    meta, src, bad_worker, boxed, erased = None, {0: 0, 1: 0}, 0, 0, 0
    deep, tokio_syms = 0, 0
    first_poll, spawn_of = {}, {}
    # Blocking-pool polls are D9BlockingPollEvents, never on a worker lane.
    ok_workers = {str(w) for w in range(truth["workers"])}
    for p in paths:
        rc, out = dump_json_lines(D9CTL, p)
        for line in out.splitlines():
            if line.startswith('{"event":"CpuSampleEvent"'):
                i = line.find('"source":')
                src[int(line[i + 9])] = src.get(int(line[i + 9]), 0) + 1
                deep += line[i + 9] == "0" and line.count('"0x') >= 4
            elif line.startswith('{"event":"PollStartEvent"'):
                i = line.find('"worker_id":') + 12
                bad_worker += line[i:line.find(",", i)] not in ok_workers
                boxed += '"spawn_loc":"d9_target::mixed::boxed_' in line
                erased += "dyn core::future::future::Future" in line
                ev = json.loads(line)
                first_poll.setdefault(ev["fields"]["task_id"], (ev["ts"], ev["fields"]["spawn_loc"]))
            elif line.startswith('{"event":"TaskSpawnEvent"'):
                ev = json.loads(line)
                spawn_of[ev["fields"]["task_id"]] = (ev["ts"], ev["fields"]["spawn_loc"])
            elif line.startswith('{"event":"SymbolTableEntry"'):
                tokio_syms += '"symbol_name":"tokio::' in line
            elif line.startswith('{"event":"SegmentMetadataEvent"'):
                meta = json.loads(line)["fields"]["entries"]
    workers = (meta or {}).get("runtime.main", "")
    t.ok(meta and len(workers.split(",")) == truth["workers"],
         f"runtime.main lists the target's {truth['workers']} workers: '{workers}'", meta)
    t.ok(meta and meta.get("tokio_version", "").startswith(truth["tokio"][:4]) and meta.get("build_id")
         and meta.get("pid") == str(truth["pid"]), "metadata: tokio version, build id, pid", meta)
    t.ok(abs(counts["PollStartEvent"] - counts["PollEndEvent"]) <= 16,
         f"every poll start has its end ({counts['PollStartEvent']} vs {counts['PollEndEvent']})")
    # Both CPU sample sources: 99 Hz on-CPU and off-CPU at sched_switch.
    t.ok(src[0] > 0 and src[1] > 0, f"CPU samples of both sources (on-CPU {src[0]}, off-CPU {src[1]})")
    # Release Rust has no frame pointers: deep stacks mean .eh_frame unwinding worked.
    t.ok(deep > 0 and tokio_syms > 0, f"on-CPU samples carry unwound user stacks ({deep} with >= 4 frames) "
         f"and the sealer named Tokio functions in them ({tokio_syms} symbols)")
    t.ok(truth["boxed_tasks"] == 0 or (boxed > 0 and erased == 0),
         f"boxed dyn futures are labelled by their concrete future ({boxed} polls), never by the erased type"
         f" ({erased})")
    t.ok(bad_worker == 0, f"polls run on worker ids of the runtime: {bad_worker} others")
    # A spawn the probe saw (before its task's first poll; one written at
    # the first poll has its time) carries the label its polls do, found
    # through the task's vtable; a boxed future's only at its polls.
    probed = [(s[1], first_poll[k][1]) for k, s in spawn_of.items() if k in first_poll and s[0] < first_poll[k][0]]
    same = sum(1 for s, p in probed if s and s == p)
    boxed_unlabelled = sum(1 for s, p in probed if not s and "::boxed_" in p)
    if spawn_points(TARGET):
        t.ok(len(probed) > 1000 and same + boxed_unlabelled == len(probed),
             f"spawns the probe saw carry their polls' label: {same} of {len(probed)}, "
             f"{boxed_unlabelled} boxed futures' named at their polls only",
             collections.Counter(x for x in probed if x[0] != x[1]).most_common(5))
    else:
        t.ok(not probed, f"no spawn point in this build: every spawn is written at its task's first poll "
             f"({len(probed)} before it)")
    st = d.status(truth["pid"])
    tg = st["targets"][0] if st and st["targets"] else {}
    drops = tg.get("drops", -1)
    # On failure: how the ring was drained (full after a long gap: the loop
    # came late; full between close drains: the ring is too small).
    t.ok(drops == 0, f"no records dropped ({drops})",
         {"ring": tg.get("ring"), "events": tg.get("events"), "loop_max_stall_ms":
          (st or {}).get("daemon", {}).get("loop_max_stall_ms")})


def run_pid(t, d):
    # 16 s: the 10 s recording must end before the runtime shuts down, even when
    # a loaded machine delays the attach by seconds (at shutdown the main
    # thread's block_on unparks and would count as a third worker).
    tgt = start_target(TARGET, "mixed", "--duration", "16")
    time.sleep(0.5)
    t0 = time.time()
    r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "10s", "--out", d.out)
    took = time.time() - t0
    truth = target_truth(tgt)
    t.ok(r.returncode == 0, f"record --pid --duration 10s succeeded in {took:.1f} s", r.stderr)
    paths = r.stdout.split()
    counts = {}
    allok = True
    for p in paths:
        ok1, c1, text1 = dump_summary(D9CTL, p)
        allok &= ok1
        for k, v in c1.items():
            counts[k] = counts.get(k, 0) + v
    t.ok(paths and allok, "every sealed segment decodes strictly", r.stderr)
    check_common(t, d, paths, truth, counts)
    # 10 of the target's 16 s were recorded: spawns must be in proportion.
    expect = truth["tasks_spawned"] * 10.0 / truth["duration_s"]
    t.ok(0.6 * expect <= counts["TaskSpawnEvent"] <= 1.25 * expect,
         f"spawns {counts['TaskSpawnEvent']} consistent with the target's rate (~{expect:.0f} in 10 s)")


def run_cmd(t, d):
    # Resources every 50 ms for this one (d9d's default is 100 ms); the
    # full set, for the polls this test counts.
    r = d.ctl("record", "--probes", "all", "--duration", "30s", "--out", d.out, "--resources-interval", "50ms",
              "--", TARGET, "mixed", "--flavor", FLAVOR, "--duration", "4")
    truth = None
    for line in r.stderr.splitlines():
        if line.startswith("{"):
            truth = json.loads(line)
    t.ok(r.returncode == 0 and truth, "record -- CMD ran the command and sealed its trace", r.stderr)
    if not truth:
        return
    paths = r.stdout.split()
    t.ok(all(os.path.exists(p) for p in paths), "stdout holds only segment paths (the command's output went to stderr)",
         r.stdout)
    counts = {}
    allok = True
    for p in paths:
        ok1, c1, _ = dump_summary(D9CTL, p)
        allok &= ok1
        for k, v in c1.items():
            counts[k] = counts.get(k, 0) + v
    t.ok(allok, "every sealed segment decodes strictly")
    check_common(t, d, paths, truth, counts)
    spawned = counts.get("TaskSpawnEvent", 0)
    t.ok(truth["tasks_spawned"] <= spawned <= truth["tasks_spawned"] + 16,
         f"traced from the first instruction: {spawned} spawns for the target's {truth['tasks_spawned']}")
    t.ok(abs(counts.get("TaskTerminateEvent", 0) - spawned) <= 16,
         f"terminations match spawns ({counts.get('TaskTerminateEvent', 0)} vs {spawned})")
    t.ok("target exited" in r.stderr, "the recording stopped with the command", r.stderr)
    meta = metadata_of(D9CTL, paths[0]) or {}
    per_s = counts.get("ProcessResourceUsageEvent", 0) / truth["duration_s"]
    t.ok(meta.get("resources_interval_ms") == "50" and 12 <= per_s <= 22,
         f"record --resources-interval 50ms: {per_s:.1f} resource samples/s, metadata "
         f"{meta.get('resources_interval_ms')} ms")


def main():
    t = Tap()
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-e2e-out-")
    d.start_or_bail(t)
    {"pid": run_pid, "cmd": run_cmd}[MODE](t, d)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if t.failed == 0:
        shutil.rmtree(d.out, ignore_errors=True)
    t.done()


main()
