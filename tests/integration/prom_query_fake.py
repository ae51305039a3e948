"""The Prometheus query API on loopback, answering the SLO pass's queries with known loads.

:class:`PromQueryFake` answers each of the pass's instant queries (``slo.promql``) with
what ``tests.operator.reconcile.prom_fake.FakeMetrics`` computes for ``loads`` (per
service), so that a real operator's decisions are known in advance. An unknown query gets
HTTP 400. :meth:`PromQueryFake.hold` parks the queries that arrive while it is on until it
is released, so a test can act while a pass waits for its signals.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from slo_operator.api.models import parse_duration
from slo_operator.api.observe import ServiceKey
from slo_operator.slo.promql import build_queries
from tests.operator.reconcile.prom_fake import FakeMetrics, Load


class PromQueryFake:
    """``loads``: what each service's series show (edit it at any time)."""

    def __init__(self, loads: dict[ServiceKey, Load], window: str = "60s") -> None:
        self.loads = loads
        self.window = window
        self.names = {q.expr: q.name for q in build_queries(
            {float(parse_duration(window))}).queries}
        self.parked = 0  # queries waiting behind the hold now
        self._holding = False
        self._release = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.answer(urllib.parse.urlsplit(self.path).query)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.answer(self.rfile.read(length).decode())

            def answer(self, query: str) -> None:
                fake._wait_if_held()
                params = urllib.parse.parse_qs(query)
                expr = (params.get("query") or [""])[0]
                name = fake.names.get(expr)
                if name is None:
                    self.send_error(400, "unknown query")
                    return
                at = float((params.get("time") or ["0"])[0])
                metrics = FakeMetrics(dict(fake.loads), window=fake.window)
                rows = asyncio.run(metrics.run({name: expr}, at))[name]
                body = json.dumps({"status": "success", "data": {
                    "resultType": "vector", "result": rows}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _wait_if_held(self) -> None:
        with self._lock:
            if not self._holding:
                return
            self.parked += 1
            release = self._release
        release.wait(timeout=120)
        with self._lock:
            self.parked -= 1

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Park every query that arrives from now on until the block ends."""
        with self._lock:
            self._holding = True
            self._release = threading.Event()
            release = self._release
        try:
            yield
        finally:
            with self._lock:
                self._holding = False
            release.set()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
