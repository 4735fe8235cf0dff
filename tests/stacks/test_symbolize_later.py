#!/usr/bin/env python3
"""Symbolize later, end to end with real BPF: a real d9d records a copy of
the STRIPPED release target with no debug file anywhere, and the unstripped
release build of the same code for reference. The stripped segments carry
D9MappingEvent records (build-id, file offset, load bias, path), frames
named "[unnamed] FILE 0xVADDR" and task labels "0x..." (with
D9TaskLabelAddrEvent records). Then `d9ctl symbolize`:
 - with --debug-dir holding the debug file under .build-id/ (no debuginfod);
 - with a real debuginfod (Debian's, serving a folder holding the stripped
   binary and its debug file) on loopback in a network namespace of the
   test's own, the stripped copy removed first, so the executable for the
   labels comes from the server too;
must name the same frames and task labels the unstripped build gets: each
frame (by its link-time address, the function containing it per the
unstripped binary's symbol table) gets the name the unstripped recording
gave that function, and every task label is one of the unstripped
recording's (boxed futures by their concrete type too). Everything else in the
segments is unchanged, the file keeps its mode, and a second run finds
nothing more to name.
Usage: test_symbolize_later.py D9D D9CTL RELEASE STRIPPED DEBUGFILE"""
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines  # noqa

D9D, D9CTL, RELEASE, STRIPPED, DEBUG = sys.argv[1:6]
KERNEL = 0xffff800000000000
work = tempfile.mkdtemp(prefix="d9-symlater-")
STRIPPED_COPY = os.path.join(work, "bin", os.path.basename(STRIPPED))


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "Build ID:" in line:
            return line.split("Build ID:")[1].strip()
    return None


def load(path):
    """Events of a segment by type, and {addr: name} of its symbols."""
    rc, out = dump_json_lines(D9CTL, path)
    ev = collections.defaultdict(list)
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            ev[j["event"]].append(j["fields"])
    syms = {int(f["addr"], 16) if isinstance(f["addr"], str) else f["addr"]: f["symbol_name"]
            for f in ev["SymbolTableEntry"]}
    return rc, ev, syms


def as_int(v):
    return int(v, 16) if isinstance(v, str) and v.startswith("0x") else int(v)


def functions(binary):
    """[(start, end)] of the unstripped binary's functions, sorted."""
    out = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True).stdout
    funcs = []
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 4 and p[2] in "tTW":
            start, size = int(p[0], 16), int(p[1], 16)
            funcs.append((start, start + max(size, 1)))
    return sorted(funcs)


def function_of(funcs, vaddr):
    lo, hi = 0, len(funcs)
    while lo < hi:
        mid = (lo + hi) // 2
        if funcs[mid][0] <= vaddr:
            lo = mid + 1
        else:
            hi = mid
    return funcs[lo - 1] if lo and vaddr < funcs[lo - 1][1] else None


def reference_names(ev, syms, funcs):
    """{function: name} the unstripped recording gave its own frames."""
    base = os.path.basename(RELEASE)
    maps = [m for m in ev["D9MappingEvent"] if os.path.basename(m["path"]) == base and m.get("load_bias") is not None]
    out = {}
    for addr, name in syms.items():
        for m in maps:
            if as_int(m["start"]) <= addr < as_int(m["end"]):
                f = function_of(funcs, addr - as_int(m["load_bias"]))
                if f:
                    out[f] = name
    return out


def labels(ev):
    return {f["spawn_loc"] for f in ev["PollStartEvent"] + ev.get("D9BlockingPollEvent", []) if f.get("spawn_loc")}


def record(t, d, binary, what):
    d.out = tempfile.mkdtemp(prefix="out-", dir=work)
    r = d.ctl("record", "--probes", "all", "--duration", "30s", "--out", d.out, "--", binary, "mixed", "--duration", "4")
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths, f"{what}: record -- CMD sealed {len(paths)} segments", r.stderr)
    return paths


