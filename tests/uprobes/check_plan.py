#!/usr/bin/env python3
"""TAP checks of uprobes/ probe plans on the real Tokio targets, through the
plan-dump CLI. Every expectation is checked against an independent source:
objdump for instructions, the symbolized sibling build for the stripped one,
the target's own process for --pid.

  check_plan.py target   PLAN_DUMP SERIES RELEASE V0 STRIPPED DEBUG
  check_plan.py errors   PLAN_DUMP
  check_plan.py pid      PLAN_DUMP BINARY
  check_plan.py lengths  X86_LENGTHS BINARY
  check_plan.py mountns  PLAN_DUMP BINARY
  check_plan.py foreign  PLAN_DUMP BINARY   (a third-party Tokio binary)
  check_plan.py d9ctl    PLAN_DUMP D9CTL BINARY
  check_plan.py memory   PLAN_DUMP BINARY   (task layout checked in a live process)
  check_plan.py bodies   PLAN_DUMP FP_BINARY (poll bodies by code sweep vs symbol sizes)
  check_plan.py stubs    PLAN_DUMP BINARY   (jump-stub polls: bodies where the jumps lead)
  check_plan.py bolt     PLAN_DUMP BINARY   (a BOLT-optimized non-PIE release)
"""
import json
import os
import random
import re
import contextlib
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import Tap  # noqa: E402

tap = Tap()
ok = tap.ok
finish = tap.done


