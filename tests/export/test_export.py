#!/usr/bin/env python3
"""d9ctl export on a real recording of the mixed target, each file opened
by a real reader: the Perfetto (trace event JSON) file by Chrome DevTools'
trace model, the pprof files by `go tool pprof`. What they read must be
what `d9ctl report` and `d9ctl dump` read from the same segments: the same
polls per worker, across segment boundaries, the same longest poll, every
sample; bad input costs one line and leaves no file behind.
Usage: test_export.py D9D D9CTL TARGET"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
GO = "/usr/lib/go-1.19/bin/go"


def ctl(*args):
    return subprocess.run([D9CTL, *args], capture_output=True, text=True, timeout=300)


def pprof(*args):
    env = dict(os.environ, HOME=tempfile.gettempdir(), PPROF_TMPDIR=tempfile.gettempdir())
    return subprocess.run([GO, "tool", "pprof", *args], capture_output=True, text=True, timeout=300, env=env)


def total_samples(top):
    m = re.search(r"Total samples = (\d+)", top)
    return int(m.group(1)) if m else -1


def main():
    t = Tap()
    if not os.access(GO, os.X_OK):
        t.bail(f"{GO} missing: run scripts/bootstrap (golang-1.19-go)")
    # Segments of a second, so polls and parks run across their boundaries.
    d = D9d(D9D, D9CTL, {"rotate_period": "1s"})
    d.start_or_bail(t)
    d.out = out = tempfile.mkdtemp(prefix="d9-export-")
    r = d.ctl("record", "--probes", "all", "--wakes", "exact", "--duration", "40s", "--out", out + "/rec", "--",
              TARGET, "mixed", "--duration", "6")
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths, "recorded the mixed target", r.stderr)
    if not paths:
        d.stop()
        t.done()
    rep = json.loads(ctl("report", "--json", "--top", "1", *paths).stdout or "{}")
    longest = (rep.get("longest_polls") or [{}])[0]
    mains = {int(x) for x in rep.get("metadata", {}).get("runtime.main", "").split(",") if x}

    # Perfetto / chrome://tracing: trace event JSON, read by DevTools' model.
    js = os.path.join(out, "trace.json")
    e = ctl("export", "--format", "perfetto", "--output", js, *paths)
    m = re.search(r"(\d+) polls or parks open", e.stderr)
    unfinished = int(m.group(1)) if m else 0
    t.ok(e.returncode == 0 and os.path.getsize(js) > 0, "export --format perfetto writes the file", e.stderr)
    facts_run = subprocess.run(["node", os.path.join(HERE, "trace_model_facts.mjs"), js], capture_output=True,
                               text=True, timeout=600)
    facts = json.loads(facts_run.stdout or "{}")
    t.ok(facts_run.returncode == 0 and facts.get("threads"), "Chrome DevTools' trace model opens it",
         facts_run.stderr[-2000:])
    tracks = {th["name"]: th for th in facts.get("threads", [])}
    want = {f"worker {i}" for i in mains}
    t.ok(mains and want <= set(tracks) and all(tracks[w]["polls"] > 0 for w in want),
         f"one track per worker of runtime.main ({sorted(want)}) with its polls", json.dumps(facts)[:2000])
    polls = sum(th["polls"] for th in facts.get("threads", []))
    t.ok(0 <= rep.get("polls", 0) - polls <= unfinished,
         f"every poll report counts is a slice ({polls} slices, report {rep.get('polls')}, "
         f"{unfinished} left open at the recording's end)")
    workers = [n for n in tracks if n.startswith("worker ")]
    t.ok(len(paths) >= 4 and unfinished <= 2 * len(workers),
         f"a poll or park open at a segment's end goes on in the next ({len(paths)} segments; only "
         f"{unfinished} left open, at the recording's end, on {len(workers)} worker tracks)", e.stderr)
    best = max((th["longest"] for th in facts.get("threads", []) if th.get("longest")),
               key=lambda p: p["dur_us"], default={})
    t.ok(best and longest and best["name"] == longest.get("future") and
         abs(best["dur_us"] * 1000 - longest["duration_ns"]) < 1000,
         f"the longest slice is report's longest poll ({best.get('name')}, {best.get('dur_us', 0) / 1000:.3f} ms)",
         json.dumps([best, longest])[:1500])

    # pprof: go tool pprof reads both profiles.
    samples = {0: 0, 1: 0}
    for p in paths:
        for line in dump_json_lines(D9CTL, p)[1].splitlines():
            ev = json.loads(line)
            if ev.get("event") == "CpuSampleEvent":
                samples[ev["fields"]["source"]] = samples.get(ev["fields"]["source"], 0) + 1
    cpu, off = os.path.join(out, "cpu.pb.gz"), os.path.join(out, "off.pb.gz")
    e1 = ctl("export", "--format", "pprof", "--output", cpu, *paths)
    e2 = ctl("export", "--format", "pprof", "--profile", "offcpu", "--output", off, *paths)
    t.ok(e1.returncode == 0 and e2.returncode == 0, "export --format pprof writes both profiles", e1.stderr + e2.stderr)
    top = pprof("-top", "-sample_index=samples", "-nodecount=30", cpu)
    t.ok(top.returncode == 0 and total_samples(top.stdout) == samples[0] > 0,
         f"go tool pprof reads every CPU sample ({total_samples(top.stdout)} of {samples[0]})",
         top.stderr[-1500:] + top.stdout[:1500])
    tags = pprof("-tags", cpu)
    t.ok(tags.returncode == 0 and all(re.search(rf"\): {i}$", tags.stdout, re.M) for i in mains) and
         "future:" in tags.stdout,
         "its samples are labelled by worker and by the future being polled", tags.stdout[:2000])
    busy = pprof("-top", "-tagfocus=future=blocker", "-nodecount=10", cpu)
    t.ok(busy.returncode == 0 and "busy_block" in busy.stdout,
         "focused on the blocker future, the busy loop it runs leads", busy.stdout[:2000])
    otop = pprof("-traces", "-sample_index=samples", off)
    t.ok(otop.returncode == 0 and total_samples(pprof("-top", off).stdout) == samples[1] > 0,
         f"go tool pprof reads every off-CPU sample ({samples[1]})", otop.stderr[-1500:])
    t.ok(re.search(r"thread_sleeper", otop.stdout) and re.search(r"sleep", otop.stdout),
         "an off-CPU stack shows the sleeping task's thread::sleep", otop.stdout[:3000])

    # Bad input: one line, nothing left under the name asked for.
    bad = os.path.join(out, "not-a-trace.bin")
    with open(bad, "wb") as f:
        f.write(b"\x00" * 64)
    target = os.path.join(out, "bad.json")
    b = ctl("export", "--format", "perfetto", "--output", target, bad)
    t.ok(b.returncode == 1 and len(b.stderr.strip().splitlines()) == 1 and "not-a-trace.bin" in b.stderr and
         not os.path.exists(target) and not [n for n in os.listdir(out) if ".tmp." in n],
         "a file that is no trace: exit 1, one line naming it, no output file", b.stderr)
    u = ctl("export", "--format", "svg", "--output", target, *paths)
    t.ok(u.returncode == 2 and "perfetto or pprof" in u.stderr, "an unknown format is a usage error", u.stderr)
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    t.done()


main()
