"""Signals messages that reach status: the idle window, several failed queries at once."""

from __future__ import annotations

from typing import Any

from slo_operator.api.observe import MetricsState
from tests.operator.slo.test_slo_signals_edges import base, parse, row


def test_no_traffic_names_the_window() -> None:
    results = {**base(rate=0.0), "running": [row(0, stat="sum"), row(1, stat="pods")]}
    got = parse(results)
    assert got.state == MetricsState.NO_TRAFFIC
    assert got.message == "no request finished in the last 60s"


def test_partial_lists_every_failed_query() -> None:
    results: dict[str, Any] = {**base(), "e2e": None, "ttft": None}
    got = parse(results)
    assert got.state == MetricsState.PARTIAL
    assert got.message == "missing: e2e latency, TTFT (failed queries: e2e, ttft)"
