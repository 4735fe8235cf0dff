#!/usr/bin/env python3
"""End to end, musl static-pie: a real d9d records a real musl static-pie
Tokio release binary (stripped, no FDE for musl's syscall stubs), attached
mid-run while it serves JSON-RPC lines on stdin, and the off-CPU stacks of
its blocked threads must reach past the syscall stub into the callers'
frames: median user depth >= 5 (daemon/record/unwind_step.c). Before, every such
stack stopped at the stub: one user frame.
Usage: test_record_musl_offcpu.py D9D D9CTL -- CMD..."""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines  # noqa

KERNEL_MIN = 0xffff800000000000


def offcpu_depths(d9ctl, path):
    """User frames per off-CPU (source 1) CpuSampleEvent of the segment."""
    rc, out = dump_json_lines(d9ctl, path)
    depths = []
    for line in out.splitlines():
        if line.startswith('{"event":"CpuSampleEvent"'):
            f = json.loads(line)["fields"]
            if f["source"] == 1:
                depths.append(sum(1 for a in f.get("callchain") or [] if int(a, 16) < KERNEL_MIN))
    return rc, depths


def feed(proc, stop):
    """A request line every 10 ms: the runtime's threads block and wake."""
    n = 0
    while not stop.is_set():
        try:
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": "d9/ping"}).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return
        n += 1
        time.sleep(0.01)


def main():
    d9d, d9ctl = sys.argv[1:3]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    t = Tap()
    home = tempfile.mkdtemp(prefix="d9-musl-home-", dir="/var/tmp")
    env = dict(os.environ, HOME=home, CODEX_HOME=home, RUST_LOG="off")
    target = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env, cwd=home)
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(target, stop))
    feeder.start()
    d = D9d(d9d, d9ctl)
    d.out = tempfile.mkdtemp(prefix="d9-musl-out-")
    try:
        d.start_or_bail(t)
        time.sleep(1)
        alive = target.poll() is None
        t.ok(alive, f"target {os.path.basename(cmd[0])} runs and reads stdin")
        r = d.ctl("record", "--pid", str(target.pid), "--duration", "5s", "--out", d.out)
        paths = r.stdout.split()
        t.ok(r.returncode == 0 and paths, f"record --pid sealed {len(paths)} segments", r.stderr)
        depths = []
        for p in paths:
            rc, dep = offcpu_depths(d9ctl, p)
            t.ok(rc == 0, f"{os.path.basename(p)} decodes")
            depths += dep
        with_stack = [x for x in depths if x > 0]
        med = statistics.median(with_stack) if with_stack else 0
        hist = {k: with_stack.count(k) for k in sorted(set(with_stack))}
        print(f"# off-CPU samples {len(depths)}, with user frames {len(with_stack)}, depth histogram {hist}")
        t.ok(len(with_stack) >= 20 and med >= 5,
             f"off-CPU stacks reach past musl's syscall stub: median user depth {med} >= 5 "
             f"({len(with_stack)} stacks)")
        t.ok(d.stop() == 0, "d9d stops cleanly")
    finally:
        stop.set()
        target.kill()
        feeder.join()
        target.wait()
        d.cleanup(keep=t.failed > 0)
        shutil.rmtree(home, ignore_errors=True)
    if t.failed == 0:
        shutil.rmtree(d.out, ignore_errors=True)
    t.done()


main()
