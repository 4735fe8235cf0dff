"""Shared helpers of the systemd tests: TAP output, installing the build into
a temporary DESTDIR, and the paths meson passed in the environment."""
import os
import subprocess
import sys
import tempfile

SOURCE_ROOT = os.environ.get("D9_SOURCE_ROOT", "")
BUILD_ROOT = os.environ.get("D9_BUILD_ROOT", "")
PREFIX = os.environ.get("D9_PREFIX", "/usr/local")


class Tap:
    """Minimal TAP producer: plan up front, one line per check."""

    def __init__(self, planned):
        self.n = 0
        self.failed = 0
        print(f"1..{planned}", flush=True)

    def ok(self, cond, name, diag=""):
        self.n += 1
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name}", flush=True)
        if not cond:
            self.failed += 1
            for line in str(diag).rstrip().splitlines():
                print(f"# {line}", flush=True)
        return cond

    def diag(self, msg):
        for line in str(msg).rstrip().splitlines():
            print(f"# {line}", flush=True)

    def bail(self, msg):
        print(f"Bail out! {msg}", flush=True)
        sys.exit(1)

    def done(self):
        sys.exit(1 if self.failed else 0)


def install_to(destdir):
    """`meson install --destdir` of the build under test; returns the result."""
    return subprocess.run(
        ["meson", "install", "-C", BUILD_ROOT, "--no-rebuild", "--destdir", destdir, "--quiet"],
        capture_output=True, text=True, timeout=120)


def installed_tree():
    """A TemporaryDirectory holding the installed tree (or raises)."""
    tmp = tempfile.TemporaryDirectory(prefix="d9-install-")
    r = install_to(tmp.name)
    if r.returncode != 0:
        tmp.cleanup()
        raise RuntimeError(f"meson install failed ({r.returncode}): {r.stderr.strip()}")
    return tmp


def in_prefix(root, *parts):
    return os.path.join(root, PREFIX.lstrip("/"), *parts)