def merged(paths):
    ev, syms = collections.defaultdict(list), {}
    for p in paths:
        rc, e, s = load(p)
        for k, v in e.items():
            ev[k] += v
        syms.update(s)
    return ev, syms


def symbolize(t, what, args, paths, env=None):
    r = subprocess.run([D9CTL, "symbolize"] + args + paths, capture_output=True, text=True, timeout=300, env=env)
    t.ok(r.returncode == 0, f"{what}: d9ctl symbolize exits 0", r.stdout + r.stderr)
    for line in r.stdout.splitlines():
        print(f"# {line}")
    return r


def check_named(t, what, paths, ref, before_syms, before_events):
    ref_names, ref_labels, funcs = ref
    ev, syms = merged(paths)
    base = os.path.basename(STRIPPED_COPY)
    prefix = f"[unnamed] {base} 0x"
    mine = {a: int(n[len(prefix):], 16) for a, n in before_syms.items() if n.startswith(prefix)}
    named = [a for a in mine if not syms.get(a, "").startswith("[unnamed]")]
    same, differ = 0, []
    for a in named:
        f = function_of(funcs, mine[a])
        if f in ref_names:
            if ref_names[f] == syms[a]:
                same += 1
            else:
                differ.append(f"{mine[a]:#x}: {syms[a]} vs {ref_names[f]}")
    t.ok(len(named) * 10 >= len(mine) * 9, f"{what}: {len(named)} of {len(mine)} of the executable's frames named")
    t.ok(same >= 5 and not differ,
         f"{what}: frames named as the unstripped build names the same functions ({same} compared)",
         "\n".join(differ[:20]))
    got = labels(ev)
    t.ok(got and got <= ref_labels and not any(l.startswith(("0x", "[unnamed]")) for l in got),
         f"{what}: task labels are the unstripped build's future types ({len(got)}: {sorted(got)[:3]}...)",
         f"got {sorted(got)}\nwant {sorted(ref_labels)}")
    counts = {k: len(v) for k, v in ev.items()}
    t.ok(counts == before_events, f"{what}: every event is still there ({sum(counts.values())})",
         f"{counts}\n{before_events}")
    return ev


def check_sealed(t, what, d, ref):
    """A stripped copy recorded by d, named at seal time by d's lookups."""
    ref_names, ref_labels, funcs = ref
    copy = os.path.join(work, what.replace(" ", "-"), os.path.basename(STRIPPED))
    os.makedirs(os.path.dirname(copy))
    shutil.copy2(STRIPPED, copy)
    paths = record(t, d, copy, what)
    ev, syms = merged(paths)
    base = os.path.basename(RELEASE)
    maps = [m for m in ev["D9MappingEvent"] if m["path"] == copy and m.get("load_bias") is not None]
    same, differ, unnamed = 0, [], 0
    for addr, name in syms.items():
        m = next((m for m in maps if as_int(m["start"]) <= addr < as_int(m["end"])), None)
        if not m:
            continue
        unnamed += name.startswith("[unnamed]")
        f = function_of(funcs, addr - as_int(m["load_bias"]))
        if f in ref_names and not name.startswith("[unnamed]"):
            if ref_names[f] == name:
                same += 1
            else:
                differ.append(f"{addr:#x}: {name} vs {ref_names[f]}")
    t.ok(maps and same >= 5 and not differ and unnamed == 0,
         f"{what}: the sealer named the stripped build's frames as the unstripped build's "
         f"({same} compared, {unnamed} unnamed)", "\n".join(differ[:20]))
    got = labels(ev)
    t.ok(got and got <= ref_labels and not any(l.startswith(("0x", "[unnamed]")) for l in got),
         f"{what}: task labels are future types at seal time ({len(got)})", f"{sorted(got)}")


