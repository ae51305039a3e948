"""Prometheus-like reads of simulated services, and the Observation the operator's decide gets."""

from __future__ import annotations

import math

import pytest

from slo_devtools.sim.bench import step_model
from slo_devtools.sim.discrete_event import Service, Simulation
from slo_devtools.sim.scrape import Percentiles, Scraper, observation
from slo_devtools.sim.traces import Request
from slo_operator.api.observe import MetricsState
from slo_operator.slo.histogram import quantile


def _service(reqs: list[Request], until: float) -> tuple[Simulation, Service, Scraper]:
    sim = Simulation()
    svc = Service(sim, "chat", step_model(), replicas=1)
    scr = Scraper({"chat": svc}, 15.0)
    sim.every(15.0, scr.scrape)
    sim.run(reqs, lambda r: svc, until)
    return sim, svc, scr


def test_no_samples_is_an_empty_observation() -> None:
    sim = Simulation()
    svc = Service(sim, "chat", step_model(), replicas=1)
    obs = observation(Scraper({"chat": svc}), svc, 0.0, 60.0, Percentiles(),
                      hardware="H200", precision="bf16")
    assert obs.signals.state is MetricsState.EMPTY
    assert obs.replicas.ready == 1


def test_window_reads_are_increases_between_scrapes() -> None:
    # 2 req/s for 5 minutes, short requests: rate 2/s and percentiles from bucket increases.
    reqs = [Request(i * 0.5, 200, 5) for i in range(600)]
    _, svc, scr = _service(reqs, 300.0)
    now = 290.0
    assert scr.rate("chat", "requests", now, 60.0) == pytest.approx(2.0, rel=0.05)
    inc = scr.increase_buckets("chat", "ttft", now, 60.0)
    assert inc is not None
    buckets, count, total = inc
    assert count == pytest.approx(120, abs=2)
    assert scr.quantile("chat", "ttft", 0.95, now, 60.0) == quantile(0.95, buckets)
    # Every TTFT is one prefill step: the mean is exact, the percentile within its bucket.
    assert total / count == pytest.approx(step_model().prefill_ms(200) / 1e3, rel=1e-6)
    obs = observation(scr, svc, now, 60.0, Percentiles(), hardware="H200", precision="bf16")
    assert obs.signals.state is MetricsState.OK
    assert obs.signals.request_rate == pytest.approx(2.0, rel=0.05)
    assert obs.signals.prompt_tokens_rate == pytest.approx(400.0, rel=0.05)
    assert obs.signals.ttft_ms is not None and obs.signals.ttft_ms <= 20.0
    assert obs.batch_limit == svc.limit == 256
    # Requests never overlap: the mean time per output token is a batch-1 decode step.
    assert obs.signals.decode_mean_ms == pytest.approx(step_model().decode_ms(1, 203), rel=1e-3)
    # Admitted on arrival to an idle replica: every prefill is the one step of its prompt.
    assert obs.signals.prefill_mean_ms == pytest.approx(step_model().prefill_ms(200), rel=1e-3)
    assert obs.signals.prefix_hit_share == 0.0  # looked up, nothing shared


def test_idle_window_has_no_latency_and_no_traffic_state() -> None:
    reqs = [Request(1.0, 200, 5)]
    _, svc, scr = _service(reqs, 400.0)
    obs = observation(scr, svc, 390.0, 60.0, Percentiles(), hardware="H200", precision="bf16")
    assert obs.signals.state is MetricsState.NO_TRAFFIC
    assert obs.signals.e2e_ms is None
    assert obs.signals.request_rate == 0.0
    assert not math.isnan(obs.signals.kv_usage or 0.0)


def test_arrivals_count_demand_before_anything_finishes() -> None:
    # 2 req/s of requests far longer than the run: nothing finishes, demand still shows.
    reqs = [Request(i * 0.5, 100, 100_000) for i in range(600)]
    _, svc, scr = _service(reqs, 300.0)
    obs = observation(scr, svc, 290.0, 60.0, Percentiles(), hardware="H200", precision="bf16")
    assert obs.signals.request_rate == 0.0
    assert obs.signals.arrival_rate == pytest.approx(2.0, rel=0.05)


def test_arrival_peak_is_the_busiest_two_scrape_span_in_the_window() -> None:
    # 1 req/s, plus 9 req/s more from 240 s to 270 s: the window (225, 285] averages
    # 5.5 req/s, its busiest 30 s 10 req/s.
    base = [Request(i + 0.5, 100, 2) for i in range(300)]
    burst = [Request(240.05 + i / 9.0, 100, 2) for i in range(270)]
    _, svc, scr = _service(sorted(base + burst, key=lambda r: r.t), 300.0)
    obs = observation(scr, svc, 299.0, 60.0, Percentiles(), hardware="H200", precision="bf16")
    assert obs.signals.arrival_rate == pytest.approx(5.5, rel=0.02)
    assert obs.signals.arrival_peak_rate == pytest.approx(10.0, rel=0.02)


def test_prefix_hit_share_is_tokens_found_over_tokens_looked_up() -> None:
    first = Request(1.0, 2000, 10, session=3)
    later = Request(20.0, 2510, 10, session=3, prefix=2010)
    _, svc, scr = _service([first, later], 120.0)
    obs = observation(scr, svc, 60.0, 60.0, Percentiles(), hardware="H200", precision="bf16")
    assert obs.signals.prefix_hit_share == pytest.approx(2000 / (2000 + 2510))
    idle = observation(scr, svc, 119.0, 30.0, Percentiles(), hardware="H200", precision="bf16")
    assert idle.signals.prefix_hit_share is None  # nothing looked up in the window
