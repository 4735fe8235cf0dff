#!/usr/bin/env python3
"""The man pages keep up with the code: every d9ctl subcommand listed by
`d9ctl --help`, every d9d option in `d9d --help` and every key of the
example config is documented in d9ctl(1) / d9d(8)."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdtest import SOURCE_ROOT, Tap  # noqa: E402

D9D, D9CTL = sys.argv[1], sys.argv[2]


def read(rel):
    with open(os.path.join(SOURCE_ROOT, rel)) as f:
        return f.read()


tap = Tap(3)
d9ctl_man, d9d_man = read("docs/man/d9ctl.1.scd"), read("docs/man/d9d.8.scd")

h = subprocess.run([D9CTL, "--help"], capture_output=True, text=True, timeout=10).stdout
commands = re.findall(r"^  ([a-z][a-z-]*)\b", h.split("commands:", 1)[-1], re.M)
undocumented = [c for c in commands if f"*{c}*" not in d9ctl_man]
tap.ok(commands and not undocumented, f"d9ctl(1) documents every subcommand ({' '.join(commands)})",
       "missing: " + " ".join(undocumented))

h = subprocess.run([D9D, "--help"], capture_output=True, text=True, timeout=10).stdout
options = sorted(set(re.findall(r"--([a-z][a-z-]+)", h)))
undocumented = [o for o in options if f"*--{o}*" not in d9d_man]
tap.ok(options and not undocumented, f"d9d(8) documents every option ({' '.join(options)})",
       "missing: " + " ".join(undocumented))

keys = re.findall(r"^#([a-z0-9_]+) =", read("systemd/d9d.conf.example"), re.M)
undocumented = [k for k in keys if f"*{k}*" not in d9d_man]
tap.ok(keys and not undocumented, f"d9d(8) documents every key of the example config ({len(keys)})",
       "missing: " + " ".join(undocumented))
tap.done()
