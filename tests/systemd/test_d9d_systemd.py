#!/usr/bin/env python3
"""The real d9d under systemd's protocols, without systemd as PID 1:
- NOTIFY_SOCKET (a datagram socket this test owns) + WATCHDOG_USEC: READY=1
  once the control socket answers, WATCHDOG=1 every half interval, and
  STOPPING=1 on SIGTERM, then a clean exit. The config is the installed
  example with every key uncommented, so every documented key must parse.
- Socket activation through systemd-socket-activate (LISTEN_FDS/LISTEN_PID/
  LISTEN_FDNAMES=control): d9d serves d9ctl on the inherited socket and does
  not bind its own."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from notifysock import NotifySocket  # noqa: E402
from sdtest import SOURCE_ROOT, Tap  # noqa: E402

D9D, D9CTL = sys.argv[1], sys.argv[2]
tap = Tap(13)
tmp = tempfile.TemporaryDirectory(prefix="d9-sd-")
base_env = {k: v for k, v in os.environ.items()
            if not k.startswith(("NOTIFY_", "WATCHDOG_", "LISTEN_"))}

# The example config with every key switched on, at its documented default.
conf = os.path.join(tmp.name, "d9d.conf")
with open(os.path.join(SOURCE_ROOT, "systemd/d9d.conf.example")) as f, open(conf, "w") as g:
    for line in f:
        if line.startswith("#") and "=" in line and not line.startswith("# "):
            line = line[1:]
        # Shipping gets switched on too, but must never leave loopback (and
        # nothing is sealed here, so nothing is uploaded).
        if line.startswith("s3_endpoint"):
            line = "s3_endpoint = http://127.0.0.1:9\n"
        if line.startswith("s3_state_dir"):
            line = f"s3_state_dir = {tmp.name}/ship\n"
        g.write(line)


def d9ctl_list(sock):
    return subprocess.run([D9CTL, "--socket", sock, "list"], capture_output=True, text=True,
                          env=base_env, timeout=15)


def stop(proc, ns):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    ns.wait_for("STOPPING=1", 2)
    return rc, proc.stderr.read()


# 1. Notify + watchdog, d9d binding its own socket.
ns = NotifySocket(os.path.join(tmp.name, "notify.sock"))
state = os.path.join(tmp.name, "state")
ctl = os.path.join(tmp.name, "control.sock")
env = dict(base_env, NOTIFY_SOCKET=ns.path, WATCHDOG_USEC="1000000")
d9d = subprocess.Popen([D9D, "--foreground", "--config", conf, "--state-dir", state, "--socket", ctl],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
ready = ns.wait_for("READY=1", 20)
with open(conf) as f:
    keys = [l.split("=")[0].strip() for l in f if "=" in l and not l.startswith("#")]
tap.diag("config keys switched on: " + " ".join(keys))
tap.ok(ready and len(keys) >= 9, "READY=1 arrives after start with every example key set", ns.messages)
r = d9ctl_list(ctl)
tap.ok(ready and r.returncode == 0, "the control socket answers d9ctl once READY=1 was sent", r.stdout + r.stderr)
t0 = time.monotonic()
ns.drain(2.6)
pings = ns.count("WATCHDOG=1")
tap.ok(pings >= 3, f"WATCHDOG=1 every WATCHDOG_USEC/2: {pings} pings in 2.6 s at 1 s", ns.messages)
last_ping = max((i for i, m in enumerate(ns.messages) if "WATCHDOG=1" in m.splitlines()), default=-1)
tap.ok(last_ping > ns.index("READY=1") >= 0, "watchdog pings keep coming after READY=1", ns.messages)
rc, err = stop(d9d, ns)
tap.ok(ns.has("STOPPING=1"), "STOPPING=1 arrives on SIGTERM", ns.messages)
tap.ok(rc == 0, f"d9d exits 0 after SIGTERM (rc={rc})", err)
tap.ok(not any("preflight:" in l and "FATAL" in l for l in err.splitlines()),
       "no fatal preflight finding as root", err)
tap.ok(ns.has("STATUS=tracing 0 targets"), "READY=1 carries a STATUS= line", ns.messages)
ns.close()

# 2. Socket activation.
ns = NotifySocket(os.path.join(tmp.name, "notify2.sock"))
act_sock = os.path.join(tmp.name, "activated.sock")
own_sock = os.path.join(tmp.name, "own.sock")
act = subprocess.Popen(["systemd-socket-activate", "-l", act_sock, "--fdname=control",
                        "-E", f"NOTIFY_SOCKET={ns.path}",
                        D9D, "--foreground", "--state-dir", os.path.join(tmp.name, "state2"),
                        "--socket", own_sock],
                       env=base_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
for _ in range(200):
    if os.path.exists(act_sock):
        break
    time.sleep(0.05)
r = d9ctl_list(act_sock)
tap.ok(r.returncode == 0, "d9ctl through the activating socket is served by d9d", r.stdout + r.stderr)
tap.ok(ns.wait_for("READY=1", 20), "READY=1 also arrives when socket-activated", ns.messages)
r2 = d9ctl_list(act_sock)
tap.ok(r2.returncode == 0, "the inherited socket keeps serving further clients", r2.stdout + r2.stderr)
tap.ok(not os.path.exists(own_sock), "d9d does not bind its own socket when one is passed in",
       os.listdir(tmp.name))
rc, err = stop(act, ns)
tap.ok(rc == 0 and ns.has("STOPPING=1"), f"socket-activated d9d stops cleanly (rc={rc})", err)
ns.close()
tap.done()
