"""A local alert receiver: a small HTTP server on 127.0.0.1 that records each POST (a webhook, a Slack
incoming webhook), answers with a chosen status (or a redirect), and lets a test wait for the N-th."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self, status: int = 200, location: str | None = None) -> None:
        self.status, self.location = status, location
        self.requests: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"null")
                self.send_response(receiver.status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with receiver.arrived:
                    receiver.requests.append({"path": self.path, "body": body})
                    receiver.arrived.notify_all()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, args=(0.05,), name="alert-receiver", daemon=True
        )
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def bodies(self) -> list[Any]:
        with self.arrived:
            return [r["body"] for r in self.requests]

    def wait(self, count: int, timeout: float = 30.0) -> list[Any]:
        """The bodies, once at least ``count`` POSTs arrived (blocking: from async code, in a thread)."""
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"{len(self.requests)} POST(s) arrived, waited for {count}")
            return [r["body"] for r in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
