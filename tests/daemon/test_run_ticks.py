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
 - a server woken 10,000 times a second (pinned to CPU 1, an open-loop
   load client on CPU 0) adds fewer than 1,300 timer interrupts a second
   to its CPU (the least of three spans against the least of three not
   attached): a worker back from a sleep is first ticked at the grid point
   after next, so one timer, due once for many such short runs, fires
   about once a millisecond (2,056 a second in all with the first tick at
   the next grid point, +1,670; 1,327 now, +940; none attached 388);
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
MAX_ADDED_WOKEN = 1300
RATE = 10000


def timer_irqs_per_s(cpu=None):
    """Local timer interrupts a second, averaged over the CPUs (or on one),
    in each of SPANS spans of SPAN_S: other load only adds to a span's
    count, so the least of them is what d9d's ticks cost at most."""
    def loc():
        with open("/proc/interrupts") as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] == "LOC:":
                    counts = [int(p) for p in parts[1:] if p.isdigit()]
                    return (counts[cpu], 1) if cpu is not None else (sum(counts), len(counts))
        return 0, 1
    rates = []
    for _ in range(SPANS):
        a, n = loc()
        t0 = time.monotonic()
        time.sleep(SPAN_S)
        b, _ = loc()
        rates.append((b - a) / n / (time.monotonic() - t0))
    return rates


def woken_server_ticks(d, target):
    """Timer interrupts a second on CPU 1 while a server pinned there
    answers RATE requests a second: (not attached, attached) span lists."""
    srv = subprocess.Popen(["taskset", "-c", "1", target, "server", "--listen", "127.0.0.1:0", "--duration", "60"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    load = None
    try:
        addr = srv.stdout.readline().split()[1]
        load = subprocess.Popen(["taskset", "-c", "0", target, "load", "--connect", addr, "--conns", "8",
                                 "--duration", "20", "--rate", str(RATE)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        quiet = timer_irqs_per_s(1)
        r = d.ctl("attach", "--pid", str(srv.pid))
        time.sleep(0.5)
        ticked = timer_irqs_per_s(1)
        d.ctl("detach", "--pid", str(srv.pid))
        return r, quiet, ticked
    finally:
        for p in (load, srv):
            if p:
                p.kill()
                p.wait()


def main():
    d9d, d9ctl, target = sys.argv[1:4]
    t = Tap()
    d = D9d(d9d, d9ctl)
    d.start_or_bail(t)
    idle = start_target(target, "server", "--listen", "127.0.0.1:0", "--duration", "60")
    try:
        time.sleep(0.5)
        before = timer_irqs_per_s()
        r = d.ctl("attach", "--pid", str(idle.pid))
        time.sleep(0.5)
        attached = timer_irqs_per_s()
        d.ctl("detach", "--pid", str(idle.pid))
        time.sleep(0.5)
        after = timer_irqs_per_s()
    finally:
        idle.kill()
        idle.wait()
    t.ok(r.returncode == 0 and "longpoll" in r.stdout, "the idle server attached with the default set", r.stdout + r.stderr)
    base = max(before + after)
    t.ok(min(attached) < base + MAX_ADDED,
         f"an idle default-set target adds under {MAX_ADDED} timer interrupts/s per CPU: "
         f"{[round(x) for x in attached]}/s attached, {[round(x) for x in before]} before, "
         f"{[round(x) for x in after]} after")

    r, quiet, ticked = woken_server_ticks(d, target)
    t.ok(r.returncode == 0 and min(ticked) < min(quiet) + MAX_ADDED_WOKEN,
         f"a server woken {RATE} times a second adds under {MAX_ADDED_WOKEN} timer interrupts/s to its CPU: "
         f"{[round(x) for x in ticked]}/s attached, {[round(x) for x in quiet]} not", r.stdout + r.stderr)

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
