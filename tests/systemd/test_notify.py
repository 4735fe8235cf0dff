#!/usr/bin/env python3
"""daemon/core/notify.c through notify-harness (which uses it the way d9d does):
READY/STATUS/WATCHDOG/STOPPING reach a NOTIFY_SOCKET we own, the watchdog
timer follows WATCHDOG_USEC, and socket activation by
systemd-socket-activate hands over the control socket by name."""
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from notifysock import NotifySocket  # noqa: E402
from sdtest import Tap  # noqa: E402

HARNESS = sys.argv[1]
tap = Tap(14)
tmp = tempfile.TemporaryDirectory(prefix="d9-notify-")
base_env = {k: v for k, v in os.environ.items()
            if not k.startswith(("NOTIFY_", "WATCHDOG_", "LISTEN_"))}

# 1. notifications, watchdog at 200 ms (timer every 100 ms), three pings.
ns = NotifySocket(os.path.join(tmp.name, "notify.sock"))
env = dict(base_env, NOTIFY_SOCKET=ns.path, WATCHDOG_USEC="200000")
t0 = time.monotonic()
r = subprocess.run([HARNESS, "3"], env=env, capture_output=True, text=True, timeout=20)
elapsed = time.monotonic() - t0
ns.drain(0.2)
tap.ok(r.returncode == 0, "harness exits 0 under a notify socket", r.stdout + r.stderr)
tap.ok(ns.has("READY=1") and ns.has("STATUS=ready"), "READY=1 with its STATUS= arrives", ns.messages)
tap.ok(ns.has("STATUS=starting 3 pings"), "d9d_notify_status() sends a formatted STATUS=", ns.messages)
tap.ok(ns.has("STATUS=first line only") and not ns.has("MAINPID=1"),
       "a newline in a status cannot inject another assignment", ns.messages)
tap.ok(ns.count("WATCHDOG=1") == 3, "one WATCHDOG=1 per timerfd tick", ns.messages)
tap.ok(ns.has("STOPPING=1") and ns.index("STOPPING=1") > ns.index("READY=1"),
       "STOPPING=1 arrives, after READY=1", ns.messages)
tap.ok("watchdog_usec=200000" in r.stdout and 0.25 <= elapsed < 5,
       f"watchdog ticks every WATCHDOG_USEC/2 (3 ticks took {elapsed:.2f} s)", r.stdout)
ns.close()

# 2. WATCHDOG_PID naming another process: the watchdog is not ours.
ns = NotifySocket(os.path.join(tmp.name, "notify2.sock"))
env = dict(base_env, NOTIFY_SOCKET=ns.path, WATCHDOG_USEC="200000", WATCHDOG_PID="1")
r = subprocess.run([HARNESS, "3"], env=env, capture_output=True, text=True, timeout=20)
ns.drain(0.2)
tap.ok(r.returncode == 0 and "watchdog_usec=0" in r.stdout and ns.count("WATCHDOG=1") == 0,
       "WATCHDOG_PID of another process disables our watchdog", r.stdout + str(ns.messages))
ns.close()

# 3. Not under systemd at all: everything is a quiet no-op.
r = subprocess.run([HARNESS, "3"], env=base_env, capture_output=True, text=True, timeout=20)
tap.ok(r.returncode == 0 and "listen_fd=-2" in r.stdout and r.stderr == "",
       "without NOTIFY_SOCKET/LISTEN_FDS: no socket (-ENOENT), no errors", r.stdout + r.stderr)

# 4. Socket activation: systemd-socket-activate listens, starts the harness on
# the first connection with LISTEN_FDS=1 and LISTEN_FDNAMES=control.
ns = NotifySocket(os.path.join(tmp.name, "notify3.sock"))
ctl = os.path.join(tmp.name, "control.sock")
act = subprocess.Popen(["systemd-socket-activate", "-l", ctl, "--fdname=control",
                        "-E", f"NOTIFY_SOCKET={ns.path}", HARNESS, "0"],
                       env=base_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
for _ in range(100):
    if os.path.exists(ctl):
        break
    time.sleep(0.05)
reply = b""
try:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(10)
    c.connect(ctl)
    while chunk := c.recv(256):
        reply += chunk
    c.close()
except OSError as e:
    reply = f"client error: {e}".encode()
try:
    out, err = act.communicate(timeout=10)
except subprocess.TimeoutExpired:
    act.kill()
    out, err = act.communicate()
ns.drain(0.2)
tap.ok(b"notify-harness: activated" in reply, "the activated socket accepts and serves a client", reply)
tap.ok("listen_fd=3" in out, "the fd named 'control' (fd 3) is picked", out + err)
tap.ok("LISTEN_FDS=(unset)" in out, "LISTEN_* are removed from the environment for children", out)
tap.ok(ns.has("READY=1"), "READY=1 also arrives when socket-activated", ns.messages)
ns.close()

# 5. A passed fd that is not a listening Unix stream socket is refused
# (-ENOTSOCK = -88) rather than served as if it were the control socket.
dg = os.path.join(tmp.name, "dgram.sock")
act = subprocess.Popen(["systemd-socket-activate", "--datagram", "-l", dg, "--fdname=control", HARNESS, "0"],
                       env=base_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
for _ in range(100):
    if os.path.exists(dg):
        break
    time.sleep(0.05)
try:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    c.sendto(b"x", dg)
    c.close()
    out, err = act.communicate(timeout=10)
except (OSError, subprocess.TimeoutExpired) as e:
    act.kill()
    out, err = act.communicate()
    err += str(e)
tap.ok("listen_fd=-88" in out, "a datagram socket passed as 'control' is refused with -ENOTSOCK", out + err)
tap.done()
