#!/usr/bin/env python3
"""The default set's run ticks interrupt only CPUs where a target thread
runs. They were a CPU-clock perf event on every CPU: while any default-set
target was attached, every CPU of the machine took an interrupt every
500 us, idle ones and those of other processes too (1,962 timer
interrupts a second per CPU here with an idle target, against 257 with
nothing attached). Now they are a BPF timer per CPU, armed when a target
thread comes on that CPU (docs/bpf.md "Run ticks").

Checks:
 - an idle target attached with the default set adds fewer than 400 timer
   interrupts a second per CPU (/proc/interrupts LOC; the least of three
   1 s spans) to what the machine takes with nothing attached (the most of
   three spans before and three after);
 - the ticks still fire where the target runs: a default-set recording of
   the mixed target has its 50 ms busy polls as running long polls.
Not parallel: another test's busy target would tick its CPUs.

Usage: test_run_ticks.py D9D D9CTL TARGET"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from d9harness import D9d, Tap, dump_events, start_target  # noqa

SPAN_S = 1.0
SPANS = 3
MAX_ADDED = 400


def timer_irqs_per_cpu_per_s():
    """Local timer interrupts a second, averaged over the CPUs, in each of
    SPANS spans of SPAN_S: other load only adds to a span's count, so the
    least of them is what d9d's ticks cost at most."""
    def loc():
        with open("/proc/interrupts") as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] == "LOC:":
                    counts = [int(p) for p in parts[1:] if p.isdigit()]
                    return sum(counts), len(counts)
        return 0, 1
    rates = []
    for _ in range(SPANS):
        a, n = loc()
        t0 = time.monotonic()
        time.sleep(SPAN_S)
        b, _ = loc()
        rates.append((b - a) / n / (time.monotonic() - t0))
    return rates


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    d = D9d(d9d, d9ctl)
    d.start_or_bail(t)
    idle = start_target(target, "server", "--listen", "127.0.0.1:0", "--duration", "60")
    try:
        time.sleep(0.5)
        before = timer_irqs_per_cpu_per_s()
        r = d.ctl("attach", "--pid", str(idle.pid))
        time.sleep(0.5)
        attached = timer_irqs_per_cpu_per_s()
        d.ctl("detach", "--pid", str(idle.pid))
        time.sleep(0.5)
        after = timer_irqs_per_cpu_per_s()
    finally:
        idle.kill()
        idle.wait()
    t.ok(r.returncode == 0 and "longpoll" in r.stdout, "the idle server attached with the default set", r.stdout + r.stderr)
    base = max(before + after)
    t.ok(min(attached) < base + MAX_ADDED,
         f"an idle default-set target adds under {MAX_ADDED} timer interrupts/s per CPU: "
         f"{[round(x) for x in attached]}/s attached, {[round(x) for x in before]} before, "
         f"{[round(x) for x in after]} after")

    out = tempfile.mkdtemp(prefix="d9-run-ticks-", dir=d.tmp)
    r = d.ctl("record", "--duration", "30s", "--out", out, "--", target, "mixed", "--duration", "3")
    longs = [ev["fields"] for ev in dump_events(d9ctl, r.stdout.split()) if ev["event"] == "D9LongPollEvent"]
    running = [f for f in longs if f["how"] == "running" and f["min_ns"] >= 25e6]
    t.ok(r.returncode == 0 and running,
         f"ticks fire where the target runs: {len(running)} running long polls of 25 ms or more "
         f"({[(f['spawn_loc'], f['min_ns']) for f in running][:4]})", r.stderr)
    d.cleanup()
    t.done()


if __name__ == "__main__":
    main()