def plan(plan_dump, *args):
    t0 = time.monotonic()
    p = subprocess.run([plan_dump, "--json", *args], capture_output=True, text=True, timeout=60)
    wall = (time.monotonic() - t0) * 1000
    if p.returncode != 0:
        raise RuntimeError(f"plan-dump {' '.join(args)} failed: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    d["_wall_ms"] = wall
    return d


def polls(d):
    return [p for p in d["points"] if p["kind"] == "poll"]


OBJ_LINE = re.compile(r"^\s*([0-9a-f]+):\s+((?:[0-9a-f]{2} )+)\s*(\S+)?")


def objdump_at(binary, vaddr, length=16):
    """(length, mnemonic) of the instruction objdump decodes at vaddr."""
    out = subprocess.run(["objdump", "-d", "-w", f"--start-address={vaddr:#x}",
                          f"--stop-address={vaddr + length:#x}", binary],
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        m = OBJ_LINE.match(line)
        if m and int(m.group(1), 16) == vaddr:
            return len(m.group(2).split()), (m.group(3) or "")
    return None, None


EMULATED = re.compile(r"^(push|jmp|call|j[a-z]+|nop[wl]?|xchg)$")


def file_bytes(path, offset, n=16):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


def check_insns(binary, d, what):
    """First instruction of every point: our length == objdump's, and our class
    agrees with the mnemonic (push/jmp/call/jcc/nop emulated, rest stepped)."""
    bad_len, bad_cls, checked = [], [], 0
    seen = set()
    for p in d["points"]:
        v = p["vaddr_int"]
        if v in seen:
            continue
        seen.add(v)
        n, mn = objdump_at(binary, v)
        checked += 1
        if n != p["insn_len"]:
            bad_len.append((p["vaddr"], p["insn_desc"], p["insn_len"], n, mn))
        emulated = bool(mn and EMULATED.match(mn))
        if mn == "push" and p["insn_desc"] != "push %reg":
            emulated = False  # push $imm is stepped
        if emulated != (p["insn"] == "emulated") and p["kind"] != "poll_return":
            bad_cls.append((p["vaddr"], p["insn_desc"], p["insn"], mn))
        if p["kind"] == "poll_return" and mn != "ret":
            bad_cls.append((p["vaddr"], "return site is not a ret", mn))
    ok(checked > 0 and not bad_len, f"{what}: first-insn length matches objdump at {checked} points", bad_len)
    ok(checked > 0 and not bad_cls, f"{what}: insn class matches the mnemonic (emulated vs single-step)", bad_cls)


def check_common(d, series, what):
    ps = polls(d)
    ok(len(ps) >= 10, f"{what}: raw::poll instances found ({len(ps)})", d.get("missing"))
    ok(all(p["file_offset"] > 0 and p["insn_len"] > 0 for p in ps),
       f"{what}: every poll has a file offset and a decoded first insn")
    ok(str(d.get("tokio_version") or "").startswith(series + "."),
       f"{what}: Tokio version detected ({d.get('tokio_version')})")
    lay = d["task_layout"]
    ok(lay["hdr_vtable_off"] == 16 and lay["vtable_id_off"] in (56, 64, 72) and
       len({lay["vtable_id_off"], lay["vtable_scheduler_off"], lay["vtable_trailer_off"]}) == 3,
       f"{what}: task layout discovered (id_offset at vtable+{lay['vtable_id_off']})", lay)
    ok(all(p["kind"] != "poll" or p.get("vtable_vaddr") for p in d["points"]),
       f"{what}: every poll is tied to its vtable")
    ok(all(p["value_from"] == "arg0" for p in ps), f"{what}: poll reads the Header* from arg0")
    print(f"# {what}: {len(ps)} polls, {d['discovery']['vtables']} vtables, plan {d['elapsed_ms']:.1f} ms "
          f"(process {d['_wall_ms']:.0f} ms), shape: {d['shape']}")
    print("# counts: " + ", ".join(f"{k}={v['attached']}/{v['found']}" for k, v in d["counts"].items()))


def lay_id(d):
    return d["task_layout"]["vtable_id_off"] // 8  # any positive offset beyond the header words


def check_symbolized(binary, d, series, what, v0):
    check_common(d, series, what)
    disc = d["discovery"]
    ok(d["has_symbols"] and disc["routes_agree"] and disc["polls_by_symbols"] == disc["polls_by_scan"],
       f"{what}: symbol route == vtable scan ({disc['polls_by_symbols']} vs {disc['polls_by_scan']}, "
       f"{disc['polls_in_both']} in both)", disc)
    ok(d["v0_mangling"] == v0, f"{what}: mangling detected as {'v0' if v0 else 'legacy'}")
    labels = [p["label"] or "" for p in d["points"]]
    raw = [l for l in labels if l.startswith(("_R", "_ZN")) or re.search(r"::h[0-9a-f]{16}|\.llvm\.", l)]
    ok(not raw, f"{what}: all labels demangled and normalized (no hash, no .llvm suffix)", raw[:5])
    hexl = [p["label"] for p in polls(d) if p["label"].startswith("0x")]
    ok(not hexl, f"{what}: every poll labelled with its future type", hexl[:5])
    # Each of mixed's async fns is one future type per runtime flavour: its own
    # label on exactly its own polls (thread_sleeper and blocker share merged
    # drop glue, which once named both "blocker").
    for fn in ("blocker", "thread_sleeper", "sleeper", "ticker"):
        mine = [p["label"] for p in polls(d) if re.search(rf"mixed::{fn}::\{{+closure", p["label"])]
        ok(len(mine) == 2, f"{what}: mixed::{fn} labels exactly its 2 poll instances (one per flavour)", mine)
    ok(any("d9_target::" in p["label"] for p in polls(d)),
       f"{what}: poll labels name the target's own futures")
    boxed = [p for p in polls(d) if p.get("boxed_dyn")]
    ok(boxed, f"{what}: Pin<Box<dyn Future>> tasks flagged for run-time labelling ({len(boxed)})")
    ok(boxed and all(p["dyn_vtable_hdr_off"] > lay_id(d) for p in boxed),
       f"{what}: boxed futures' dyn vtable located in the task cell "
       f"(hdr+{[p['dyn_vtable_hdr_off'] for p in boxed]})", boxed)
    for kind in ("complete", "wake", "park", "unpark_return"):
        ok(d["counts"][kind]["attached"] > 0, f"{what}: {kind} point attached", d.get("missing"))
    # Found but never attached by d9d: the plan must not count them as attached.
    for kind in ("worker_run", "unpark", "block_in_place"):
        ok(d["counts"][kind]["attached"] == 0 and all("not attached" in (p.get("skip_reason") or "")
                                                        for p in d["points"] if p["kind"] == kind),
           f"{what}: {kind} found ({d['counts'][kind]['found']}) and said not attached")
    ok(d["counts"]["worker_run"]["found"] > 0, f"{what}: worker_run found (it tells the flavour)")
    ok(d["discovery"]["waker_vtable"] and d["discovery"]["waker_scan_agrees"],
       f"{what}: task waker vtable found by the scan, its wake slots are the symbols' wake_by_val/wake_by_ref",
       d["discovery"])
    # Harness::complete from the vtables' code, checked against the names.
    disc = d["discovery"]
    scanned = [p for p in d["points"] if p["kind"] == "complete" and p.get("from_vtable_scan")]
    ok(disc["completes_scan_wrong"] == 0 and len(scanned) >= 0.9 * d["counts"]["complete"]["found"] and
       all(p["label"].endswith("::complete") for p in scanned),
       f"{what}: complete found from the vtables for {len(scanned)} of {d['counts']['complete']['found']}, "
       f"each a symbol's Harness::complete ({disc['completes_scan_wrong']} wrong)", disc)
    ok(d["counts"]["complete"]["found"] >= len(polls(d)) // 2,
       f"{what}: instance counts plausible (complete {d['counts']['complete']['found']} vs poll {len(polls(d))})")
    park = [p for p in d["points"] if p["kind"] == "park"]
    ok(any("current_thread" in p["label"] for p in park) and
       any("multi_thread" in p["label"] for p in park),
       f"{what}: both runtime flavours' park points found", [p["label"] for p in park])
    if d["counts"]["spawn"]["found"] == 0:
        ok(any(m["kind"] == "spawn" and "fallback" in m["reason"] for m in d["missing"]),
           f"{what}: missing spawn symbol reported with its fallback", d["missing"])
    check_insns(binary, d, what)


def check_size(plan_dump, series, size):
    """A build for size (opt-level z, like npm's apimock): Tokio's task code
    keeps more out of line and functions are not aligned. Its symbols check
    what the vtable scan finds, there and in a stripped copy."""
    d = plan(plan_dump, "--exe", size)
    what = f"{series}-size"
    disc = d["discovery"]
    scanned = [p for p in d["points"] if p["kind"] == "complete" and p.get("from_vtable_scan")]
    ok(d["has_symbols"] and disc["completes_scan_wrong"] == 0 and
       len(scanned) >= 0.9 * d["counts"]["complete"]["found"] and all(p["label"].endswith("::complete") for p in scanned),
       f"{what}: complete found from the vtables for {len(scanned)} of {d['counts']['complete']['found']}, "
       f"each a symbol's Harness::complete ({disc['completes_scan_wrong']} wrong)", disc)
    ok(disc["waker_vtable"] and disc["waker_scan_agrees"],
       f"{what}: task waker vtable found by the scan (State::ref_inc out of line), its wake slots are the "
       f"symbols' wake_by_val/wake_by_ref", disc)
    sym_complete = {p["vaddr_int"] for p in d["points"] if p["kind"] == "complete"}
    sym_wake = sorted((p["vaddr_int"], p["skipped"]) for p in d["points"] if p["kind"] == "wake")
    with tempfile.TemporaryDirectory() as tmp:
        sbin = os.path.join(tmp, "size-stripped")
        subprocess.run(["objcopy", "--strip-all", size, sbin], check=True)
        d_s = plan(plan_dump, "--exe", sbin)
        ok(not d_s["has_symbols"], f"{series}-size stripped: no symbols used")
        s_complete = [p["vaddr_int"] for p in d_s["points"] if p["kind"] == "complete"]
        ok(s_complete and set(s_complete) <= sym_complete and len(s_complete) >= 0.9 * len(sym_complete),
           f"{series}-size stripped: {len(s_complete)} Harness::complete found from the vtables, "
           f"all among the symbols' {len(sym_complete)}", set(s_complete) - sym_complete)
        s_wake = sorted((p["vaddr_int"], p["skipped"]) for p in d_s["points"] if p["kind"] == "wake")
        ok(sym_wake and s_wake == sym_wake, f"{series}-size stripped: wake points from the task waker vtable "
           f"are the symbols' wake_by_val and wake_by_ref", (sym_wake, s_wake))


def harness_callees(binary, sites):
    """The names of the functions the calls ending at sites call: objdump's
    target, or for `call *slot(%rip)` the function the slot's relocation
    names."""
    names = {}
    for line in subprocess.run(["nm", "-C", binary], capture_output=True, text=True, timeout=60).stdout.splitlines():
        f = line.split(" ", 2)
        if len(f) == 3 and f[0]:
            names.setdefault(int(f[0], 16), f[2])
    slots = {}
    for line in subprocess.run(["readelf", "-rW", binary], capture_output=True, text=True, timeout=60).stdout.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] == "R_X86_64_RELATIVE":
            slots[int(f[0], 16)] = names.get(int(f[3], 16), f[3])
    want, out = set(sites), {}
    for line in subprocess.run(["objdump", "-d", "-w", "-C", binary], capture_output=True, text=True,
                               timeout=300).stdout.splitlines():
        m = OBJ_LINE.match(line)
        if not m or int(m.group(1), 16) + len(m.group(2).split()) not in want:
            continue
        end = int(m.group(1), 16) + len(m.group(2).split())
        slot = re.search(r"call\s+\*0x[0-9a-f]+\(%rip\)\s+# ([0-9a-f]+)", line)
        direct = re.search(r"call\s+[0-9a-f]+ <(.*)>", line)
        out[end] = slots.get(int(slot.group(1), 16), "?") if slot else direct.group(1) if direct else line
    return out


def check_harness_sites(binary, d, d_s, what):
    """The plan's harness call sites: calls in the task poll functions into
    Tokio's task state and scheduler code (the yield after a task woke
    itself) or into the panic handling of the harness's catch_unwind (the
    future's frames are gone there), found from the code alone: the
    stripped build finds the same."""
    sites = d.get("harness_call_sites") or []
    callees = harness_callees(binary, sites)
    runtime = [n for n in callees.values() if (n.startswith(("tokio::runtime::", "<tokio::runtime::")) and
               ("::task::state::State::" in n or "yield_now" in n or "::task::" in n or "::scheduler::" in n)) or
               n.startswith(("std::panicking::", "core::panicking::"))]
    ok(sites and len(callees) == len(sites) and len(runtime) == len(sites),
       f"{what}: {len(sites)} harness call sites, each a call into Tokio's task or scheduler code "
       f"({sorted(set(callees.values()))[:6]})", sorted(set(callees.values()) - set(runtime))[:10])
    ok(any("Schedule for" in n and n.endswith("yield_now") for n in runtime),
       f"{what}: among them the scheduler's yield_now, where a task that woke itself is rescheduled")
    ok(d_s.get("harness_call_sites") == sites, f"{what}: the stripped build finds the same sites "
       f"({len(d_s.get('harness_call_sites') or [])})")


def check_target(plan_dump, series, release, v0, stripped, debug):
    d_rel = plan(plan_dump, "--exe", release)
    check_symbolized(release, d_rel, series, f"{series}-release", False)
    d_v0 = plan(plan_dump, "--exe", v0)
    check_symbolized(v0, d_v0, series, f"{series}-v0", True)
    v0_labels = [p["label"] for p in polls(d_v0)]
    ok(all("{closure#" not in l or "{{closure}}" not in l for l in v0_labels) and
       any("{closure#" in l for l in v0_labels), f"{series}-v0: v0 closure names kept ({{closure#N}})")

    with tempfile.TemporaryDirectory() as tmp:
        # Alone: no debug file next to it, so only the vtable scan can work.
        alone = os.path.join(tmp, "alone")
        os.mkdir(alone)
        shutil.copy(stripped, alone)
        sbin = os.path.join(alone, os.path.basename(stripped))
        d_s = plan(plan_dump, "--exe", sbin)
        check_common(d_s, series, f"{series}-stripped")
        ok(not d_s["has_symbols"] and d_s["discovery"]["polls_by_symbols"] == 0,
           f"{series}-stripped: no symbols used")
        rel_addrs = sorted(p["vaddr_int"] for p in polls(d_rel))
        s_addrs = sorted(p["vaddr_int"] for p in polls(d_s))
        ok(s_addrs == rel_addrs, f"{series}-stripped: vtable scan finds the same {len(rel_addrs)} polls "
           f"as the symbolized build ({len(s_addrs)})", set(rel_addrs) ^ set(s_addrs))
        # strip may lay the file out anew: offsets can differ, the code at them must not.
        same_code = all(file_bytes(release, a["file_offset"]) == file_bytes(sbin, b["file_offset"])
                        for a, b in zip(sorted(polls(d_rel), key=lambda p: p["vaddr_int"]),
                                        sorted(polls(d_s), key=lambda p: p["vaddr_int"])))
        ok(same_code, f"{series}-stripped: each poll's file offset holds the same code as in the release file")
        boxed_rel = sorted((p["vaddr_int"], p["dyn_vtable_hdr_off"]) for p in polls(d_rel) if p.get("boxed_dyn"))
        boxed_s = sorted((p["vaddr_int"], p["dyn_vtable_hdr_off"]) for p in polls(d_s) if p.get("boxed_dyn"))
        ok(boxed_s == boxed_rel, f"{series}-stripped: the same {len(boxed_rel)} boxed-dyn polls found from code, "
           f"same vtable offsets", (boxed_rel, boxed_s))
        ok(all(p["label"] == p["vaddr"] for p in polls(d_s)),
           f"{series}-stripped: poll labels are the poll address")
        check_harness_sites(release, d_rel, d_s, f"{series}-release")
        # Blocking-pool tasks from the vtable's shape alone: the same polls the
        # symbolized build names BlockingTask<...>.
        blk_rel = sorted(p["vaddr_int"] for p in polls(d_rel) if "BlockingTask<" in p["label"])
        blk_s = sorted(p["vaddr_int"] for p in polls(d_s) if p.get("blocking_task"))
        ok(blk_rel and blk_s == blk_rel and
           all(bool(p.get("blocking_task")) == ("BlockingTask<" in p["label"]) for p in polls(d_rel)),
           f"{series}-stripped: the {len(blk_rel)} blocking-pool polls found from the vtable shape, "
           f"the same the symbols name BlockingTask", (blk_rel, blk_s))
        rel_complete = {p["vaddr_int"] for p in d_rel["points"] if p["kind"] == "complete"}
        s_complete = [p["vaddr_int"] for p in d_s["points"] if p["kind"] == "complete"]
        ok(s_complete and set(s_complete) <= rel_complete and len(s_complete) >= 0.9 * len(rel_complete),
           f"{series}-stripped: terminate points: {len(s_complete)} Harness::complete found from the vtables, "
           f"all among the release build's {len(rel_complete)}", set(s_complete) - rel_complete)
        rel_wake = sorted((p["vaddr_int"], p["skipped"]) for p in d_rel["points"] if p["kind"] == "wake")
        s_wake = sorted((p["vaddr_int"], p["skipped"]) for p in d_s["points"] if p["kind"] == "wake")
        ok(rel_wake and s_wake == rel_wake, f"{series}-stripped: wake points from the task waker vtable: the "
           f"release build's wake_by_val and wake_by_ref, attached or skipped alike", (rel_wake, s_wake))
        ok(any(m["kind"] == "park" and "sched_switch" in m["reason"] for m in d_s["missing"]),
           f"{series}-stripped: missing park reported with the sched_switch fallback")
        check_insns(sbin, d_s, f"{series}-stripped")

        # Section headers removed too (sstrip-like): relocations come from
        # PT_DYNAMIC, the build-id from PT_NOTE.
        raw = bytearray(open(sbin, "rb").read())
        raw[0x28:0x30] = bytes(8)   # e_shoff
        raw[0x3c:0x40] = bytes(4)   # e_shnum, e_shstrndx
        nosh = os.path.join(alone, "no-section-headers")
        with open(nosh, "wb") as f:
            f.write(raw)
        d_n = plan(plan_dump, "--exe", nosh)
        ok(sorted(p["vaddr_int"] for p in polls(d_n)) == s_addrs and d_n["build_id"] == d_s["build_id"],
           f"{series}-stripped without section headers: same {len(s_addrs)} polls, same build-id")

        # With its debug file under the .gnu_debuglink name: symbols come back.
        shutil.copy(debug, tmp)
        shutil.copy(stripped, tmp)
        d_d = plan(plan_dump, "--exe", os.path.join(tmp, os.path.basename(stripped)))
        ok(d_d["has_symbols"] and d_d["debug_file"] and d_d["discovery"]["routes_agree"],
           f"{series}-stripped+debug: symbols from the debug file, routes agree", d_d["debug_file"])
        ok(sorted(p["label"] for p in polls(d_d)) == sorted(p["label"] for p in polls(d_rel)),
           f"{series}-stripped+debug: same poll labels as the release build")
    finish()


def check_errors(plan_dump):
    def run(*args):
        return subprocess.run([plan_dump, *args], capture_output=True, text=True, timeout=30)

    p = run("--exe", "/bin/true")
    ok(p.returncode != 0 and "not a Tokio binary" in p.stderr and p.stderr.count("\n") == 1,
       "/bin/true: one-line 'not a Tokio binary' error, non-zero exit", p.stderr)
    pid = 4194303
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    p = run("--pid", str(pid))
    ok(p.returncode != 0 and f"no process with PID {pid}" in p.stderr and p.stderr.count("\n") == 1,
       "unknown PID: one-line error, non-zero exit", p.stderr)
    p = run("--exe", "/nonexistent/exe")
    ok(p.returncode != 0 and "cannot open /nonexistent/exe" in p.stderr, "missing file: clear error", p.stderr)
    p = run("--exe", "/etc/hostname")
    ok(p.returncode != 0 and "not an ELF file" in p.stderr, "non-ELF file: clear error", p.stderr)
    p = run("--pid", "2")
    ok(p.returncode != 0 and "no executable" in p.stderr, "kernel thread: clear error", p.stderr)
    # Unprivileged caller, root's process: refused with the reason, not a crash.
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        copy = os.path.join(tmp, "plan-dump")
        shutil.copy(plan_dump, copy)
        os.chmod(copy, 0o755)
        victim = subprocess.Popen(["sleep", "30"])
        try:
            p = subprocess.run(["runuser", "-u", "nobody", "--", copy, "--pid", str(victim.pid)],
                               capture_output=True, text=True, timeout=30)
        finally:
            victim.kill()
            victim.wait()
        ok(p.returncode == 1 and "permission denied" in p.stderr and p.stderr.count("\n") == 1,
           "no permission: one-line error, non-zero exit", p.stderr)
    p = run("--pid", "abc")
    ok(p.returncode == 2 and "invalid PID" in p.stderr, "bad PID argument: usage error", p.stderr)
    finish()


def check_pid(plan_dump, binary):
    proc = subprocess.Popen([binary, "mixed", "--flavor", "multi-thread", "--duration", "20"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        d_pid = plan(plan_dump, "--pid", str(proc.pid))
        d_file = plan(plan_dump, "--exe", binary)
        ok(d_pid["exe_path"].startswith(f"/proc/{proc.pid}/"), f"plan by PID opens via /proc ({d_pid['exe_path']})")
        ok(d_pid["build_id"] == d_file["build_id"], "same build-id as the file")
        ok([p["file_offset"] for p in d_pid["points"]] == [p["file_offset"] for p in d_file["points"]],
           f"plan by PID == plan by file ({len(d_pid['points'])} points)")
        print(f"# plan by PID: {d_pid['elapsed_ms']:.1f} ms")
    finally:
        proc.kill()
        proc.wait()
    finish()


def check_mountns(plan_dump, binary):
    """Target runs from a tmpfs mounted only in its own mount namespace: the
    path does not exist for us, the plan must still open it via /proc."""
    with tempfile.TemporaryDirectory() as tmp:
        script = (f"mount -t tmpfs none {tmp} && cp {binary} {tmp}/target && "
                  f"exec {tmp}/target mixed --flavor current-thread --duration 20")
        proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            exe = ""
            for _ in range(50):
                time.sleep(0.1)
                try:
                    exe = os.readlink(f"/proc/{proc.pid}/exe")
                except OSError:
                    exe = ""
                if exe.endswith("/target"):
                    break
            ok(exe == f"{tmp}/target" and not os.path.exists(exe),
               f"target runs from a path invisible to us ({exe})", proc.stderr.read1() if proc.poll() else "")
            d_pid = plan(plan_dump, "--pid", str(proc.pid))
            d_file = plan(plan_dump, "--exe", binary)
            ok(d_pid["exe_path"] == f"/proc/{proc.pid}/root{tmp}/target",
               f"opened through the target's root ({d_pid['exe_path']})")
            ok([p["file_offset"] for p in d_pid["points"]] == [p["file_offset"] for p in d_file["points"]],
               "same plan as for the file")
        finally:
            proc.kill()
            proc.wait()
    finish()


def check_foreign(plan_dump, binary):
    """A real third-party program built with some Tokio we did not choose."""
    d = plan(plan_dump, "--exe", binary)
    disc = d["discovery"]
    print(f"# {binary}: tokio {d['tokio_version']}, {len(polls(d))} polls, {disc['vtables']} vtables, "
          f"plan {d['elapsed_ms']:.1f} ms, shape: {d['shape']}")
    print("# counts: " + ", ".join(f"{k}={v['attached']}/{v['found']}" for k, v in d["counts"].items()))
    ok(len(polls(d)) > 0, "raw::poll instances found")
    ok(disc["polls_by_scan"] > 0, "vtable scan finds them")
    if d["has_symbols"]:
        ok(disc["routes_agree"], f"symbol route == vtable scan ({disc['polls_by_symbols']} vs "
           f"{disc['polls_by_scan']})", disc)
        ok(d["counts"]["park"]["attached"] > 0, "a park point found", d["missing"])
    ok(d["task_layout"]["vtable_id_off"] > 0, "id offset discovered")
    finish()


def check_d9ctl(plan_dump, d9ctl, binary):
    """`d9ctl plan` is the same command line as plan-dump."""
    a = plan(plan_dump, "--exe", binary)
    p = subprocess.run([d9ctl, "plan", "--json", "--exe", binary], capture_output=True, text=True, timeout=60)
    ok(p.returncode == 0, "d9ctl plan --exe exits 0", p.stderr)
    b = json.loads(p.stdout) if p.returncode == 0 else {}
    ok(a["points"] == b.get("points") and a["missing"] == b.get("missing"), "same plan as plan-dump")
    p = subprocess.run([d9ctl, "plan", "--exe", "/bin/true"], capture_output=True, text=True, timeout=60)
    ok(p.returncode == 1 and p.stderr.startswith("d9ctl plan: ") and "not a Tokio binary" in p.stderr,
       "d9ctl plan: one-line error for a non-Tokio binary", p.stderr)
    finish()


def read_maps(pid):
    maps = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            maps.append((lo, hi, parts[1], int(parts[2], 16), parts[5].strip() if len(parts) > 5 else ""))
    return maps


def check_memory(plan_dump, binary):
    """Follow the plan's task-layout chain through a live target's memory,
    as BPF will: find task headers by their vtable pointer (hdr + 16), read
    the id through the vtable's id offset, and for boxed tasks the concrete
    future's poll through dyn_vtable_hdr_off, then symbolize it."""
    d = plan(plan_dump, "--exe", binary)
    lay = d["task_layout"]
    vt_hdr, id_off = lay["hdr_vtable_off"], lay["vtable_id_off"]
    polls_by_vt = {int(p["vtable_vaddr"], 16): p for p in polls(d) if p.get("vtable_vaddr")}
    syms = []
    for line in subprocess.run(["nm", "-C", "--defined-only", binary], capture_output=True,
                               text=True).stdout.splitlines():
        f = line.split(maxsplit=2)
        if len(f) == 3 and f[1] in "tT":
            syms.append((int(f[0], 16), f[2]))
    syms.sort()

    def symbolize(addr):
        import bisect
        i = bisect.bisect_right(syms, (addr, "\xff")) - 1
        return syms[i][1] if i >= 0 else "?"

    proc = subprocess.Popen([binary, "mixed", "--flavor", "multi-thread", "--duration", "30"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    headers, ids, concrete, boxed_seen, snapshots = {}, set(), set(), set(), 0
    concrete_vaddrs = set()
    try:
        time.sleep(1.0)
        maps = read_maps(proc.pid)
        exe = os.readlink(f"/proc/{proc.pid}/exe")
        bias = min(lo - off for lo, hi, perm, off, path in maps if path == exe)
        wanted = {vt + bias: vt for vt in polls_by_vt}
        mem = open(f"/proc/{proc.pid}/mem", "rb", buffering=0)

        def u64(addr):
            if not 0 < addr < 1 << 47:
                raise OSError("not a user address")
            mem.seek(addr)
            return struct.unpack("<Q", mem.read(8))[0]

        def task_alive(state):
            # Live tasks hold a few references (state >> 6, REF_ONE = 64); freed
            # cells keep a stale vtable word under allocator links.
            return 1 <= state >> 6 < 1024

        def vt_word(pat):
            return struct.unpack("<Q", pat)[0]

        def regions():
            for lo, hi, perm, off, path in read_maps(proc.pid):
                if perm == "rw-p" and (not path or path == "[heap]") and hi - lo <= 256 << 20:
                    try:
                        mem.seek(lo)
                        yield lo, mem.read(hi - lo)
                    except OSError:
                        continue

        @contextlib.contextmanager
        def stopped():
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                yield
            finally:
                os.kill(proc.pid, signal.SIGCONT)

        def resolve_boxed(hdr, p):
            boxed_seen.add(hdr)
            try:
                fn = u64(u64(hdr + p["dyn_vtable_hdr_off"]) + 8 * lay["dyn_future_poll_slot"])
            except OSError:
                return
            concrete.add(symbolize(fn - bias))
            concrete_vaddrs.add(fn - bias)

        # Every live task: a few full snapshots.
        for _ in range(3):
            with stopped():
                snapshots += 1
                for lo, buf in regions():
                    for k, (w,) in enumerate(struct.iter_unpack("<Q", buf[:len(buf) // 8 * 8])):
                        if w not in wanted:
                            continue
                        hdr = lo + 8 * k - vt_hdr
                        try:
                            state = u64(hdr)
                            tid = u64(hdr + u64(w + id_off))
                        except OSError:
                            continue
                        if task_alive(state):
                            headers[hdr] = (wanted[w], tid)
            time.sleep(0.1)
        # Boxed tasks live ~3 ms of every ~53 ms: many quick snapshots that
        # only look for the boxed tasks' vtable words.
        boxed = {struct.pack("<Q", vt + bias): polls_by_vt[vt] for vt in polls_by_vt
                 if polls_by_vt[vt].get("boxed_dyn") and polls_by_vt[vt]["dyn_vtable_hdr_off"]}
        deadline = time.monotonic() + 20
        while boxed and not concrete and time.monotonic() < deadline:
            with stopped():
                snapshots += 1
                for lo, buf in regions():
                    for pat, p in boxed.items():
                        i = buf.find(pat)
                        while i >= 0:
                            if i % 8 == 0:
                                hdr = lo + i - vt_hdr
                                # Not COMPLETE (state bit 1): the stage still holds
                                # the future, as it does at every poll entry.
                                try:
                                    state = u64(hdr)
                                    tid = u64(hdr + u64(vt_word(pat) + id_off))
                                    live = task_alive(state) and not state & 2 and 0 < tid < 10_000_000
                                except OSError:
                                    live = False
                                if live:
                                    resolve_boxed(hdr, p)
                            i = buf.find(pat, i + 1)
            # A random pause, not a fixed 5 ms one: with it the snapshots
            # fell into step with the target's 50 ms timer (its batch is
            # due while the target is stopped, runs at the resume and can
            # end before the next stop). Beside a valgrind test it took
            # 83-187 snapshots in 3 of 10 runs and found none in 475 once;
            # with the random pause, 5-15 in 10 of 10.
            time.sleep(random.uniform(0.0, 0.06))
    finally:
        proc.kill()
        proc.wait()
    good = [h for h, (vt, tid) in headers.items() if 0 < tid < 10_000_000]
    ids = {tid for vt, tid in headers.values()}
    print(f"# {len(headers)} task headers found by vtable pointer, {len(good)} with a plausible id; "
          f"{len(ids)} distinct ids; {snapshots} snapshots; {len(boxed_seen)} boxed task headers, "
          f"their futures resolved to: {sorted(concrete)[:6]}")
    ok(len({vt for vt, _ in headers.values()}) >= 3, "live task headers found for several vtables "
       f"at hdr+{vt_hdr}")
    ok(headers and len(good) >= 0.9 * len(headers), f"task id read via vtable+{id_off} is a small positive "
       f"integer ({len(good)}/{len(headers)})")
    ok(len(ids) >= 0.5 * len(headers), "ids differ between tasks")
    ok(concrete and all("d9_target" in c for c in concrete),
       "boxed tasks: dyn vtable slot 3 symbolizes to the target's own future", sorted(concrete))
    # What the daemon labels them by: the plan's table, no lookup of its own.
    table = {f["vaddr"]: f["name"] for f in d["dyn_fns"]["fns"]}
    ok(concrete_vaddrs and all(v in table and "d9_target" in table[v] for v in concrete_vaddrs),
       f"boxed tasks: every concrete poll fn seen in memory is in the plan's dyn_fns "
       f"({len(concrete_vaddrs)}: {sorted(table.get(v, hex(v)) for v in concrete_vaddrs)[:4]})")
    finish()


def objdump_boundaries(binary):
    out = subprocess.run(["objdump", "-d", "-w", "--no-show-raw-insn", "-j", ".text", binary],
                         capture_output=True, text=True, timeout=120).stdout
    addrs = set()
    for line in out.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\t", line)
        if m:
            addrs.add(int(m.group(1), 16))
    return addrs


def check_lengths(x86_lengths, binary):
    """Walk whole function bodies with our decoder: every boundary must be one
    of objdump's, and every objdump boundary inside the body one of ours."""
    nm = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True).stdout
    funcs = []
    for line in nm.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tT" and int(f[1], 16) > 0:
            funcs.append((int(f[0], 16), int(f[1], 16), f[3]))
    funcs = sorted(set(funcs))
    tokio = [f for f in funcs if "tokio" in f[2]]
    step = max(1, len(funcs) // 400)
    chosen = sorted(set(tokio + funcs[::step]))
    ref = objdump_boundaries(binary)
    ours = set()
    for i in range(0, len(chosen), 200):
        args = []
        for start, size, _ in chosen[i:i + 200]:
            args += [hex(start), hex(start + size)]
        out = subprocess.run([x86_lengths, binary, *args], capture_output=True, text=True, timeout=60)
        if not ok(out.returncode == 0, f"x86-lengths runs (batch {i // 200})", out.stderr):
            finish()
        for line in out.stdout.splitlines():
            a, n = line.split()
            if int(n) == 0:
                ours.add(-int(a, 16))  # undecodable: recorded as a mismatch
            ours.add(int(a, 16))
    expected = set()
    total_bytes = 0
    for start, size, _ in chosen:
        expected |= {a for a in ref if start <= a < start + size}
        total_bytes += size
    undecodable = [hex(-a) for a in ours if a < 0]
    missing = sorted(expected - ours)
    extra = sorted(a for a in ours - expected if a >= 0)
    ok(not undecodable, f"no undecodable instruction in {len(chosen)} functions ({total_bytes} bytes)", undecodable[:10])
    ok(not missing and not extra, f"instruction boundaries == objdump's ({len(expected)} instructions)",
       f"missing {[hex(a) for a in missing[:10]]} extra {[hex(a) for a in extra[:10]]}")
    finish()


def check_bodies(plan_dump, binary):
    """A frame-pointer build without .eh_frame, stripped (Deno's shape): no
    symbol size and no unwind table bounds a poll function, so a code sweep
    does (the default probe set looks for these bodies in stacks). Each body
    must be the symbol's: from its entry to its end, plus at most the
    padding before the next function (15 bytes), never short of it."""
    d = plan(plan_dump, "--exe", binary)
    sym = {p["vaddr_int"]: p for p in polls(d)}
    ok(d["has_symbols"] and sym and all("body_end" in p for p in sym.values()),
       f"with symbols: a body for each of the {len(sym)} polls")
    with tempfile.TemporaryDirectory() as tmp:
        sbin = os.path.join(tmp, "fp-stripped")
        subprocess.run(["objcopy", "--strip-all", binary, sbin], check=True)
        d_s = plan(plan_dump, "--exe", sbin)
    swept = {p["vaddr_int"]: p for p in polls(d_s)}
    ok(not d_s["has_symbols"] and set(swept) == set(sym),
       f"stripped: the same {len(swept)} polls, found by the vtable scan")
    bad = [(hex(v), sym[v].get("body_end", 0) - v, p.get("body_start", 0) - v, p.get("body_end", 0) - v)
           for v, p in swept.items() if v in sym and not (
               p.get("body_start") == v and sym[v]["body_end"] <= p.get("body_end", 0) < sym[v]["body_end"] + 16)]
    ok(swept and not bad, f"stripped: every swept body is its symbol's, at most its padding longer "
       f"({len(swept) - len(bad)} of {len(swept)})", bad[:10])
    finish()


def relative_relocs(binary):
    """{slot: target} of the binary's R_X86_64_RELATIVE relocations."""
    out = {}
    for line in subprocess.run(["readelf", "-rW", binary], capture_output=True, text=True,
                               timeout=60).stdout.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] == "R_X86_64_RELATIVE":
            out[int(f[0], 16)] = int(f[3], 16)
    return out


def jmp_target(binary, vaddr, delta, relocs=None):
    """Where a jmp at vaddr goes (e9 rel32, eb rel8, or ff 25 through a GOT
    slot its relocation fills), or None; delta is vaddr minus file offset
    in the text segment."""
    b = file_bytes(binary, vaddr - delta, 6)
    if b[0] == 0xe9:
        return vaddr + 5 + int.from_bytes(b[1:5], "little", signed=True)
    if b[0] == 0xeb:
        return vaddr + 2 + int.from_bytes(b[1:2], "little", signed=True)
    if b[:2] == b"\xff\x25" and relocs:
        return relocs.get(vaddr + 6 + int.from_bytes(b[2:6], "little", signed=True))
    return None


def check_stubs(plan_dump, binary):
    """raw::poll<T,S> that is only a jump stub (codex: most of its polls;
    the size-built target and npm nushell: `jmp *slot(%rip)` through the
    GOT): its body, where the default set looks for frames of the poll, is
    the function the jumps lead to, not the stub (no frame can lie in a
    function that only jumps), and its label names the future. The file's
    bytes and relocations say where each of up to 120 polls spread over the
    plan jumps; before, every stub's body was its own 16 bytes (dprint 0.57:
    no worker, park or long poll in the default set), and a GOT stub's body
    its 6 bytes, its label the bare address."""
    d = plan(plan_dump, "--exe", binary)
    ps = polls(d)
    pick = ps[::max(1, len(ps) // 120)]
    relocs = relative_relocs(binary)
    bad, stubs = [], 0
    for p in pick:
        v, to = p["vaddr_int"], p["vaddr_int"]
        delta = v - p["file_offset"]
        for _ in range(4):
            nxt = jmp_target(binary, to, delta, relocs)
            if nxt is None:
                break
            to = nxt
        stubs += to != v
        if p.get("body_start") != to or not p.get("body_end", 0) > to:
            bad.append((hex(v), hex(to), hex(p.get("body_start", 0)), hex(p.get("body_end", 0))))
    ok(len(pick) >= min(100, len(ps)) and stubs >= 10, f"{stubs} of {len(pick)} polls checked are jump stubs "
       f"({len(ps)} polls in the plan)")
    bare = [p["label"] for p in ps if p["label"].startswith("0x")]
    ok(d["has_symbols"] is False or not bare, f"every poll names its future ({len(bare)} do not"
       f"{'' if d['has_symbols'] else '; stripped: not asked'})", bare[:5])
    disc = d["discovery"]
    ok(disc["completes_by_scan"] >= 0.9 * disc["vtables"] and not disc["completes_scan_wrong"],
       f"complete found from the code for {disc['completes_by_scan']} of {disc['vtables']} vtables, through the "
       f"stubs and the calls they lead to ({disc['completes_scan_wrong']} wrong)")
    ok(not bad, f"each poll's body starts where its leading jumps lead ({len(pick) - len(bad)} of {len(pick)})",
       bad[:10])
    finish()


def nm_functions(binary):
    """(vaddr, raw name) of the binary's function symbols, from nm."""
    out = subprocess.run(["nm", binary], capture_output=True, text=True, timeout=120).stdout
    return [(int(f[0], 16), f[2]) for f in (x.split() for x in out.splitlines()) if len(f) == 3 and f[1] in "tTwW"]


def check_bolt(plan_dump, binary):
    """A BOLT-optimized non-PIE release (npm mise 2026.9.15): BOLT moved hot
    functions to a new .text, left each one's old copy (`NAME.org.0`, its
    first instruction a jmp to the moved body) and split off cold parts
    (`NAME.cold.0`), all named like the function. A probe there would start
    a poll in the middle of one (.cold) or twice (.org). Its constants sit in
    .bolt.org.rodata, and a non-PIE build has no relocations to find the
    task waker's vtable by. Checked against nm and the file's bytes."""
    d = plan(plan_dump, "--exe", binary)
    syms = nm_functions(binary)
    part = re.compile(r"\.(cold(\.[0-9]+)?|org\.[0-9]+)$")
    parts = {v: n for v, n in syms if part.search(n)}
    tokio_parts = [n for n in parts.values() if "5tokio7runtime4task" in n]
    at_part = [(p["kind"], hex(p["vaddr_int"]), parts[p["vaddr_int"]]) for p in d["points"]
               if p["vaddr_int"] in parts]
    ok(len(tokio_parts) >= 6 and not at_part,
       f"no probe point at one of the {len(parts)} .org/.cold symbols ({len(tokio_parts)} of Tokio's task code)",
       at_part[:6])
    disc = d["discovery"]
    ok(disc["routes_agree"] and disc["polls_by_symbols"] == disc["polls_by_scan"] > 100,
       f"symbols and vtable scan find the same polls ({disc['polls_by_symbols']} and {disc['polls_by_scan']})")
    with open(binary, "rb") as f:
        versions = re.findall(rb"tokio-(1\.[0-9]+\.[0-9]+)/src", f.read())
    common = max(set(versions), key=versions.count).decode() if versions else None
    ok(common and d.get("tokio_version") == common,
       f"Tokio version {d.get('tokio_version')} (the file's source paths say {common})")
    nm = subprocess.run(["nm", binary], capture_output=True, text=True, timeout=120).stdout.splitlines()
    vt = [int(x.split()[0], 16) for x in nm if "5tokio7runtime4task5waker12WAKER_VTABLE" in x]
    ok(len(vt) == 1 and disc.get("waker_vtable") == vt[0] and disc.get("waker_scan_agrees"),
       f"non-PIE: the task waker vtable from the words of .data.rel.ro ({disc.get('waker_vtable', 0):#x}), "
       f"nm: {[hex(v) for v in vt]}, its wake slots the symbols' wake_by_val and wake_by_ref")
    # Harness sites: the rel32 calls ending there, named by nm. Tokio
    # 1.53's with_scheduler (the yield after a self-wake) is called from a
    # third of the task poll functions, one runtime flavour's, and from
    # each task type's schedule function.
    names = {int(f[0], 16): f[2] for f in (x.split(" ", 2) for x in subprocess.run(
        ["nm", "-C", binary], capture_output=True, text=True, timeout=120).stdout.splitlines())
        if len(f) == 3 and f[0]}
    loads = [(int(f[2], 16), int(f[1], 16), int(f[4], 16)) for f in (x.split() for x in subprocess.run(
        ["readelf", "-lW", binary], capture_output=True, text=True, timeout=30).stdout.splitlines())
        if f[:1] == ["LOAD"]]
    callees = {}
    for site in d.get("harness_call_sites") or []:
        off = next((o + site - 5 - v for v, o, n in loads if v <= site - 5 < v + n), None)
        b = file_bytes(binary, off, 5) if off is not None else b"\0"
        callees[site] = names.get(site + int.from_bytes(b[1:], "little", signed=True), "?") if b[0] == 0xe8 else "?"
    runtime = [n for n in callees.values() if n.startswith(("tokio::runtime::", "std::panicking::",
                                                            "core::panicking::"))]
    ok(callees and len(runtime) == len(callees) and
       any(n.startswith("tokio::runtime::context::with_scheduler") for n in runtime),
       f"{len(callees)} harness call sites, each a call into Tokio's runtime, with_scheduler among them "
       f"({sorted(set(callees.values()))[:5]})", sorted(set(callees.values()) - set(runtime))[:10])
    with tempfile.TemporaryDirectory() as tmp:
        sbin = os.path.join(tmp, "stripped")
        subprocess.run(["objcopy", "--strip-all", binary, sbin], check=True, capture_output=True)
        d_s = plan(plan_dump, "--exe", sbin)
    same = sorted(p["vaddr_int"] for p in polls(d_s)) == sorted(p["vaddr_int"] for p in polls(d))
    wakes = sorted(p["vaddr_int"] for p in d["points"] if p["kind"] == "wake")
    ok(not d_s["has_symbols"] and same and
       sorted(p["vaddr_int"] for p in d_s["points"] if p["kind"] == "wake") == wakes and
       d_s.get("tokio_version") == common and d_s.get("harness_call_sites") == d.get("harness_call_sites"),
       f"stripped: the same {len(polls(d_s))} polls, the same wake points {[hex(w) for w in wakes]}, the same "
       f"Tokio version and harness sites ({len(d_s.get('harness_call_sites') or [])})")
    finish()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        if mode == "target" and len(sys.argv) == 8:
            check_target(*sys.argv[2:])
        elif mode == "size" and len(sys.argv) == 5:
            check_size(*sys.argv[2:])
        elif mode == "errors" and len(sys.argv) == 3:
            check_errors(sys.argv[2])
        elif mode == "pid" and len(sys.argv) == 4:
            check_pid(*sys.argv[2:])
        elif mode == "mountns" and len(sys.argv) == 4:
            check_mountns(*sys.argv[2:])
        elif mode == "memory" and len(sys.argv) == 4:
            check_memory(*sys.argv[2:])
        elif mode == "d9ctl" and len(sys.argv) == 5:
            check_d9ctl(*sys.argv[2:])
        elif mode == "foreign" and len(sys.argv) == 4:
            check_foreign(*sys.argv[2:])
        elif mode == "lengths" and len(sys.argv) == 4:
            check_lengths(*sys.argv[2:])
        elif mode == "bodies" and len(sys.argv) == 4:
            check_bodies(*sys.argv[2:])
        elif mode == "stubs" and len(sys.argv) == 4:
            check_stubs(*sys.argv[2:])
        elif mode == "bolt" and len(sys.argv) == 4:
            check_bolt(*sys.argv[2:])
        else:
            print(__doc__, file=sys.stderr)
            sys.exit(2)
    except Exception as e:  # a crash is a failure, never a pass
        ok(False, f"harness error: {e}")
        finish()