def served_folder(name, older):
    """work/NAME holding the stripped executable ("target") and its debug
    file ("target.debug") for debuginfod, the file OLDER a minute older.
    debuginfod indexes the stripped Rust executable as debuginfo too (it
    has a .debug_gdb_scripts section) and answers /debuginfo with the
    newest such file of the build-id, by whole seconds of mtime. copy2
    keeps the build's mtimes, and build-target writes the stripped binary
    just after the debug file: in another second, the server handed out the
    executable as the debug file and nothing was named (this test failed
    or passed by the build's timing)."""
    folder = os.path.join(work, name)
    os.makedirs(folder)
    shutil.copy2(STRIPPED, os.path.join(folder, "target"))
    shutil.copy2(DEBUG, os.path.join(folder, "target.debug"))
    other = os.stat(os.path.join(folder, "target.debug" if older == "target" else "target"))
    os.utime(os.path.join(folder, older), (other.st_atime - 60, other.st_mtime - 60))
    return folder


def start_debuginfod(t, folder, work, db="debuginfod"):
    """Debian's debuginfod in a network namespace of our own (port 8002
    inside it is free whatever else runs), scanning folder, its index in
    work/DB.sqlite (one per folder: an index keeps what it saw before).
    Returns the namespace holder process; commands run in it with nsenter."""
    holder = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", "ip link set lo up && exec sleep 600"],
                              preexec_fn=os.setsid)
    time.sleep(0.3)
    ns = ["nsenter", f"--net=/proc/{holder.pid}/ns/net", "--"]
    log = open(os.path.join(work, "debuginfod.log"), "w")
    srv = subprocess.Popen(ns + ["debuginfod", "-F", "-p", "8002", "-d", os.path.join(work, db + ".sqlite"),
                                 "-t", "0", "-g", "0", "-v", folder], stdout=log, stderr=subprocess.STDOUT,
                           preexec_fn=os.setsid)
    # Ready once its scan has indexed both files: it serves the debug file
    # and the executable by build-id (either can be indexed first).
    bid = build_id(STRIPPED)
    deadline = time.time() + 60
    ok = False
    while time.time() < deadline and srv.poll() is None:
        ok = all(subprocess.run(ns + ["curl", "-sf", "-o", "/dev/null",
                                      f"http://127.0.0.1:8002/buildid/{bid}/{kind}"]).returncode == 0
                 for kind in ("debuginfo", "executable"))
        if ok:
            break
        time.sleep(0.5)
    t.ok(ok, "debuginfod on loopback serves the debug file and the executable by build-id",
         open(os.path.join(work, "debuginfod.log")).read())
    return holder, srv, ns


