"""Shared helpers of the systemd tests: TAP output, installing the build into
a temporary DESTDIR, and the paths meson passed in the environment."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import Tap  # noqa: E402,F401  (the tests import it from here)

SOURCE_ROOT = os.environ.get("D9_SOURCE_ROOT", "")
BUILD_ROOT = os.environ.get("D9_BUILD_ROOT", "")
PREFIX = os.environ.get("D9_PREFIX", "/usr/local")


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
