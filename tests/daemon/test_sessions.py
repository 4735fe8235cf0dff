#!/usr/bin/env python3
"""Sessions of a real d9d tracing a real Tokio target.
Usage: test_sessions.py D9D D9CTL TARGET MODE
MODE: rotate-size | rotate-events | rotate-period | budget | crash | target-exit | drops"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import (D9d, Tap, active_files, dump_json_lines, dump_summary, metadata_of,  # noqa: E402
                       sealed_files, start_target, target_truth, wait_for)

D9D, D9CTL, TARGET, MODE = sys.argv[1:5]


def check_segments(t, paths, what):
    """Every segment decodes strictly and starts with metadata + clock sync."""
    bad = []
    for p in paths:
        ok, counts, text = dump_summary(D9CTL, p)
        if not ok or counts.get("SegmentMetadataEvent", 0) < 1 or counts.get("ClockSyncEvent", 0) < 2:
            bad.append((p, text[-500:]))
    t.ok(paths and not bad, f"{what}: all {len(paths)} segments decode strictly with metadata + clock sync", bad)


def record_args(pid, duration, out=None):
    return ["record", "--probes", "all", "--pid", str(pid), "--duration", duration] + (["--out", out] if out else [])


def record(d, pid, duration, out=None):
    return d.ctl(*record_args(pid, duration, out))


def rotate_size(t):
    # only the size limit in play (the 100,000-event default would rotate first)
    d = D9d(D9D, D9CTL, {"max_segment_size": "256K", "rotate_period": "1h", "compression": "none",
                         "max_segment_events": "0"}).start()
    tgt = start_target(TARGET, "mixed", "--duration", "6")
    time.sleep(0.3)
    r = record(d, tgt.pid, "3s")
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and len(paths) >= 3, f"3 s with a 256 KiB limit gives >= 3 segments ({len(paths)})",
         r.stderr)
    sizes = [os.path.getsize(p) for p in paths]
    # Rotation happens after the drain that crossed the limit: a segment may
    # exceed it by what one drain pass added, never by a whole extra segment.
    t.ok(all(s < 2 * 256 * 1024 for s in sizes[:-1]), f"segments stay near the size limit: {sizes}")
    t.ok("rotating segment 0 (size)" in d.logtext(), "d9d logged the size rotation")
    names = [os.path.basename(p) for p in paths]
    t.ok(names == [f"trace.{i}.bin" for i in range(len(names))], f"segments numbered 0..N in order: {names}")
    check_segments(t, paths, "size rotation")
    target_truth(tgt)
    d.cleanup(keep=t.failed > 0)


def rotate_events(t):
    """dial9's viewer holds a whole file in memory: segments end at a count of
    events (max_segment_events), whatever their size or age."""
    limit = 100000  # the default (daemon/core/config.h), not set here
    d = D9d(D9D, D9CTL, {"rotate_period": "1h", "compression": "none"}).start()
    tgt = start_target(TARGET, "mixed", "--duration", "6")
    time.sleep(0.3)
    r = record(d, tgt.pid, "3s")
    paths = r.stdout.split()
    counts = [dump_summary(D9CTL, p)[1] for p in paths]
    events = [sum(c.values()) for c in counts]
    t.ok(r.returncode == 0 and len(paths) >= 3, f"3 s with {limit} events per segment gives >= 3 segments "
         f"({len(paths)}: {events})", r.stderr)
    # Rotation follows the drain pass that crossed the limit: one pass adds
    # at most a ring's worth (2 MiB of records, ~60,000 events).
    t.ok(all(limit <= n < limit + 65000 for n in events[:-1]), f"each full segment holds about {limit} events: {events}")
    t.ok("(events)" in d.logtext(), "d9d logged the events rotation")
    check_segments(t, paths, "events rotation")
    target_truth(tgt)
    d.cleanup(keep=t.failed > 0)


def rotate_period(t):
    d = D9d(D9D, D9CTL, {"rotate_period": "1s", "max_segment_events": "0"}).start()
    tgt = start_target(TARGET, "mixed", "--duration", "7")
    time.sleep(0.3)
    r = record(d, tgt.pid, "3500ms")
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and 3 <= len(paths) <= 5, f"3.5 s with 1 s rotation gives 4 segments ({len(paths)})",
         r.stderr)
    t.ok(all(p.endswith(".bin.zst") for p in paths), "sealed with zstd by default")
    t.ok("(period)" in d.logtext(), "d9d logged the period rotation")
    check_segments(t, paths, "period rotation")
    total = sum(dump_summary(D9CTL, p)[1].get("PollStartEvent", 0) for p in paths)
    t.ok(total > 1000, f"polls are spread over the segments ({total} in total)")
    target_truth(tgt)
    d.cleanup(keep=t.failed > 0)


def budget(t):
    d = D9d(D9D, D9CTL, {"rotate_period": "500ms", "disk_budget": "600K"}).start()
    tgt = start_target(TARGET, "mixed", "--duration", "8")
    time.sleep(0.3)
    r = record(d, tgt.pid, "4s")
    st = d.status()
    evicted = st["daemon"]["evicted"] if st else -1
    left = sealed_files(os.path.join(d.tmp, "traces"))
    total = sum(os.path.getsize(p) for p in left)
    t.ok(r.returncode == 0, "recording with a tight budget still succeeds", r.stderr)
    t.ok(evicted > 0, f"status counts evictions ({evicted})")
    t.ok(total <= 600 * 1024, f"sealed bytes on disk within the 600 KiB budget ({total})")
    logged = d.logtext().count("disk budget: evicted")
    t.ok(logged == evicted, f"every eviction logged ({logged} lines for {evicted})")
    idx = sorted(int(os.path.basename(p).split(".")[1]) for p in left)
    t.ok(idx and idx == list(range(idx[0], idx[-1] + 1)) and idx[0] > 0,
         f"the oldest went first: what is left is the newest run {idx}")
    check_segments(t, left, "after eviction")
    target_truth(tgt)
    d.cleanup(keep=t.failed > 0)


def crash(t):
    # one segment open when killed: no rotation by events either
    d = D9d(D9D, D9CTL, {"rotate_period": "1h", "max_segment_events": "0"}).start()
    tgt = start_target(TARGET, "mixed", "--duration", "8")
    time.sleep(0.3)
    r = d.ctl("attach", "--probes", "all", "--pid", str(tgt.pid))
    t.ok(r.returncode == 0, "attached", r.stderr)
    traces = os.path.join(d.tmp, "traces")
    # Killed once the open segment holds real data (how soon depends on
    # the machine's load, which is not what this test is about).
    wait_for(lambda: [a for a in active_files(traces) if os.path.getsize(a) > 10000], 30)
    d.stop(signal.SIGKILL)
    active = active_files(traces)
    t.ok(len(active) == 1 and os.path.getsize(active[0]) > 10000,
         f"kill -9 leaves one .active segment ({[os.path.getsize(a) for a in active]} bytes)")
    # Make the tear certain: cut the last frame in half.
    with open(active[0], "r+b") as f:
        f.truncate(os.path.getsize(active[0]) - 5)
    ok_torn, _, _ = dump_summary(D9CTL, active[0], strict=True)
    t.ok(not ok_torn, "the torn segment does not decode strictly before recovery")
    d2 = D9d(D9D, D9CTL, {"rotate_period": "1h", "max_segment_events": "0"}, state=d.tmp).start()
    sealed = wait_for(lambda: sealed_files(traces), 20)
    t.ok(len(sealed) == 1 and not active_files(traces), f"restart recovered and sealed it: {sealed}")
    ok, counts, text = dump_summary(D9CTL, sealed[0]) if sealed else (False, {}, "")
    t.ok(ok and counts.get("PollStartEvent", 0) > 1000, f"recovered segment decodes strictly "
         f"({counts.get('PollStartEvent', 0)} polls)", text)
    t.ok("recovery:" in d2.logtext(), "d9d logged the recovery")
    # The target is still running: a new attach writes a new segment, never reusing the recovered name.
    r = d2.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "1s")
    t.ok(r.returncode == 0 and r.stdout.strip().endswith("trace.1.bin.zst"),
         "re-attach continues numbering in the same pid+starttime folder", r.stdout + r.stderr)
    target_truth(tgt)
    d2.cleanup(keep=t.failed > 0)


def target_exit(t):
    d = D9d(D9D, D9CTL).start()
    # The workload starts once d9ctl says it records: a first attach loads
    # the BPF programs (0.4-0.5 s of verifier CPU), which on a loaded
    # 2-core machine took over the 1.7 s a running 2 s target had left, so
    # the session saw nothing but the exit; a longer-lived target only
    # narrows that race (first attaches took 3-4 s at load 12-16).
    tgt = subprocess.Popen([TARGET, "mixed", "--wait-stdin", "--duration", "2"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    tgt.stdout.readline()
    t0 = time.time()
    rec = subprocess.Popen([D9CTL, "--socket", d.sock, *record_args(tgt.pid, "20s")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    err = [rec.stderr.readline()]
    tgt.stdin.write("go\n")
    tgt.stdin.flush()
    truth = target_truth(tgt)
    out, rest = rec.communicate(timeout=60)
    took = time.time() - t0
    r = subprocess.CompletedProcess(rec.args, rec.returncode, out, "".join(err) + rest)
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths, "record returns the sealed segments", r.stderr)
    t.ok(took < 10, f"the session ended with the target, not at the 20 s deadline ({took:.1f} s)")
    t.ok("target exited" in r.stderr, "d9ctl says the target exited", r.stderr)
    check_segments(t, paths, "target exit")
    meta = metadata_of(D9CTL, paths[0]) if paths else None
    t.ok(meta and meta.get("pid") == str(truth["pid"]) and meta.get("runtime.main"),
         f"metadata names the pid and its workers: {meta}")
    st = d.status(tgt.pid)
    t.ok(st and st["targets"] and st["targets"][0]["state"] == "done", "status shows the session done")
    # PID reuse cannot mix: the folder is pid-starttime.
    t.ok(paths and f"/{truth['pid']}-" in paths[0], "segments live under <pid>-<starttime>/")
    d.cleanup(keep=t.failed > 0)


def drops(t):
    # A 64 KiB ring cannot hold what a busy target produces between drains.
    d = D9d(D9D, D9CTL, {"ring_size": "64K"}).start()
    tgt = start_target(TARGET, "mixed", "--duration", "5")
    time.sleep(0.3)
    r = record(d, tgt.pid, "2s")
    target_truth(tgt)
    paths = r.stdout.split()
    st = d.status(tgt.pid)
    drops = st["targets"][0]["drops"] if st and st["targets"] else 0
    t.ok(r.returncode == 0 and drops > 0, f"a 64 KiB ring overflows and status counts the drops ({drops})", r.stderr)
    # status counts ring drops; unwind-budget losses are a second source.
    lost = {}
    for p in paths:
        rc, out = dump_json_lines(D9CTL, p)
        for line in out.splitlines():
            if line.startswith('{"event":"D9LostEventsEvent"'):
                ev = json.loads(line)
                src = ev["fields"]["source"]
                lost[src] = lost.get(src, 0) + int(ev["fields"]["lost"])
    ring = lost.get("ring", 0)
    t.ok(ring == drops, f"D9LostEventsEvent records of source ring add up to the same count ({ring})")
    t.ok(set(lost) <= {"ring", "stack_unwind", "poll_end"}, f"lost events name a known source ({sorted(lost)})")
    # A poll open at a hole in its thread's records ends at its start, said
    # once per poll (source poll_end), in the trace and in status alike.
    ends_lost = (st["targets"][0].get("workers") or {}).get("poll_ends_lost") if st and st["targets"] else None
    t.ok(ends_lost == lost.get("poll_end", 0),
         f"polls whose end was lost: {lost.get('poll_end', 0)} in the trace, {ends_lost} in status")
    # The report tells the sources apart: only the ring's are records lost;
    # a stack over the unwind budget is a sample kept without its stack.
    rep = subprocess.run([D9CTL, "report", "--json", *paths], capture_output=True, text=True, timeout=120)
    missing = json.loads(rep.stdout or "{}").get("missing", {})
    t.ok(missing.get("lost_events") == ring and missing.get("stacks_over_unwind_budget") == lost.get("stack_unwind", 0)
         and missing.get("poll_ends_lost") == lost.get("poll_end", 0),
         f"d9ctl report: {ring} events lost (ring), {lost.get('stack_unwind', 0)} stacks over the unwind budget, "
         f"{lost.get('poll_end', 0)} polls' ends among them, not one sum", json.dumps(missing) + rep.stderr)
    txt = subprocess.run([D9CTL, "report", *paths], capture_output=True, text=True, timeout=120).stdout
    t.ok(f"{ring} events lost (ring full)" in txt, "the report's text says the same", txt[-600:])
    t.ok("records lost" in d.logtext(), "d9d logged the loss")
    check_segments(t, paths, "with drops")
    d.cleanup(keep=t.failed > 0)


def offcpu_events(paths):
    """(off-CPU CpuSampleEvents, [D9ShortOffCpuEvent fields]) of a recording."""
    samples, short = 0, []
    for p in paths:
        _, out = dump_json_lines(D9CTL, p)
        for line in out.splitlines():
            if line.startswith('{"event":"CpuSampleEvent"'):
                samples += json.loads(line)["fields"]["source"] == 1
            elif line.startswith('{"event":"D9ShortOffCpuEvent"'):
                short.append({k: int(v) for k, v in json.loads(line)["fields"].items()})
    return samples, short


def offcpu_min(t):
    # d9d's setting (2 ms here) against --offcpu-min 0 on the same workload.
    d = D9d(D9D, D9CTL, {"offcpu_min": "2ms"}).start()
    tgt = None
    try:
        tgt = start_target(TARGET, "mixed", "--duration", "6")
        time.sleep(0.3)
        runs = {}
        for label, extra in (("2ms", []), ("0", ["--offcpu-min", "0"])):
            r = d.ctl("record", "--pid", str(tgt.pid), "--duration", "2s", "--probes", "sched,cpu", *extra)
            st = d.status(tgt.pid)
            short_st = st["targets"][0]["offcpu_short"] if st and st["targets"] else {}
            samples, short = offcpu_events(r.stdout.split())
            runs[label] = (r, short_st, samples, short)
            t.ok(r.returncode == 0, f"record with minimum {label} works", r.stderr)
        target_truth(tgt)
        r, short_st, samples, short = runs["2ms"]
        total = sum(e["intervals"] for e in short)
        t.ok(short_st.get("min_us") == 2000 and short_st.get("intervals", 0) > 0,
             f"status: minimum 2000 us from d9d.conf, {short_st.get('intervals')} shorter intervals counted")
        t.ok(total == short_st.get("intervals"),
             f"D9ShortOffCpuEvents in the trace add up to status's count ({total} vs {short_st.get('intervals')})")
        t.ok(all(e["min_ns"] == 2000000 and e["total_ns"] < e["intervals"] * 2000000 for e in short),
             f"each D9ShortOffCpuEvent names the 2 ms minimum and sums intervals below it ({len(short)} events)")
        r0, short_st0, samples0, short0 = runs["0"]
        t.ok(not short0 and short_st0.get("min_us") == 0 and short_st0.get("intervals") == 0,
             "with --offcpu-min 0 nothing is counted as short: every interval is a record")
        t.ok(samples0 > 2 * samples,
             f"recording every interval gives many more off-CPU samples ({samples0}) than the 2 ms minimum ({samples})")
    finally:
        if tgt and tgt.poll() is None:
            tgt.kill()
        d.cleanup(keep=t.failed > 0)


def main():
    t = Tap()
    {"rotate-size": rotate_size, "rotate-events": rotate_events, "rotate-period": rotate_period, "budget": budget,
     "crash": crash, "target-exit": target_exit, "drops": drops, "offcpu-min": offcpu_min}[MODE](t)
    t.done()


main()
