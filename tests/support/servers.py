"""Real servers for tests: a free port to start one on."""

import socket


def free_port(host="localhost"):
    """A TCP port nothing listens on now, on ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
