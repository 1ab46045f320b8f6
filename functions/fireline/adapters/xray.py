"""SegmentEmitter implementations: X-Ray's daemon over UDP, and a log line.

In Lambda (Tracing: Active) the X-Ray daemon listens on AWS_XRAY_DAEMON_ADDRESS and takes
segment documents over UDP, each after a one-line header; nothing waits for an answer,
so a sampled fire costs one datagram a segment and no API call. The local cloud has no
daemon: there the segments are log lines, so one fire's trace is found in the log.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from typing import Any

# What the daemon reads before each document.
_HEADER = b'{"format": "json", "version": 1}\n'
# The daemon's address when the variable is missing (its documented default).
DEFAULT_DAEMON_ADDRESS = "127.0.0.1:2000"
# The action of the log line that carries a segment (see LogSegmentEmitter).
LOG_ACTION = "trace.segment"


class UdpSegmentEmitter:
    def __init__(self, address: str = DEFAULT_DAEMON_ADDRESS) -> None:
        # The variable may name a TCP address too ("tcp:host:port udp:host:port").
        parts = dict(p.split(":", 1) for p in address.split() if p.startswith(("udp:", "tcp:")))
        host, _, port = parts.get("udp", address).rpartition(":")
        self._address = (host or "127.0.0.1", int(port))
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def emit(self, document: dict[str, Any]) -> None:
        try:
            self._socket.sendto(_HEADER + json.dumps(document).encode(), self._address)
        except OSError:
            return  # a lost segment is a gap in a trace, not a failure of the job


class LogSegmentEmitter:
    """One JSON line a segment, ``{"action": "trace.segment", "segment": ...}``, on stdout
    (which the local cloud's collector writes to its log) or wherever ``write`` says."""

    def __init__(self, write: Callable[[str], Any] | None = None) -> None:
        self._write = write

    def emit(self, document: dict[str, Any]) -> None:
        line = json.dumps({"action": LOG_ACTION, "segment": document}, separators=(",", ":"))
        if self._write is not None:
            self._write(line)
        else:
            print(line, file=sys.stdout, flush=True)
