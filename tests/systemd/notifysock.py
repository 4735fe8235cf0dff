"""A NOTIFY_SOCKET the test owns: an AF_UNIX datagram socket collecting what
the process under test sends with sd_notify()."""
import os
import socket
import time


class NotifySocket:
    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.messages = []

    def drain(self, seconds):
        """Collect datagrams for up to `seconds`."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return self.messages
            self.sock.settimeout(left)
            try:
                self.messages.append(self.sock.recv(4096).decode(errors="replace"))
            except socket.timeout:
                return self.messages

    def wait_for(self, assignment, seconds):
        """Collect until a datagram contains the line `assignment`; True if seen."""
        end = time.monotonic() + seconds
        while not self.has(assignment):
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                self.messages.append(self.sock.recv(4096).decode(errors="replace"))
            except socket.timeout:
                return False
        return True

    def has(self, assignment):
        return any(assignment in m.splitlines() for m in self.messages)

    def count(self, assignment):
        return sum(assignment in m.splitlines() for m in self.messages)

    def index(self, assignment):
        return next((i for i, m in enumerate(self.messages) if assignment in m.splitlines()), -1)

    def close(self):
        self.sock.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