def main():
    t = Tap()
    bid = build_id(STRIPPED)
    if not bid or bid != build_id(DEBUG):
        t.bail(f"{STRIPPED} and {DEBUG} do not share a build-id")
    os.chmod(work, 0o755)
    os.makedirs(os.path.dirname(STRIPPED_COPY))
    copy = STRIPPED_COPY
    shutil.copy2(STRIPPED, copy)

    d = D9d(D9D, D9CTL)
    d.start_or_bail(t)
    ref = record(t, d, RELEASE, "unstripped")
    stripped = record(t, d, copy, "stripped, no debug file")
    t.ok(d.stop() == 0, "d9d stops cleanly")

    ref_ev, ref_syms = merged(ref)
    funcs = functions(RELEASE)
    ref_names, ref_labels = reference_names(ref_ev, ref_syms, funcs), labels(ref_ev)
    t.ok(len(ref_names) >= 10 and ref_labels,
         f"unstripped: {len(ref_names)} functions named in its stacks, {len(ref_labels)} task labels")
    refs = (ref_names, ref_labels, funcs)

    ev, syms = merged(stripped)
    maps = [m for m in ev["D9MappingEvent"] if m["path"] == copy]
    t.ok(maps and all(m["build_id"] == bid and m.get("load_bias") is not None for m in maps),
         f"stripped: D9MappingEvent for the executable with its build-id and load bias ({len(maps)})",
         json.dumps(ev["D9MappingEvent"][:4]))
    base = os.path.basename(copy)
    unnamed = [n for n in syms.values() if n.startswith(f"[unnamed] {base} 0x")]
    t.ok(unnamed and not any("busy_block_50ms" in n for n in syms.values()),
         f"stripped: the executable's frames are '[unnamed] {base} 0x...' ({len(unnamed)}), none named")
    hexlabels = labels(ev)
    addr_events = {f["label"] for f in ev["D9TaskLabelAddrEvent"]}
    polls = {l for l in hexlabels if l.startswith("0x")}
    boxed = {l for l in hexlabels if l.startswith(f"[unnamed] {base} 0x")}
    t.ok(polls and polls <= addr_events and boxed and polls | boxed == hexlabels,
         f"stripped: task labels are poll instance addresses with D9TaskLabelAddrEvent records ({len(polls)}) "
         f"and boxed futures' '[unnamed] {base} 0x...' ({len(boxed)})",
         f"{sorted(hexlabels)} {sorted(addr_events)}")
    before = {k: len(v) for k, v in ev.items()}

    # 1. --debug-dir with the build-id layout; no server.
    dbg = os.path.join(work, "debug")
    os.makedirs(os.path.join(dbg, ".build-id", bid[:2]))
    shutil.copy2(DEBUG, os.path.join(dbg, ".build-id", bid[:2], bid[2:] + ".debug"))
    copies1 = []
    for i, p in enumerate(stripped):
        c = os.path.join(work, f"dir-{i}-" + os.path.basename(p))
        shutil.copy2(p, c)
        os.chmod(c, 0o640)
        copies1.append(c)
    env = dict(os.environ, DEBUGINFOD_URLS="")
    r = symbolize(t, "--debug-dir", ["--debug-dir", dbg], copies1, env)
    # The executable's debug file: a library without one (libgcc_s) or a
    # segment without stacks says nothing about it.
    t.ok(f"none for {bid}" not in r.stdout and re.search(r"named [1-9][0-9]* of", r.stdout),
         "--debug-dir: found the debug file", r.stdout)
    check_named(t, "--debug-dir", copies1, refs, syms, before)
    t.ok(all(os.stat(c).st_mode & 0o777 == 0o640 for c in copies1), "--debug-dir: the new files keep their mode")
    left = [f for f in os.listdir(work) if ".symbolize-" in f]
    t.ok(not left, "no temporary file left behind", left)
    r = symbolize(t, "second run", ["--debug-dir", dbg], copies1, env)
    lines = r.stdout.splitlines()
    t.ok(lines and all(": named 0 of " in line and ", 0 of 0 task labels" in line for line in lines),
         "a second run has nothing left to name")

    # 1b. The sealer with the same directory in d9d.conf (debug_dirs).
    d2 = D9d(D9D, D9CTL, settings={"debug_dirs": dbg})
    d2.start_or_bail(t)
    check_sealed(t, "sealer with debug_dirs", d2, refs)
    d2.cleanup(keep=t.failed > 0)

    # 2. debuginfod on loopback; the executable is gone from where it ran.
    # The executable older, as a debug file made from an installed binary is.
    served = served_folder("served", older="target")
    os.unlink(copy)
    copies2 = []
    for i, p in enumerate(stripped):
        c = os.path.join(work, f"dfd-{i}-" + os.path.basename(p))
        shutil.copy2(p, c)
        copies2.append(c)
    holder, srv, ns = start_debuginfod(t, served, work)
    try:
        cache = os.path.join(work, "client-cache")
        env = dict(os.environ, DEBUGINFOD_URLS="http://127.0.0.1:8002", DEBUGINFOD_CACHE_PATH=cache)
        r = subprocess.run(ns + [D9CTL, "symbolize"] + copies2, capture_output=True, text=True, timeout=300,
                           env=dict(env, DEBUGINFOD_VERBOSE="1"))
        t.ok(r.returncode == 0, "debuginfod: d9ctl symbolize exits 0", r.stdout + r.stderr)
        for line in r.stdout.splitlines():
            print(f"# {line}")
        failed = t.failed
        check_named(t, "debuginfod", copies2, refs, syms, before)
        if t.failed > failed:
            # What the client and the server said, for the next look at it.
            for line in (r.stderr.splitlines()[-40:] +
                         open(os.path.join(work, "debuginfod.log")).read().splitlines()[-40:]):
                print(f"# {line}")
        got = os.listdir(os.path.join(cache, bid)) if os.path.isdir(os.path.join(cache, bid)) else []
        t.ok("debuginfo" in got and "executable" in got,
             f"debuginfod: the debug file and the executable came from the server ({got})")
        # A server that is not there: one line, segment untouched.
        env_bad = dict(env, DEBUGINFOD_URLS="http://127.0.0.1:9", DEBUGINFOD_CACHE_PATH=os.path.join(work, "c2"))
        fresh = os.path.join(work, "fresh-" + os.path.basename(stripped[0]))
        shutil.copy2(stripped[0], fresh)
        before_bytes = open(fresh, "rb").read()
        r = subprocess.run(ns + [D9CTL, "symbolize", "--timeout", "5s", fresh], capture_output=True, text=True,
                           timeout=120, env=env_bad)
        t.ok(r.returncode == 0 and "none for " + bid in r.stdout and open(fresh, "rb").read() == before_bytes,
             "no server answering: says which build-id has no debug file, segment unchanged", r.stdout + r.stderr)

        # 2b. The sealer of a d9d in the same namespace, debuginfod_urls set
        # in its config (the planner at attach has no server: the labels
        # are named when the segment is sealed).
        wrapper = os.path.join(work, "d9d-in-netns")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nexec {' '.join(ns)} {os.path.abspath(D9D)} \"$@\"\n")
        os.chmod(wrapper, 0o755)
        d3 = D9d(wrapper, D9CTL, settings={"debuginfod_urls": "http://127.0.0.1:8002", "debuginfod_timeout": "20s"})
        d3.start_or_bail(t)
        check_sealed(t, "sealer with debuginfod_urls", d3, refs)
        t.ok(os.path.isdir(os.path.join(d3.tmp, "debuginfod", bid)),
             "the sealer's downloads are cached under the state directory")
        d3.cleanup(keep=t.failed > 0)
    finally:
        for p in (srv, holder):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()

    # 3. A server whose newest "debuginfo" for the build-id is the stripped
    # executable (see above): said in one line, the segment untouched.
    served3 = served_folder("served-exe-newer", older="target.debug")
    holder, srv, ns = start_debuginfod(t, served3, work, "debuginfod-exe-newer")
    try:
        fresh = os.path.join(work, "exe-newer-" + os.path.basename(stripped[0]))
        shutil.copy2(stripped[0], fresh)
        before_bytes = open(fresh, "rb").read()
        env3 = dict(os.environ, DEBUGINFOD_URLS="http://127.0.0.1:8002", DEBUGINFOD_CACHE_PATH=os.path.join(work, "c3"))
        r = subprocess.run(ns + [D9CTL, "symbolize", fresh], capture_output=True, text=True, timeout=120, env=env3)
        t.ok(r.returncode == 0 and "has no symbol table" in r.stdout and open(fresh, "rb").read() == before_bytes,
             "a server handing out the stripped executable as the debug file: said, segment unchanged",
             r.stdout + r.stderr)
    finally:
        for p in (srv, holder):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()

    # Bad input: one line each.
    r = subprocess.run([D9CTL, "symbolize", os.path.join(work, "nope.bin")], capture_output=True, text=True)
    t.ok(r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, "a missing file is one error line", r.stderr)
    link = os.path.join(work, "link.bin")
    os.symlink(copies1[0], link)
    r = subprocess.run([D9CTL, "symbolize", link], capture_output=True, text=True)
    t.ok(r.returncode != 0 and "symbolic link" in r.stderr, "a symlink is refused, not followed", r.stderr)

    d.cleanup(keep=t.failed > 0)
    if t.failed == 0:
        shutil.rmtree(work, ignore_errors=True)
    t.done()


main()
