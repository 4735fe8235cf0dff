#!/usr/bin/env python3
"""End to end, symbols of a STRIPPED target: a real d9d records a copy of the
stripped release Tokio target with `d9ctl record -- COPY mixed`, and the
sealed segment's SymbolTableEntry records must name its CPU samples.
 - with the debug file beside the copy (its .gnu_debuglink name, the place
   the lookup shared with the probe planner finds it): on-CPU samples in
   busy_block_50ms go through a named raw::poll;
 - with no debug file anywhere the lookup looks: the sealer still writes
   entries, the target's own addresses as "[unnamed] FILE 0xVADDR" (its
   link-time address, for d9ctl symbolize later; no Rust function names),
   and d9d stays up.
The copies live in temp dirs so nothing is written under /usr/lib/debug.
Usage: test_record_stripped_symbols.py D9D D9CTL STRIPPED DEBUGFILE"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines  # noqa

D9D, D9CTL, STRIPPED, DEBUG = sys.argv[1:5]


def debuglink(path):
    """The file name in .gnu_debuglink: NUL-terminated, then padding and a
    CRC32 whose bytes are arbitrary, so read the section as bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        sect = os.path.join(tmp, "debuglink")
        r = subprocess.run(["objcopy", "--dump-section", f".gnu_debuglink={sect}", path, os.path.join(tmp, "copy")],
                           capture_output=True)
        if r.returncode != 0 or not os.path.exists(sect):
            return None
        with open(sect, "rb") as f:
            name = f.read().split(b"\0", 1)[0]
    return name.decode() or None


def segment(path):
    """(rc, {addr: name} of every SymbolTableEntry, [[addr...] callchains of source 0])"""
    rc, out = dump_json_lines(D9CTL, path)
    syms, chains = {}, []
    for line in out.splitlines():
        if line.startswith('{"event":"SymbolTableEntry"'):
            f = json.loads(line)["fields"]
            syms[f["addr"]] = f["symbol_name"]
        elif line.startswith('{"event":"CpuSampleEvent"'):
            f = json.loads(line)["fields"]
            if f.get("callchain") and f["source"] == 0:
                chains.append([int(a, 16) for a in f["callchain"]])
    return rc, syms, chains


def record(t, d, binary, what):
    r = d.ctl("record", "--probes", "all", "--duration", "30s", "--out", d.out, "--", binary, "mixed", "--duration", "4")
    paths = r.stdout.split()
    t.ok(r.returncode == 0 and paths, f"{what}: record -- CMD sealed {len(paths)} segments", r.stderr)
    syms, chains = {}, []
    for p in paths:
        rc, s, c = segment(p)
        t.ok(rc == 0, f"{what}: {os.path.basename(p)} decodes")
        syms.update(s)
        chains += c
    return syms, chains


def main():
    t = Tap()
    link = debuglink(STRIPPED)
    if not link:
        t.bail(f"{STRIPPED} has no .gnu_debuglink")
    work = tempfile.mkdtemp(prefix="d9-stripped-syms-")
    with_dbg, without = os.path.join(work, "with"), os.path.join(work, "without")
    os.makedirs(with_dbg)
    os.makedirs(without)
    name = os.path.basename(STRIPPED)
    shutil.copy2(STRIPPED, os.path.join(with_dbg, name))
    shutil.copy2(DEBUG, os.path.join(with_dbg, link))
    shutil.copy2(STRIPPED, os.path.join(without, name))
    os.chmod(work, 0o755)

    d = D9d(D9D, D9CTL)
    d.out = tempfile.mkdtemp(prefix="d9-stripped-out-")
    d.start_or_bail(t)

    syms, chains = record(t, d, os.path.join(with_dbg, name), "debug file beside the copy")
    busy = [c for c in chains if any("busy_block_50ms" in syms.get(a, "") for a in c)]
    good = [c for c in busy if any("raw::poll" in syms.get(a, "") for a in c)]
    if busy:
        print("# a busy stack:")
        for a in busy[0]:
            print(f"#   {a:#x} {syms.get(a)}")
    # A sample caught in the [uprobes] page may not unwind (docs/stacks.md);
    # most must.
    t.ok(len(busy) >= 2 and len(good) * 3 >= len(busy) * 2,
         f"on-CPU samples named busy_block_50ms through raw::poll from the debug file "
         f"({len(good)} of {len(busy)}, {len(chains)} on-CPU stacks)")

    d.out = tempfile.mkdtemp(prefix="d9-stripped-out-")
    syms, chains = record(t, d, os.path.join(without, name), "no debug file")
    names = set(syms.values())
    failed = [n for n in names if n.startswith(f"[unnamed] {name} 0x")]
    t.ok(chains and syms, f"on-CPU stacks still carry symbol entries ({len(chains)} stacks, {len(syms)} entries)")
    t.ok(not any("busy_block_50ms" in n or "raw::poll" in n for n in names),
         "no Rust function names without the debug file (the stripped .dynsym has none)")
    t.ok(len(failed) > 0, f"the target's own addresses fall back to '[unnamed] {name} 0x...' ({len(failed)} entries)",
         "\n".join(sorted(names)[:20]))
    t.ok(d.proc.poll() is None, "d9d still running after both recordings")
    t.ok(d.stop() == 0, "d9d stops cleanly")
    d.cleanup(keep=t.failed > 0)
    if t.failed == 0:
        shutil.rmtree(work, ignore_errors=True)
    t.done()


main()
