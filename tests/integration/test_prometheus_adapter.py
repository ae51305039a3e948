"""The Prometheus adapter and the loop's PromQL against a real Prometheus.

Real Prometheus parses every query of a pass (a syntax error would come back as an error
reply, i.e. None); with no targets each query answers an empty vector, which the signal
parser types as Empty; stopped, every query is None and the services are Unavailable.
Fed by the synthetic exporter, the demand signals (gateway arrivals, their short-window
peak), the prefix-cache share and the mean decode time read back as the series imply.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from slo_devtools.devenv.prometheus_server import PrometheusServer, Target, wait_seconds_of_scrapes
from slo_devtools.scale import synthetic
from slo_operator.adapters.prometheus import PrometheusAdapter
from slo_operator.api.observe import MetricsState, ServiceKey
from slo_operator.slo.promql import MAX_QUERIES, build_queries
from slo_operator.slo.signals import SignalSpec, parse_signals
from slo_runtime import contract as c
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


ARRIVALS = c.GATEWAY_ARRIVALS + c.COUNTER_SUFFIX
WITH_GATEWAY = synthetic.ServiceSeries("team-a", "chat", "team-a", ("chat-0", "chat-1"))
ENGINE_ONLY = synthetic.ServiceSeries("team-b", "batch", "team-b", ("batch-0",))
RATE = 2.0  # requests per second per pod


class Exporter:
    """The synthetic exporter's series for two services, ``ENGINE_ONLY`` without the
    gateway's arrival counter, and an arrival burst to add to pod chat-0 at will."""

    def __init__(self) -> None:
        lines = synthetic.all_lines([WITH_GATEWAY, ENGINE_ONLY], RATE)
        self.burst_line = next(t for t, _, _ in lines
                               if t.startswith(ARRIVALS) and 'pod="chat-0"' in t)
        self.lines = [x for x in lines if x[0] != self.burst_line
                      and not (x[0].startswith(ARRIVALS) and 'service="batch"' in x[0])]
        self.burst = 0.0
        # Counters five minutes old, as a serving gateway's are at least: rate() caps its
        # extrapolation towards the range start by where a young counter would have been
        # 0, which would shrink a step holding the burst.
        self.start = time.time() - 300

    def text(self) -> str:
        elapsed = time.time() - self.start
        return (synthetic.render(self.lines, elapsed)
                + f"{self.burst_line} {RATE * elapsed + self.burst:.6g}\n")


@pytest.fixture
def exporter() -> Iterator[tuple[Exporter, str]]:
    exp = Exporter()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exp.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield exp, f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_demand_prefix_cache_decode_and_prefill_signals_from_real_series(
        prometheus: PrometheusServer, exporter: tuple[Exporter, str]) -> None:  # noqa: F811
    """Two pods at 2 req/s with the gateway, then 40 extra arrivals on one pod between two
    scrapes; a pod of another service without the gateway. Scrapes every second, a 10 s
    window, so the burst step is one second."""
    exp, address = exporter
    prometheus.set_targets([Target(address)])
    window = 10
    # A full window of samples before the burst, so the window's rates are steady ones.
    prometheus.wait_query(f'count_over_time({ARRIVALS}{{pod="chat-0"}}[{window}s]) >= {window}',
                          timeout=60)
    exp.burst = 40.0
    # Three more scrapes: the scrape pair around the burst lies inside a finished step.
    wait_seconds_of_scrapes(prometheus, 3)

    plan = build_queries([float(window)], scrape_interval_s=1)
    adapter = PrometheusAdapter(prometheus.url, timeout=10)
    results = asyncio.run(adapter.run({q.name: q.expr for q in plan.queries}, time.time()))
    # Every signal query answers with series; the engine query answers too, empty: the
    # synthetic pods run no launcher, so they report no engine settings.
    assert all(r for name, r in results.items() if name != "engine"), (adapter.last_error,
                                                                        results)
    assert results["engine"] == [], results["engine"]
    a, b = ServiceKey("team-a", "chat"), ServiceKey("team-b", "batch")
    spec = SignalSpec(window_s=window)
    got = parse_signals(plan, results, {a: spec, b: spec}, time.time())

    sa, sb = got[a], got[b]
    assert sa.state == sb.state == MetricsState.OK, (sa.message, sb.message)
    assert sa.request_rate == pytest.approx(2 * RATE, rel=0.05)  # completions: no burst
    # 4/s plus 40 over the window (the window's rate extrapolates its samples' span,
    # 9 to 10 s, to 10 s): 8 to 8.5/s.
    assert sa.arrival_rate is not None and 7.6 <= sa.arrival_rate <= 9.0
    # The one-second step that holds the burst: 4 + 40 per second.
    assert sa.arrival_peak_rate == pytest.approx(2 * RATE + 40.0, rel=0.05)
    # The exporter prints 6 significant digits: rates of large counters carry ~0.1 %.
    assert sa.prefix_hit_share == pytest.approx(synthetic.PREFIX_HIT_SHARE, rel=1e-2)
    lo, hi = synthetic.ITL_RANGE
    assert sa.decode_mean_ms == pytest.approx((lo + hi) / 2 * 1000, rel=1e-2)
    lo, hi = synthetic.PREFILL_RANGE
    assert sa.prefill_mean_ms == pytest.approx((lo + hi) / 2 * 1000, rel=1e-2)
    # Without the gateway: no arrival signals (not 0), the rest as for any pod.
    assert sb.arrival_rate is None and sb.arrival_peak_rate is None
    assert sb.request_rate == pytest.approx(RATE, rel=0.05)
    assert sb.prefix_hit_share == pytest.approx(synthetic.PREFIX_HIT_SHARE, rel=1e-2)
