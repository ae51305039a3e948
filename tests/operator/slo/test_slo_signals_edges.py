"""Signals edges: jitter from the decode histogram, staleness bounds, row order, messages."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from slo_operator.api.models import Objectives
from slo_operator.api.observe import MetricsState, ServiceKey, Signals
from slo_operator.slo.promql import build_queries
from slo_operator.slo.signals import DEFAULT_STALE_AFTER, SignalSpec, parse_signals, spec_for

NOW = 1_800_000_000.0
SVC = ServiceKey("team-a", "chat")
PLAN = build_queries([60, 300])
BOUNDS = ("0.5", "1.0", "2.5", "+Inf")


def row(value: Any, ts: float = NOW - 5, **labels: str) -> dict[str, Any]:
    return {"metric": {"namespace": SVC.namespace, "service": SVC.name, **labels},
            "value": [ts, str(value)]}


def hist(counts: tuple[float, ...], source: str, window: str = "60s",
         bounds: tuple[str, ...] = BOUNDS) -> list[dict[str, Any]]:
    return [row(c, le=le, source=source, window=window)
            for le, c in zip(bounds, counts, strict=True)]


def base(newest: float | None = NOW - 5, rate: float = 10.0) -> dict[str, Any]:
    running = [row(40, stat="sum"), row(2, stat="pods")]
    if newest is not None:
        running.append(row(newest, stat="newest"))
    return {
        "e2e": hist((1.0, 5.0, 10.0, 10.0), "gateway"),
        "ttft": hist((5.0, 10.0, 10.0, 10.0), "gateway"),
        "itl": hist((2.0, 10.0, 10.0, 10.0), "engine", bounds=("0.01", "0.02", "0.05", "+Inf")),
        "decode": [],
        "throughput": [row(rate, signal="requests", window="60s")],
        "waiting": [row(0, source="engine")],
        "running": running,
        "kv": [],
    }


def parse(results: dict[str, Any], spec: SignalSpec | None = None) -> Signals:
    return parse_signals(PLAN, results, {SVC: spec or SignalSpec()}, NOW)[SVC]


def test_jitter_is_the_spread_bound_of_the_decode_histogram() -> None:
    """Mass 0.25 at or below 10 ms, 0.5 in (20, 40] ms, 0.25 above: mean 25 ms."""
    decode = [row("sum", le="sum", source="request", window="60s") | {"value": [NOW, "0.025"]}]
    decode += hist((0.25, 0.25, 0.75, 1.0), "request", bounds=("0.01", "0.02", "0.04", "+Inf"))
    got = parse({**base(), "decode": decode})
    assert got.state == MetricsState.OK
    assert got.jitter == pytest.approx(math.sqrt(2 * 0.25 * 0.015**2) / 0.025)


def test_without_a_decode_histogram_jitter_is_not_observed() -> None:
    got = parse(base())
    assert got.jitter is None
    assert got.itl_ms == pytest.approx(19.875)  # p99 of the itl histogram, from its own query


def test_decode_buckets_without_a_sum_give_no_jitter() -> None:
    decode = hist((0.25, 0.25, 0.75, 1.0), "request", bounds=("0.01", "0.02", "0.04", "+Inf"))
    assert parse({**base(), "decode": decode}).jitter is None


@pytest.mark.parametrize(("age", "state"), [
    (DEFAULT_STALE_AFTER, MetricsState.OK), (DEFAULT_STALE_AFTER + 1, MetricsState.STALE),
])
def test_samples_are_stale_only_beyond_the_bound(age: float, state: MetricsState) -> None:
    assert DEFAULT_STALE_AFTER == 120.0
    assert parse(base(newest=NOW - age)).state == state


def test_without_a_newest_stamp_the_sample_time_is_the_latest_evaluation() -> None:
    got = parse(base(newest=None))
    assert got.state == MetricsState.OK and got.sample_time == NOW - 5


def test_rows_of_other_windows_and_malformed_rows_before_good_ones_are_skipped() -> None:
    results = base()
    results["e2e"] = (hist((0.0, 0.0, 0.0, 9.0), "gateway", window="300s")
                      + [{"metric": {"namespace": "team-a"}, "value": [NOW, "1"]},
                         {"metric": {"namespace": "team-a", "service": "chat"}, "value": 5},
                         {"metric": {"namespace": "team-a", "service": "chat"}}]
                      + [row("NaN", le="1.0", source="gateway", window="60s"),
                         row(3.0, le="junk", source="gateway", window="60s")]
                      + results["e2e"])
    got = parse(results)
    assert got.state == MetricsState.OK
    assert got.e2e_ms == pytest.approx(2470.0)


def test_a_source_without_rows_or_without_inf_bucket_is_passed_over() -> None:
    results = base()
    results["e2e"] = (hist((1.0, 5.0, 10.0), "gateway", bounds=("0.5", "1.0", "2.5"))
                      + hist((9.0, 10.0, 10.0, 10.0), "engine"))
    got = parse(results)
    assert got.latency_source == "engine" and got.e2e_ms == pytest.approx(950.0)
    results["e2e"] = hist((9.0, 10.0, 10.0, 10.0), "engine")  # no gateway rows at all
    got = parse(results)
    assert got.latency_source == "engine" and got.e2e_ms == pytest.approx(950.0)


def test_a_slow_service_under_one_request_per_second_has_latencies() -> None:
    results = base(rate=0.5)
    results["e2e"] = hist((0.05, 0.25, 0.5, 0.5), "gateway")
    results["ttft"] = hist((0.25, 0.5, 0.5, 0.5), "gateway")
    got = parse(results)
    assert got.state == MetricsState.OK
    assert got.e2e_ms is not None and got.ttft_ms == pytest.approx(950.0)


def test_messages_name_the_service_the_failed_queries_and_the_age() -> None:
    results: dict[str, Any] = {**{n: [] for n in base()}, "kv": None, "waiting": None}
    empty = parse(results)
    assert empty.state == MetricsState.EMPTY
    assert empty.message == f"no series for {SVC} (failed queries: waiting, kv)"
    down = parse(dict.fromkeys(base(), None))
    assert down.message == "every Prometheus query failed"
    stale = parse(base(newest=NOW - 600))
    assert stale.message == "newest sample is 600s old (bound 120s)"


def test_spec_defaults_are_the_api_defaults() -> None:
    assert SignalSpec() == spec_for(Objectives(), 60.0)
    assert not spec_for(Objectives(), 60.0).itl_required
    assert spec_for(Objectives(interTokenLatencyMs=50), 60.0).itl_required


def test_signal_spec_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SignalSpec().window_s = 1.0  # type: ignore[misc]


def test_token_and_preemption_rates_are_read_per_signal() -> None:
    results = base()
    results["throughput"] += [row(5000, signal="prompt_tokens", window="60s"),
                              row(2000, signal="generation_tokens", window="60s"),
                              row(0.5, signal="preemptions", window="60s"),
                              row(99, signal="prompt_tokens", window="300s")]
    got = parse(results)
    assert (got.prompt_tokens_rate, got.generation_tokens_rate, got.preemptions_rate) == (
        5000.0, 2000.0, 0.5)


def test_requests_finishing_with_nothing_in_flight_now_is_traffic() -> None:
    results = base()
    results["running"] = [row(0, stat="sum"), row(1, stat="pods"), row(NOW - 5, stat="newest")]
    got = parse(results)
    assert got.state == MetricsState.OK and got.running == 0.0


def test_without_latency_samples_and_nothing_finished_the_source_is_empty() -> None:
    results = {**base(rate=0.0), "e2e": [], "ttft": []}
    got = parse(results)
    assert got.state == MetricsState.OK
    assert got.latency_source == "" and got.message == "latency from no samples"


def test_inter_token_latency_is_optional_unless_targeted() -> None:
    assert parse({**base(), "itl": []}).state == MetricsState.OK
    got = parse({**base(), "itl": []}, SignalSpec(itl_required=True))
    assert got.state == MetricsState.PARTIAL and got.message == "missing: inter-token latency"


def test_partial_messages_list_every_missing_signal() -> None:
    results = {**base(), "e2e": [], "ttft": None,
               "running": [row(2, stat="pods"), row(NOW - 5, stat="newest")]}
    got = parse(results)
    assert got.state == MetricsState.PARTIAL
    assert got.message == "missing: running, e2e latency, TTFT (failed queries: ttft)"
    got = parse({**base(), "throughput": [], "waiting": []})
    assert got.message == "missing: request rate, waiting"
