#!/usr/bin/env python3
"""Probes that join a live session, on the mixed target (issue 18, goals 6
and 4), real BPF.

late: a fresh d9d (nothing planned) attaches --probes all to a running
mixed target. The attach returns once recording has begun, saying the plan
is pending (or, when it was quicker than the BPF install, that it landed);
the trace holds events from before the uprobes existed (CPU samples, parks
from switches held and translated with the plan), D9ProbesEvents in order
(recording began, plan built, uprobes attached), no poll before the
uprobes' instant and polls after it, and the metadata and status say when.
A second attach of the same file is planned from the cache (no pending),
and --wait-plan on a fresh d9d attaches everything before it returns.

window: the default set with --full-on-stall 40ms (full_window 1500ms,
full_window_gap 1s): mixed's 50 ms busy_block_50ms once a second opens
windows; every window is an attached=1 / attached=0 pair of D9ProbesEvent
about full_window long, at least a gap apart; every poll event lies inside
a window; a window holds a whole 50 ms poll (start and end); status counts
windows, stalls and stalls in windows.
Usage: test_late_plan.py D9D D9CTL TARGET"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines, start_target, sealed_files, wait_for  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


WANTED = ("D9ProbesEvent", "PollStartEvent", "PollEndEvent", "TaskSpawnEvent", "CpuSampleEvent", "WorkerParkEvent",
          "D9LongPollEvent", "SegmentMetadataEvent", "D9LostEventsEvent")


def events_of(d):
    """The events the checks read (decoding all 500 k of them is slow)."""
    evs = []
    for p in sealed_files(os.path.join(d.tmp, "traces")):
        rc, out = dump_json_lines(D9CTL, p)
        for line in out.splitlines():
            if line[10:line.find('"', 10)] in WANTED:
                evs.append(json.loads(line))
    return evs


def sealed(d, pid):
    def done():
        st = d.ctl("status", "--json", "--pid", str(pid))
        return st.returncode == 0 and json.loads(st.stdout)["targets"][0]["state"] == "done"
    return wait_for(done, 60)


def record(d, t, probes_args, seconds):
    proc = start_target(TARGET, "mixed", "--duration", str(seconds))
    time.sleep(0.3)
    t0 = time.time()
    r = d.ctl("attach", "--pid", str(proc.pid), "--json", *probes_args)
    took = time.time() - t0
    reply = json.loads(r.stdout) if r.returncode == 0 else {}
    proc.wait(timeout=60)
    return proc.pid, reply, took, r


def late(t):
    d = D9d(D9D, D9CTL)
    d.start_or_bail(t)
    pid, reply, took, r = record(d, t, ["--probes", "all"], 3)
    plan = reply.get("probe_plan") or {}
    t.ok(r.returncode == 0, f"attach --probes all returned in {took * 1000:.0f} ms", r.stderr)
    state = (reply.get("plan") or {}).get("state")
    t.ok((state == "pending" and "pending" in plan) or (state == "ready" and "landed_ms" in reply["plan"]),
         f"the reply says where the plan is ({state})", json.dumps(reply.get("plan")))
    t.ok(sealed(d, pid), "the session ended with the target and sealed")
    st = json.loads(d.ctl("status", "--json", "--pid", str(pid)).stdout)["targets"][0]
    p = st["plan"]
    t.ok(p.get("state") == "ready" and 0 <= p.get("landed_ms", -1) <= p.get("uprobes_ms", -1),
         f"status: plan landed at {p.get('landed_ms')} ms, uprobes at {p.get('uprobes_ms')} ms", json.dumps(p))
    t.ok("held_dropped" not in p, "no held record dropped", json.dumps(p))
    evs = events_of(d)
    probes = [e for e in evs if e["event"] == "D9ProbesEvent"]
    names = [e["fields"]["probes"].split(":")[0] for e in probes]
    t.ok(names == ["sched_switch, cpu and run sampling, process samples", "probe plan", "uprobes"]
         and all(e["fields"]["attached"] == 1 for e in probes)
         and probes[0]["ts"] <= probes[1]["ts"] <= probes[2]["ts"],
         "D9ProbesEvents: recording began, plan built, uprobes attached, in that order", json.dumps(probes))
    if len(probes) < 3:
        return d.cleanup()
    up = probes[2]["ts"]
    polls = [e["ts"] for e in evs if e["event"] == "PollStartEvent"]
    early = [e for e in evs if e["event"] in ("CpuSampleEvent", "WorkerParkEvent", "D9LongPollEvent")
             and 0 < e["ts"] < up]
    t.ok(early, f"{len(early)} samples and stack-derived events from before the uprobes existed")
    t.ok(polls and min(polls) >= up, f"{len(polls)} polls, none before the uprobes' instant",
         f"first poll {min(polls) if polls else None} uprobes {up}")
    meta = [e["fields"]["entries"] for e in evs if e["event"] == "SegmentMetadataEvent"]
    t.ok(meta and "attached" in meta[-1].get("uprobes", "") and "poll=" in meta[-1].get("probe_plan", ""),
         "the restated metadata says when the uprobes attached and what the plan holds", json.dumps(meta[-1:]))
    # The same file again: planned from the cache, all attached at once.
    pid2, reply2, took2, r2 = record(d, t, ["--probes", "all"], 2)
    att = (reply2.get("probe_plan") or {}).get("attached", {})
    t.ok(r2.returncode == 0 and "pending" not in reply2.get("probe_plan", {}) and att.get("poll", 0) > 0,
         f"a second attach of the same file is planned from the cache ({took2 * 1000:.0f} ms, {att.get('poll')} poll points)",
         json.dumps(reply2.get("probe_plan")))
    d.cleanup()
    d = D9d(D9D, D9CTL)
    d.start_or_bail(t)
    # Long enough to outlive a plan on a loaded machine (0.8 s at load 16).
    pid3, reply3, took3, r3 = record(d, t, ["--probes", "all", "--wait-plan"], 5)
    att = (reply3.get("probe_plan") or {}).get("attached", {})
    t.ok(r3.returncode == 0 and "pending" not in reply3.get("probe_plan", {}) and att.get("poll", 0) > 0,
         f"--wait-plan returns with every probe attached ({took3 * 1000:.0f} ms)", json.dumps(reply3.get("probe_plan")))
    d.cleanup()


def window(t):
    d = D9d(D9D, D9CTL, settings={"full_window": "1500ms", "full_window_gap": "1s"})
    d.start_or_bail(t)
    pid, reply, took, r = record(d, t, ["--full-on-stall", "40ms"], 8)
    t.ok(r.returncode == 0 and reply.get("probe_plan", {}).get("probes") == "sched,cpu,longpoll",
         "attach of the default set with --full-on-stall 40ms", r.stderr + r.stdout[:400])
    t.ok(sealed(d, pid), "the session ended with the target and sealed")
    st = json.loads(d.ctl("status", "--json", "--pid", str(pid)).stdout)["targets"][0]
    # Once the held records went in, status stops saying the plan is being
    # built (a finished default-set session said so for good: npm rari).
    t.ok(st.get("plan", {}).get("state") == "ready" and "pending" not in st.get("probe_plan", {}),
         "status of the finished session: plan ready, nothing said pending",
         json.dumps({k: st.get(k) for k in ("plan", "probe_plan")})[:1500])
    fos = st.get("full_on_stall") or {}
    evs = events_of(d)
    win = [e for e in evs if e["event"] == "D9ProbesEvent" and e["fields"]["probes"].startswith("full-detail")]
    pairs, ok_pairs = [], True
    for i in range(0, len(win), 2):
        a = win[i]
        b = win[i + 1] if i + 1 < len(win) else None
        ok_pairs &= a["fields"]["attached"] == 1 and (b is None or b["fields"]["attached"] == 0)
        pairs.append((a["ts"], b["ts"] if b else None))
    closed = [(a, b) for a, b in pairs if b]
    t.ok(ok_pairs and closed, f"{len(pairs)} windows, each opened then closed", json.dumps(win)[:2000])
    lens = [(b - a) / 1e6 for a, b in closed]
    t.ok(all(1400 <= x <= 4000 for x in lens), f"windows last about full_window: {[round(x) for x in lens]} ms")
    gaps = [(pairs[i + 1][0] - pairs[i][1]) / 1e6 for i in range(len(pairs) - 1) if pairs[i][1]]
    t.ok(all(g >= 950 for g in gaps), f"the next window opens a gap after: {[round(g) for g in gaps]} ms")
    ends = [b if b else float("inf") for _, b in pairs]

    def inside(ts):
        return any(a <= ts <= e for (a, _), e in zip(pairs, ends))
    polls = [e for e in evs if e["event"] in ("PollStartEvent", "PollEndEvent", "TaskSpawnEvent")]
    outside = [e for e in polls if not inside(e["ts"])]
    t.ok(polls and not outside, f"{len(polls)} poll and spawn events, none outside a window",
         json.dumps(outside[:3]))
    open_at, longest, busy = {}, 0, {}
    for e in sorted((e for e in evs if e["event"] in ("PollStartEvent", "PollEndEvent")), key=lambda e: e["ts"]):
        w = e["fields"]["worker_id"]
        if e["event"] == "PollStartEvent":
            open_at[w] = e["ts"]
        elif w in open_at:
            took = e["ts"] - open_at.pop(w)
            longest = max(longest, took)
            busy[w] = busy.get(w, 0) + took
    t.ok(longest >= 45e6, f"a window holds a whole stall: longest poll {longest / 1e6:.1f} ms")
    # Polls come only inside windows, so the report's shares are of the
    # windows' time (they were of the whole recording: busy read at most
    # half of what it was).
    last = max(e["ts"] for e in evs)
    win_ns = sum((b if b else last) - a for a, b in pairs)
    rep = subprocess.run([D9CTL, "report", "--json", *sealed_files(os.path.join(d.tmp, "traces"))], capture_output=True,
                         text=True, timeout=120)
    rows = {w["worker"]: w for w in json.loads(rep.stdout or "{}").get("workers", [])}
    want = {w: ns / win_ns for w, ns in busy.items() if w < 254}
    t.ok(want and all(w in rows and abs(rows[w]["busy_share"] - x) <= 0.1 * x + 0.002 and
                      rows[w]["busy_share"] + rows[w]["parked_share"] <= 1.0001 for w, x in want.items()),
         f"the report's shares are of the windows' time: busy, parked {[(w, round(rows.get(w, {}).get('busy_share', -1), 3), round(rows.get(w, {}).get('parked_share', -1), 3)) for w in want]}, "
         f"polls' time over the windows' {[(w, round(x, 3)) for w, x in want.items()]}", rep.stderr)
    t.ok(fos.get("windows", 0) == len(pairs) and fos.get("stalls", 0) >= fos.get("stalls_in_windows", 0) >= 1,
         f"status counts {fos.get('windows')} windows, {fos.get('stalls')} stalls, "
         f"{fos.get('stalls_in_windows')} in windows", json.dumps(fos))
    lost = sum(e["fields"].get("lost", 0) for e in evs if e["event"] == "D9LostEventsEvent")
    t.ok(lost == st.get("drops", 0) or lost >= st.get("drops", 0), f"drops counted in the trace ({lost})")
    # The default set attaches no uprobe but in its windows: the metadata
    # once listed the plan's points as if attached all the time.
    meta = [e["fields"]["entries"] for e in evs if e["event"] == "SegmentMetadataEvent"]
    plan = meta[-1].get("probe_plan", "") if meta else ""
    t.ok(plan.startswith("in full-detail windows: poll="), f"metadata probe_plan {plan!r}")
    if t.failed:
        t.diag(f"traces kept in {d.tmp}")
    d.cleanup(keep=t.failed > 0)


def main():
    t = Tap()
    late(t)
    window(t)
    t.done()


main()
