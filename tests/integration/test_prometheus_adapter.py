"""The Prometheus adapter and the loop's PromQL against a real Prometheus.

Real Prometheus parses every query of a pass (a syntax error would come back as an error
reply, i.e. None); with no targets each query answers an empty vector, which the signal
parser types as Empty; stopped, every query is None and the services are Unavailable.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from slo_devtools.devenv.prometheus_server import PrometheusServer
from slo_operator.adapters.prometheus import PrometheusAdapter
from slo_operator.api.observe import MetricsState, ServiceKey
from slo_operator.slo.promql import MAX_QUERIES, build_queries
from slo_operator.slo.signals import SignalSpec, parse_signals
from tests.support.prometheus import prometheus, prometheus_binary  # noqa: F401

pytestmark = pytest.mark.integration


def test_every_query_of_a_pass_is_valid_promql(prometheus: PrometheusServer) -> None:  # noqa: F811
    plan = build_queries([60.0, 300.0], namespaces=['team-"a"', "b"])
    assert len(plan.queries) <= MAX_QUERIES
    adapter = PrometheusAdapter(prometheus.url, timeout=10)
    results = asyncio.run(adapter.run({q.name: q.expr for q in plan.queries}, time.time()))
    assert results == {q.name: [] for q in plan.queries}, adapter.last_error
    key = ServiceKey("b", "chat")
    sig = parse_signals(plan, results, {key: SignalSpec()}, time.time())[key]
    assert sig.state == MetricsState.EMPTY

    prometheus.stop_process()
    down = asyncio.run(adapter.run({q.name: q.expr for q in plan.queries}, time.time()))
    assert set(down.values()) == {None}
    sig = parse_signals(plan, down, {key: SignalSpec()}, time.time())[key]
    assert sig.state == MetricsState.UNAVAILABLE
