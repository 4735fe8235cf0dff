#!/usr/bin/env python3
"""A task woken during its own poll, real BPF, every probe and every wake:
the trace never shows it polled on two workers at once, and `d9ctl report`
counts its wait from that poll's end.

The selfwake target's task wakes itself at the start of a poll, spins 30 ms
and returns Pending; Tokio queues it again when that poll returns, and the
next poll follows at once. The report listed the wake-to-poll delay from
the wake: ~30 ms of waiting that never happened (npm postgrestools: a 4.7 s
"delay" that was the task's own 4.7 s poll). Another worker often takes
the task as soon as it is queued, while the poll's thread is still on its
way out of the poll function: its poll end, stamped at that thread's next
event, came after the other worker's poll start (postgrestools: 4.4 ms of
one task on two workers; tests/daemon/test_translate.c has the rule).
Checks:
 - the trace holds the case: self-wakes inside polls of >= 25 ms;
 - no poll of a task starts while a poll of it is open on another worker
   (whether the task moves between workers here is up to Tokio's stealing:
   the count of such moves and of the polls so ended is printed);
 - the report's longest wake-to-poll delays are all < 10 ms (before: the
   self-wakes' each >= 25 ms), and it says no wake windows;
 - with sampled wakes (the full set's default) the report says how long
   the wake probes were attached, beside its delays (it listed them as if
   every wake had been seen).

Usage: test_report_self_wake.py D9D D9CTL TARGET"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap, dump_events, sealed_files, start_target, target_truth  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]


def main():
    t = Tap()
    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-selfwake-out-")
    d.start_or_bail(t)
    tgt = start_target(TARGET, "selfwake", "--duration", "5")
    r = d.ctl("record", "--probes", "all", "--wakes", "exact", "--pid", str(tgt.pid), "--duration", "3s",
              "--out", d.out)
    truth = target_truth(tgt)
    t.ok(r.returncode == 0 and truth and truth["self_wakes"] >= 20,
         f"record --probes all --wakes exact of the selfwake target ({truth})", r.stderr)
    segs = sealed_files(d.out)
    st = ((d.status(tgt.pid) or {}).get("targets") or [{}])[0]
    open_polls, self_wakes, last_worker, moves, polls = {}, [], {}, 0, {}
    for e in dump_events(D9CTL, segs):
        f = e.get("fields", {})
        if e["event"] == "PollStartEvent":
            task = f["task_id"]
            moves += last_worker.get(task, f["worker_id"]) != f["worker_id"]
            last_worker[task] = f["worker_id"]
            open_polls[f["worker_id"]] = (e["ts"], task)
        elif e["event"] == "PollEndEvent" and f["worker_id"] in open_polls:
            start, task = open_polls.pop(f["worker_id"])
            polls.setdefault(task, []).append((start, e["ts"]))
        elif e["event"] == "WakeEventEvent" and f["waker_task_id"] == f["woken_task_id"]:
            self_wakes.append((f["woken_task_id"], e["ts"]))
    # By time, not by the order the events were written in: an end decided
    # by the task's start elsewhere is written after that start (and after
    # that poll's own end, when it is short), so a wake is matched to the
    # poll of its task that holds it.
    in_long = sum(any(a <= ts <= b and b - a >= 25e6 for a, b in polls.get(task, ())) for task, ts in self_wakes)
    overlaps = [(task, a, b) for task, ivs in polls.items() for a, b in zip(sorted(ivs), sorted(ivs)[1:])
                if b[0] < a[1]]
    t.ok(in_long >= 10, f"{in_long} polls of >= 25 ms hold a wake of their own task")
    ended = st.get("workers", {}).get("polls_ended_by_task_elsewhere", 0)
    t.ok(not overlaps,
         f"no task polled on two workers at once ({len(overlaps)} of its polls overlap; {moves} polls on "
         f"another worker than the task's poll before, {ended} polls ended by such a start)", json.dumps(overlaps[:3]))
    rep = subprocess.run([D9CTL, "report", "--json"] + segs, capture_output=True, text=True, timeout=120)
    doc = json.loads(rep.stdout) if rep.returncode == 0 else {}
    wakes = doc.get("longest_wake_to_poll") or []
    t.ok(rep.returncode == 0 and wakes, f"report --json lists {len(wakes)} wake-to-poll delays", rep.stderr)
    longest = max((w["delay_ns"] for w in wakes), default=0)
    t.ok(longest < 10e6,
         f"the longest wake-to-poll delay is {longest / 1e6:.3f} ms (each self-wake came 30 ms before its poll, "
         f"and the task was queued only at that poll's end)", json.dumps(wakes[:3]))
    t.ok(rep.returncode == 0 and doc.get("wake_windows") is None, "exact wakes: the report has no wake windows",
         json.dumps(doc.get("wake_windows")))
    sampled = os.path.join(d.out, "sampled")
    tgt = start_target(TARGET, "selfwake", "--duration", "5")
    r = d.ctl("record", "--probes", "all", "--pid", str(tgt.pid), "--duration", "3s", "--out", sampled)
    target_truth(tgt)
    segs = sealed_files(sampled)
    rep = subprocess.run([D9CTL, "report", "--json"] + segs, capture_output=True, text=True, timeout=120)
    doc = json.loads(rep.stdout) if rep.returncode == 0 else {}
    win, span = doc.get("wake_windows") or {}, doc.get("span_ns", 0)
    text = subprocess.run([D9CTL, "report"] + segs, capture_output=True, text=True, timeout=120).stdout
    heading = next((x for x in text.splitlines() if x.startswith("Longest wake-to-poll")), "")
    t.ok(r.returncode == 0 and win.get("windows", 0) >= 1 and 0 < win.get("attached_ns", 0) < span and
         "wakes sampled: attached in" in heading,
         f"sampled wakes: the report says the wake probes were attached {win.get('attached_ns', 0) / 1e9:.3f} s "
         f"of {span / 1e9:.3f} s in {win.get('windows', 0)} windows: '{heading}'", r.stderr)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
