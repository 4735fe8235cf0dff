#!/usr/bin/env python3
"""The installed units: `meson install --destdir` into a temporary root, then
`systemd-analyze verify` (must print nothing at all: it exits 0 even for
unknown keys) and `systemd-analyze security --offline=yes` (exposure <= 3.5).
The root also gets the host's distribution units (sysinit.target & co.)
and /bin/kill (procps, what ExecReload= runs) so verify checks our units as
they would load on a real system; ExecStart=/ExecReload= are checked inside
the root and man: links against the installed man pages."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdtest import Tap, in_prefix, installed_tree  # noqa: E402

MAX_EXPOSURE = 3.5
tap = Tap(6)
try:
    tree = installed_tree()
except Exception as e:  # noqa: BLE001
    tap.bail(str(e))
root = tree.name
unitdir = in_prefix(root, "lib/systemd/system")
service = os.path.join(unitdir, "d9d.service")
socket_unit = os.path.join(unitdir, "d9d.socket")
tap.ok(os.path.isfile(service) and os.path.isfile(socket_unit), "d9d.service and d9d.socket installed",
       os.listdir(unitdir) if os.path.isdir(unitdir) else "no unit dir")

distro_units = "/usr/lib/systemd/system"
shutil.copytree(distro_units, os.path.join(root, distro_units.lstrip("/")), symlinks=True,
                dirs_exist_ok=True)
os.makedirs(os.path.join(root, "bin"), exist_ok=True)
shutil.copy2(os.path.realpath("/bin/kill"), os.path.join(root, "bin", "kill"))
env = dict(os.environ, MANPATH=in_prefix(root, "share/man"), SYSTEMD_LOG_COLOR="0")

r = subprocess.run(["systemd-analyze", "verify", f"--root={root}", service, socket_unit],
                   capture_output=True, text=True, env=env, timeout=60)
tap.ok(r.returncode == 0 and r.stderr == "" and r.stdout == "",
       "systemd-analyze verify of the installed units: exit 0, no output", r.stdout + r.stderr)

# The check must be able to fail: the same verify on a copy with one unknown
# key has to complain.
broken = os.path.join(unitdir, "d9d-broken.service")
with open(service) as f, open(broken, "w") as g:
    g.write(f.read().replace("[Service]\n", "[Service]\nNoSuchKey=1\n", 1))
r2 = subprocess.run(["systemd-analyze", "verify", f"--root={root}", broken],
                    capture_output=True, text=True, env=env, timeout=60)
tap.ok("NoSuchKey" in r2.stderr, "verify reports an unknown key in a broken copy (the check can fail)",
       r2.stdout + r2.stderr)
os.unlink(broken)

r = subprocess.run(["systemd-analyze", "security", "--offline=yes", f"--root={root}",
                    "--no-pager", service], capture_output=True, text=True, env=env, timeout=60)
m = re.search(r"Overall exposure level for d9d\.service:\s*([0-9.]+)", r.stdout)
level = float(m.group(1)) if m else None
tap.ok(m is not None, "security --offline=yes prints an overall exposure level", r.stdout[-2000:] + r.stderr)
tap.diag(f"d9d.service overall exposure level: {level}")
tap.ok(level is not None and level <= MAX_EXPOSURE,
       f"exposure level {level} <= {MAX_EXPOSURE}", r.stdout[-3000:])
tap.ok(r.stderr == "", "security analysis of the installed unit prints no warnings", r.stderr)
tree.cleanup()
tap.done()
