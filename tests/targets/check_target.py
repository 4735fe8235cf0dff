#!/usr/bin/env python3
"""TAP checks that a built d9-target really runs and that its printed truth
is sane, so tracer tests can trust it.

  check_target.py mixed    BINARY SERIES FLAVOR
  check_target.py serve    BINARY SERIES FLAVOR
  check_target.py variants SERIES RELEASE STRIPPED DEBUG V0
  check_target.py attach   BINARY
  check_target.py badargs  BINARY
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import Tap  # noqa: E402

tap = Tap()
ok = tap.ok
finish = tap.done


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in output: {text!r}")


def check_mixed(binary, series, flavor):
    duration = 3
    t0 = time.monotonic()
    p = subprocess.run([binary, "mixed", "--flavor", flavor, "--duration", str(duration)],
                       capture_output=True, text=True, errors="replace", timeout=30)
    wall = time.monotonic() - t0
    if not ok(p.returncode == 0, f"mixed {flavor} exits 0", p.stderr):
        return
    try:
        t = last_json(p.stdout)
    except ValueError as e:
        ok(False, "mixed prints one JSON line", e)
        return
    print(f"# truth: {json.dumps(t)}")
    ok(t.get("mode") == "mixed" and t.get("flavor") == flavor, "JSON names mode and flavor", t)
    ok(str(t.get("tokio", "")).startswith(series + "."), f"built against Tokio {series}", t)
    ok(isinstance(t.get("pid"), int) and t["pid"] > 1, "reports its pid", t)
    ok(duration <= t.get("duration_s", 0) <= duration + 1.5 and wall < duration + 5,
       "ran for about the requested duration", f"{t.get('duration_s')} s, wall {wall:.2f} s")
    # Busy loops at 0, 1, 2 s; 20 ms thread sleeps at 0.5, 1.5, 2.5 s (one may
    # slip past the end on a loaded machine, never more than three).
    ok(2 <= t.get("blocking_polls", 0) <= duration, "50 ms busy loop once per second", t)
    ok(2 <= t.get("sleep_polls", 0) <= duration, "20 ms thread sleep once per second", t)
    ok(t.get("round_trips", 0) > 100, "channel ping-pong made round trips", t)
    # 10 ms interval + 5 ms sleep loop over 3 s: hundreds, unless timers stall.
    ok(t.get("timers_fired", 0) > 100, "timers fired", t)
    ok(t.get("boxed_tasks", 0) >= 8, "type-erased boxed tasks spawned", t)
    ok(t.get("tasks_spawned", 0) > 1000 + t.get("boxed_tasks", 0), "spawn churn spawned tasks", t)
    ok(t.get("failed_tasks") == 0, "no workload task panicked", t)


def check_serve(binary, series, flavor):
    server = subprocess.Popen([binary, "server", "--flavor", flavor, "--listen", "127.0.0.1:0",
                               "--duration", "5"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        line = server.stdout.readline().strip()
        if not ok(line.startswith("listening 127.0.0.1:"), "server prints its address when ready",
                  line or server.stderr.read()):
            return
        addr = line.split()[1]
        # Open loop first: 4 connections sharing 2000 requests a second for
        # 1 s, each on its own schedule (bench/overhead RATE=).
        paced = subprocess.run([binary, "load", "--flavor", flavor, "--connect", addr, "--conns", "4",
                                "--duration", "1", "--rate", "2000"],
                               capture_output=True, text=True, errors="replace", timeout=30)
        pj = last_json(paced.stdout) if paced.returncode == 0 else {}
        print(f"# paced load: {json.dumps(pj)}")
        ok(pj.get("rate") == 2000 and 1900 <= pj.get("requests", 0) <= 2000 and pj.get("errors") == 0
           and 0 < pj["p50_us"] <= pj["p99_us"],
           "load --rate 2000 for 1 s sends 1900-2000 requests on schedule, none failed", pj or paced.stderr)
        load = subprocess.run([binary, "load", "--flavor", flavor, "--connect", addr,
                               "--conns", "4", "--duration", "2"],
                              capture_output=True, text=True, errors="replace", timeout=30)
        if not ok(load.returncode == 0, "load client exits 0", load.stderr):
            return
        lj = last_json(load.stdout)
        print(f"# load: {json.dumps(lj)}")
        ok(lj["requests"] > 0 and lj["req_per_sec"] > 0, "load has throughput", lj)
        ok(lj["errors"] == 0, "no request failed", lj)
        ok(0 < lj["p50_us"] <= lj["p99_us"], "latency percentiles are ordered", lj)
        out, err = server.communicate(timeout=15)
        if not ok(server.returncode == 0, "server exits 0 after its duration", err):
            return
        sj = last_json(out)
        print(f"# server: {json.dumps(sj)}")
        ok(sj["connections"] == 8, "server saw every connection of both clients", sj)
        ok(sj["requests"] == lj["requests"] + pj.get("requests", 0),
           "server answered exactly what the clients counted",
           f"server {sj['requests']} clients {lj['requests']} + {pj.get('requests')}")
        ok(str(sj.get("tokio", "")).startswith(series + "."), f"built against Tokio {series}", sj)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def symbols(path, dynamic=False):
    p = subprocess.run(["nm", "-D" if dynamic else "-a", path], capture_output=True, text=True, errors="replace")
    return p.stdout


def check_variants(series, release, stripped, debug, v0):
    legacy = symbols(release)
    ok("_ZN9d9_target5mixed15busy_block_50ms17h" in legacy,
       "release keeps legacy-mangled symbols (busy_block_50ms)")
    ok("_ZN5tokio7runtime4task3raw4poll17h" in legacy, "release keeps tokio raw::poll symbols")
    v0syms = symbols(v0)
    ok("9d9_target5mixed15busy_block_50ms" in v0syms and "_RNv" in v0syms
       and "_ZN9d9_target5mixed15busy_block_50ms" not in v0syms,
       "v0 variant uses v0 mangling")
    sec = subprocess.run(["readelf", "-S", "-W", stripped], capture_output=True, text=True, errors="replace").stdout
    ok(".symtab" not in sec, "stripped variant has no symbol table")
    link = subprocess.run(["readelf", "--string-dump=.gnu_debuglink", stripped],
                          capture_output=True, text=True, errors="replace").stdout
    ok(os.path.basename(debug) in link, "stripped variant links its .debug file", link)
    ok("_ZN9d9_target5mixed15busy_block_50ms17h" in symbols(debug),
       "debug file holds the stripped symbols")
    bid = lambda f: [l for l in subprocess.run(["readelf", "-n", f], capture_output=True,
                                               text=True, errors="replace").stdout.splitlines() if "Build ID" in l]
    ok(bid(release) and bid(release) == bid(stripped) == bid(debug),
       "release, stripped and debug share a build-id", (bid(release), bid(stripped), bid(debug)))
    for name, b in (("stripped", stripped), ("v0", v0)):
        p = subprocess.run([b, "mixed", "--duration", "1.2"], capture_output=True, text=True, errors="replace",
                           timeout=20)
        good = p.returncode == 0
        if good:
            t = last_json(p.stdout)
            good = t["blocking_polls"] >= 1 and t["tokio"].startswith(series + ".")
        ok(good, f"{name} variant runs the mixed workload", p.stdout + p.stderr)


def check_attach(binary):
    """A tracer attaches while the target waits: the runtime's threads must
    already exist then, and nothing of the workload may have run yet."""
    p = subprocess.Popen([binary, "mixed", "--wait-stdin", "--duration", "1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, errors="replace")
    try:
        line = p.stdout.readline().split()
        if not ok(line[:2] == ["waiting", "pid"] and int(line[2]) == p.pid,
                  "--wait-stdin announces its pid and waits", line):
            return
        time.sleep(0.3)
        threads = len(os.listdir(f"/proc/{p.pid}/task"))
        ok(threads >= 3, "worker threads exist before the workload starts", f"{threads} threads")
        t0 = time.monotonic()
        out, err = p.communicate("go\n", timeout=20)
        t = last_json(out)
        ok(p.returncode == 0 and t["pid"] == p.pid and t["blocking_polls"] >= 1,
           "workload runs once released", out + err)
        ok(time.monotonic() - t0 >= 1.0, "workload starts only after release")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    t0 = time.monotonic()
    q = subprocess.run([binary, "mixed", "--start-delay", "1", "--duration", "1"],
                       capture_output=True, text=True, errors="replace", timeout=20)
    wall = time.monotonic() - t0
    ok(q.returncode == 0 and wall >= 2.0 and last_json(q.stdout)["duration_s"] < 1.6,
       "--start-delay delays the workload, not its duration", f"wall {wall:.2f} s {q.stdout}")


def check_badargs(binary):
    for argv, what in ((["bogus"], "unknown mode"), (["mixed", "--flavor", "x"], "bad flavor"),
                       (["load"], "load without --connect"), (["mixed", "--duration", "-1"],
                                                              "negative duration")):
        p = subprocess.run([binary] + argv, capture_output=True, text=True, errors="replace", timeout=10)
        lines = p.stderr.strip().splitlines()
        ok(p.returncode == 2 and len(lines) == 1 and lines[0].startswith("d9-target: "),
           f"{what}: one error line, exit 2", f"rc {p.returncode}: {p.stderr}")


def main():
    cmd, rest = sys.argv[1], sys.argv[2:]
    {"mixed": check_mixed, "serve": check_serve, "variants": check_variants,
     "badargs": check_badargs, "attach": check_attach}[cmd](*rest)
    finish()


if __name__ == "__main__":
    main()
