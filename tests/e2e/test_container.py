#!/usr/bin/env python3
"""Containers: a target in its own mount and pid namespace, whose root is a
temp directory holding the binary (at a path the host does not have) and
its libraries (in /ctrlib, found through LD_LIBRARY_PATH), entered with
pivot_root as container runtimes do, and put in a cgroup of its own. A
d9d in the host namespaces with the rule `cgroup:/THAT_CGROUP` attaches to
it at its exec; the trace has full symbols (its own functions, Tokio's,
libc's epoll_wait read from the container's /ctrlib), the host pid, the
namespace pid 1 and the cgroup in its metadata.
Usage: test_container.py D9D D9CTL TARGET"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from d9harness import D9d, Tap, dump_json_lines, dump_summary, metadata_of, wait_for  # noqa

D9D, D9CTL, TARGET = sys.argv[1:4]
NAME = os.path.basename(TARGET)
CGROUP2 = "/sys/fs/cgroup/unified" if os.path.ismount("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"


def libs_of(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs, interp = [], None
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts and parts[parts.index("=>") + 1].startswith("/"):
            libs.append(parts[parts.index("=>") + 1])
        elif parts and parts[0].startswith("/"):
            interp = parts[0]
    return libs, interp


def make_root(root):
    """ROOT/srv/app/NAME, ROOT/ctrlib/*.so, the interpreter where the binary wants it."""
    libs, interp = libs_of(TARGET)
    os.makedirs(f"{root}/srv/app")
    os.makedirs(f"{root}/ctrlib")
    os.makedirs(f"{root}/proc")
    os.makedirs(f"{root}/oldroot")
    shutil.copy2(TARGET, f"{root}/srv/app/{NAME}")
    for lib in libs:
        shutil.copy2(lib, f"{root}/ctrlib/")
    os.makedirs(os.path.dirname(f"{root}{interp}"), exist_ok=True)
    shutil.copy2(interp, f"{root}{interp}")


# Run by unshare as pid 1 of the new pid namespace, in a private mount
# namespace: join the cgroup, mount this namespace's /proc, pivot_root into
# the temp root, and exec the target there (it stays pid 1).
ENTER = r"""
set -e
echo $$ > "$CG/cgroup.procs"
mount --make-rprivate /
mount --bind "$ROOT" "$ROOT"
mount -t proc proc "$ROOT/proc"
cd "$ROOT"
pivot_root . oldroot
cd /
export LD_LIBRARY_PATH=/ctrlib
exec "/srv/app/$NAME" mixed --duration 6
"""


def main():
    t = Tap()
    root = tempfile.mkdtemp(prefix="d9-ctr-root-")
    cg_name = os.path.basename(root)
    cg = f"{CGROUP2}/{cg_name}"
    os.mkdir(cg)
    make_root(root)
    rule = f"cgroup:/{cg_name}"
    d = D9d(D9D, D9CTL, conf=f"attach = {rule}\n")
    d.start_or_bail(t)
    ctr = None
    try:
        env = dict(os.environ, ROOT=root, CG=cg, NAME=NAME)
        ctr = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", ENTER],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def target_pid():
            try:
                with open(f"/proc/{ctr.pid}/task/{ctr.pid}/children") as f:
                    kids = f.read().split()
                pid = int(kids[0])
                return pid if os.readlink(f"/proc/{pid}/exe").endswith(f"/srv/app/{NAME}") else None
            except (OSError, IndexError, ValueError):
                return None
        pid = wait_for(target_pid, 10, 0.01)
        t.ok(pid, f"the target runs in its own namespaces as host pid {pid}", ctr.stderr.read() if not pid else None)
        if not pid:
            raise RuntimeError("no target")
        with open(f"/proc/{pid}/status") as f:
            nspid = [line.split()[1:] for line in f if line.startswith("NSpid:")][0]
        t.ok(nspid == [str(pid), "1"], f"its NSpid is {nspid}: pid 1 inside")
        live = wait_for(lambda: [s for s in (d.status() or {}).get("targets", []) if s["pid"] == pid], 10, 0.05)
        s = live[0] if live else {}
        t.ok(s.get("rule") == rule and s.get("cgroup") == f"/{cg_name}" and s.get("nspid") == f"{pid} 1",
             f"{rule} attached host pid {pid} at its exec ({s.get('exec_to_attach_ms')} ms), "
             f"nspid '{s.get('nspid')}'", json.dumps(s)[:2000])
        out, err = ctr.communicate(timeout=60)
        truth = next((json.loads(x) for x in out.splitlines() if x.startswith("{")), None)
        t.ok(ctr.returncode == 0 and truth, "the target ran to its end inside the namespaces", err)

        def sealed():
            mine = [x for x in (d.status() or {}).get("targets", []) if x["pid"] == pid]
            return mine[0] if mine and mine[0]["state"] == "done" else None
        s = wait_for(sealed, 60, 0.2) or {}
        paths = s.get("sealed") or []
        t.ok(paths, f"the session ended and sealed {len(paths)} segments ({s.get('end_reason')})")
        polls, syms, bad = 0, set(), []
        for p in paths:
            ok, counts, text = dump_summary(D9CTL, p)
            if not ok:
                bad.append(text)
            polls += counts.get("PollStartEvent", 0)
            rc, lines = dump_json_lines(D9CTL, p)
            for line in lines.splitlines():
                if line.startswith('{"event":"SymbolTableEntry"'):
                    syms.add(json.loads(line)["fields"]["symbol_name"])
        t.ok(paths and not bad, f"all {len(paths)} segments decode strictly", "\n".join(bad))
        t.ok(polls > 1000, f"polls traced through the container's binary: {polls}")
        want = ["d9_target::mixed::busy_block_50ms", "tokio::runtime::", "epoll_wait"]
        found = {w: any(w in x for x in syms) for w in want}
        t.ok(all(found.values()), f"symbols of the binary, Tokio and the container's own libc: {found}",
             "\n".join(sorted(syms)[:80]))
        meta = metadata_of(D9CTL, paths[0]) if paths else {}
        meta = meta or {}
        t.ok(meta.get("pid") == str(pid) and meta.get("ns_pid") == "1" and meta.get("nspid") == f"{pid} 1"
             and meta.get("cgroup") == f"/{cg_name}" and meta.get("exe", "").endswith(f"/srv/app/{NAME}"),
             f"metadata: pid {meta.get('pid')}, ns_pid {meta.get('ns_pid')}, nspid '{meta.get('nspid')}', "
             f"cgroup {meta.get('cgroup')}, exe {meta.get('exe')}", json.dumps(meta))
    except RuntimeError:
        pass
    finally:
        if ctr and ctr.poll() is None:
            ctr.kill()
            ctr.wait()
        rc = d.stop()
        t.ok(rc == 0, f"d9d exited cleanly ({rc})", d.logtext())
        d.cleanup(keep=t.failed > 0)
        wait_for(lambda: not open(f"{cg}/cgroup.procs").read().strip(), 10, 0.1)
        os.rmdir(cg)
        shutil.rmtree(root, ignore_errors=True)
    t.done()


main()
