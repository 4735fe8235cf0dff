#!/usr/bin/python3
"""Serve several Swift WSGI servers (given by their paste configs) from one
eventlet process. Swift's own launchers import and load each app twice per
process, which makes a four-server test cluster take ~15 s to start on a
busy 2-core box; one process with one import takes a few seconds."""
import os
import sys

from swift.common import utils, wsgi

utils.eventlet_monkey_patch()
import eventlet  # noqa: E402  (must come after monkey patching)
import eventlet.wsgi  # noqa: E402


def serve(conf_path):
    conf_path = os.path.abspath(conf_path)
    conf = wsgi.appconfig(conf_path)
    utils.validate_configuration()
    app = wsgi.loadapp(conf_path, global_conf={'log_name': conf.get('log_name', 'swift')})
    sock = eventlet.listen((conf.get('bind_ip', '127.0.0.1'), int(conf['bind_port'])))
    return eventlet.spawn(eventlet.wsgi.server, sock, app, wsgi.NullLogger(),
                          protocol=wsgi.SwiftHttpProtocol,
                          socket_timeout=float(conf.get('client_timeout') or 60),
                          capitalize_response_headers=False)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: swift-serve.py SERVER.conf...")
    utils.disable_fallocate()
    threads = [serve(path) for path in sys.argv[1:]]
    print("ready", flush=True)
    for t in threads:
        t.wait()


main()
