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


def test_idle_window_has_no_latency_and_no_traffic_state() -> None:
    reqs = [Request(1.0, 200, 5)]
    _, svc, scr = _service(reqs, 400.0)
    obs = observation(scr, svc, 390.0, 60.0, Percentiles(), hardware="H200", precision="bf16")
    assert obs.signals.state is MetricsState.NO_TRAFFIC
    assert obs.signals.e2e_ms is None
    assert obs.signals.request_rate == 0.0
    assert not math.isnan(obs.signals.kv_usage or 0.0)
