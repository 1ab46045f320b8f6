"""A webhook receiver on 127.0.0.1 that records every POST it gets."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def http_receiver(path: str = "") -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Its URL (``path`` appended) and the requests received: headers, body, path."""
    received: list[dict[str, Any]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"headers": dict(self.headers), "body": body, "path": self.path})
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}", received
    finally:
        server.shutdown()
