"""The Prometheus adapter turns every failure into None for that query, never an exception."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from slo_operator.adapters.prometheus import PrometheusAdapter

SERIES = [{"metric": {"namespace": "ns", "service": "chat"}, "value": [1.0, "3"]}]


class _Handler(BaseHTTPRequestHandler):
    replies: dict[str, tuple[int, bytes]] = {}
    seen: list[dict[str, list[str]]] = []
    auth: list[str | None] = []

    def do_GET(self) -> None:
        qs = parse_qs(urlparse(self.path).query)
        self.seen.append(qs)
        self.auth.append(self.headers.get("Authorization"))
        status, body = self.replies.get(qs["query"][0], (404, b"{}"))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    _Handler.replies = {
        "good": (200, json.dumps({"status": "success", "data": {
            "resultType": "vector", "result": SERIES}}).encode()),
        "broken": (500, b'{"status": "error"}'),
        "garbage": (200, b"not json"),
    }
    _Handler.seen = []
    _Handler.auth = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_results_by_name_and_failures_as_none(prometheus: str) -> None:
    seen: list[tuple[str, bool]] = []
    prom = PrometheusAdapter(prometheus, timeout=5,
                             on_query=lambda name, _s, ok: seen.append((name, ok)))
    got = asyncio.run(prom.run({"a": "good", "b": "broken", "c": "garbage"}, at=1234.5))
    assert got == {"a": SERIES, "b": None, "c": None}
    assert sorted(seen) == [("a", True), ("b", False), ("c", False)]
    assert prom.last_error is not None
    # Every query is evaluated at the pass's time, so the signals are of one instant.
    assert {q["time"][0] for q in _Handler.seen} == {"1234.500"}


def test_prometheus_down_is_none_for_every_query() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    prom = PrometheusAdapter(f"http://127.0.0.1:{port}", timeout=2)
    assert asyncio.run(prom.run({"a": "good", "b": "good"}, at=0)) == {"a": None, "b": None}


def test_a_prometheus_that_never_answers_times_out_as_none() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never replies
    try:
        prom = PrometheusAdapter(f"http://127.0.0.1:{listener.getsockname()[1]}",
                                 timeout=0.2)
        assert asyncio.run(prom.run({"a": "good"}, at=0)) == {"a": None}
        assert prom.last_error is not None
    finally:
        listener.close()


def test_queries_are_answered_while_the_default_executor_is_busy(prometheus: str) -> None:
    """The queries run in the adapter's own threads: Kubernetes calls filling the loop's
    default executor (a burst of watch events) do not hold them back."""
    prom = PrometheusAdapter(prometheus, timeout=5)
    release = threading.Event()

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        busy = asyncio.to_thread(release.wait, 30)  # the only default thread, held
        task = asyncio.ensure_future(busy)
        try:
            return await asyncio.wait_for(prom.run({"a": "good", "b": "good"}, 1.0), 10)
        finally:
            release.set()
            await task

    try:
        out = asyncio.run(main())
    finally:
        prom.close()
    assert out == {"a": SERIES, "b": SERIES}


def test_a_password_in_the_url_is_sent_but_never_logged_or_reported(
        prometheus: str, caplog: pytest.LogCaptureFixture) -> None:
    secret = "s3cr3t-pw"
    url = prometheus.replace("http://", f"http://ops:{secret}@")
    prom = PrometheusAdapter(url, timeout=5)
    with caplog.at_level("DEBUG"):
        got = asyncio.run(prom.run({"a": "good", "b": "broken"}, at=0))
    assert got["a"] == SERIES and got["b"] is None
    assert _Handler.auth and all(a is not None and a.startswith("Basic ")
                                 for a in _Handler.auth)
    assert prom.last_error is not None
    assert "Failed Prometheus query b" in caplog.text and "ops:***@" in caplog.text
    assert secret not in caplog.text and secret not in prom.last_error.message
    assert secret not in prom.shown_url
    # Refused: the client's own error quotes the host; the password still stays out.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = PrometheusAdapter(f"http://ops:{secret}@127.0.0.1:{port}", timeout=2)
    caplog.clear()
    with caplog.at_level("DEBUG"):
        asyncio.run(down.run({"a": "good"}, at=0))
    assert down.last_error is not None and secret not in down.last_error.message
    assert "Failed Prometheus query a" in caplog.text and secret not in caplog.text
