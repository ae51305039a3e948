"""Query results -> per-service Signals with a typed MetricsState: sources, windows,
percentiles, jitter, staleness, partial and hostile data, and the messages the
MetricsAvailable condition carries (docs/slo-loop.md, "Metric states")."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slo_operator.api.models import Objectives
from slo_operator.api.observe import MetricsState, ServiceKey, Signals
from slo_operator.slo.histogram import quantile
from slo_operator.slo.promql import ARRIVALS_RECENT, COUNT, QUERY_NAMES, build_queries
from slo_operator.slo.signals import (
    DEFAULT_STALE_AFTER,
    SignalSpec,
    digest,
    parse_signals,
    spec_for,
)
from tests.support.paths import REPO

NOW = 1_800_000_000.0
SVC = ServiceKey("team-a", "chat")
# The percentiles the cases' policies ask for (SignalSpec defaults, and 0.5).
PLAN = build_queries([60, 300], percentiles={"e2e": [0.99, 0.5], "ttft": [0.95, 0.5],
                                             "itl": [0.99]})
E2E_BOUNDS = ("0.5", "1.0", "2.5", "+Inf")
ITL_BOUNDS = ("0.01", "0.02", "0.05", "+Inf")
DECODE_BOUNDS = ("0.01", "0.02", "0.04", "+Inf")
DOC = " ".join((REPO / "docs" / "slo-loop.md").read_text().split())


def row(value: Any, *, key: ServiceKey = SVC, ts: float = NOW, **labels: str) -> dict[str, Any]:
    return {"metric": {"namespace": key.namespace, "service": key.name, **labels},
            "value": [ts, str(value)]}


def hist(counts: tuple[float, ...], source: str, *, key: ServiceKey = SVC,
         window: str = "60s", bounds: tuple[str, ...] = E2E_BOUNDS, ts: float = NOW
         ) -> list[dict[str, Any]]:
    return [row(c, key=key, ts=ts, le=le, source=source, window=window)
            for le, c in zip(bounds, counts, strict=True)]


def lat(counts: tuple[float, ...], source: str, *, key: ServiceKey = SVC,
        window: str = "60s", bounds: tuple[str, ...] = E2E_BOUNDS, ts: float = NOW
        ) -> list[dict[str, Any]]:
    """A latency query's rows as Prometheus answers them for these cumulative bucket
    rates: ``histogram_quantile`` at each percentile the plan measures (NaN where it has
    none) and the observation rate (the ``+Inf`` bucket's; no such row without one).
    tests/operator/slo/test_promql.py checks the same shape in the real PromQL engine."""
    buckets = [(float(le), c) for le, c in zip(bounds, counts, strict=True)]
    rows = [row(c, key=key, ts=ts, quantile=COUNT, source=source, window=window)
            for le, c in zip(bounds, counts, strict=True) if le == "+Inf"]
    for q in sorted({q for m in PLAN.quantiles.values() for q in m.values()}):
        v = quantile(float(q), buckets)
        rows.append(row("NaN" if v is None else v, key=key, ts=ts, quantile=q, source=source,
                        window=window))
    return rows


def healthy(key: ServiceKey = SVC, window: str = "60s", newest: float = NOW - 5,
            rate: Any = 10.0) -> dict[str, list[dict[str, Any]]]:
    """One service at 10 req/s, every signal there: e2e p99 in (1, 2.5] s, TTFT in
    (0.5, 1] s, 5 waiting (engine and gateway), 40 running on 2 pods, KV 40%."""
    return {
        "e2e": lat((1.0, 5.0, 10.0, 10.0), "gateway", key=key, window=window)
        + lat((9.0, 10.0, 10.0, 10.0), "engine", key=key, window=window),
        "ttft": lat((5.0, 10.0, 10.0, 10.0), "gateway", key=key, window=window),
        "itl": lat((10.0, 10.0, 10.0, 10.0), "engine", key=key, window=window),
        "decode": [],
        "throughput": [row(rate, key=key, signal="requests", window=window),
                       row(5000, key=key, signal="prompt_tokens", window=window),
                       row(2000, key=key, signal="generation_tokens", window=window),
                       row(0, key=key, signal="preemptions", window=window)],
        "burst": [],
        "waiting": [row(2, key=key, source="engine"), row(3, key=key, source="gateway")],
        "running": [row(40, key=key, stat="sum"), row(2, key=key, stat="pods"),
                    row(newest, key=key, stat="newest")],
        "kv": [row(0.4, key=key, source="engine")],
    }


def minimal(newest: float | None = NOW - 5, rate: float = 10.0) -> dict[str, Any]:
    """Only what a service needs to be OK, every sample evaluated 5 s ago: e2e and TTFT
    from the gateway, an inter-token histogram (p99 19.875 ms), nothing waiting."""
    t = NOW - 5
    running = [row(40, ts=t, stat="sum"), row(2, ts=t, stat="pods")]
    if newest is not None:
        running.append(row(newest, ts=t, stat="newest"))
    return {
        "e2e": lat((1.0, 5.0, 10.0, 10.0), "gateway", ts=t),
        "ttft": lat((5.0, 10.0, 10.0, 10.0), "gateway", ts=t),
        "itl": lat((2.0, 10.0, 10.0, 10.0), "engine", bounds=ITL_BOUNDS, ts=t),
        "decode": [],
        "throughput": [row(rate, ts=t, signal="requests", window="60s")],
        "burst": [],
        "waiting": [row(0, ts=t, source="engine")],
        "running": running,
        "kv": [],
    }


def parse(results: dict[str, Any], spec: SignalSpec | None = None) -> Signals:
    return parse_signals(PLAN, results, {SVC: spec or SignalSpec()}, NOW)[SVC]


def with_throughput(**signals: Any) -> Signals:
    """``minimal()`` with these ``throughput`` rows of the 60 s window (None: no row), and
    a row of each in the 300 s window, which must not be read."""
    results = minimal()
    for name, value in signals.items():
        if value is not None:
            results["throughput"].append(row(value, signal=name, window="60s"))
        results["throughput"].append(row(7.0, signal=name, window="300s"))
    return parse(results)


# --- states and values -----------------------------------------------------------------------


@dataclass
class Case:
    id: str
    results: dict[str, Any]
    want_state: MetricsState
    want: dict[str, Any] = field(default_factory=dict)
    spec: SignalSpec = field(default_factory=SignalSpec)


CASES = [
    Case("healthy-service-ok-with-client-visible-latency", healthy(), MetricsState.OK,
         {"e2e_ms": 2470.0, "ttft_ms": 950.0, "waiting": 5.0, "running": 40.0, "pods": 2,
          "request_rate": 10.0, "kv_usage": 0.4, "latency_source": "gateway"}),
    Case("percentile-comes-from-the-policy", healthy(), MetricsState.OK,
         {"e2e_ms": 1000.0, "ttft_ms": 500.0},
         spec=SignalSpec(e2e_percentile=0.5, ttft_percentile=0.5)),
    Case("gateway-without-samples-falls-back-to-engine",
         {**healthy(), "e2e": lat((0, 0, 0, 0), "gateway")
          + lat((9.0, 10.0, 10.0, 10.0), "engine")},
         MetricsState.OK, {"e2e_ms": 950.0, "latency_source": "engine"}),
    Case("window-of-the-policy-is-read", healthy(window="300s"), MetricsState.OK,
         {"request_rate": 10.0}, spec=SignalSpec(window_s=300)),
    Case("other-window-only-is-partial", healthy(window="300s"), MetricsState.PARTIAL,
         {"request_rate": None}),
    Case("nan-rate-is-not-zero", healthy(rate="NaN"), MetricsState.PARTIAL,
         {"request_rate": None}),
    Case("inf-kv-is-not-observed", {**healthy(), "kv": [row("+Inf", source="engine")]},
         MetricsState.OK, {"kv_usage": None}),
    Case("legacy-kv-name-is-a-fallback", {**healthy(), "kv": [row(0.7, source="legacy")]},
         MetricsState.OK, {"kv_usage": 0.7}),
    Case("idle-service-is-no-traffic",
         {**healthy(rate=0), "e2e": lat((0, 0, 0, 0), "gateway"), "ttft": [],
          "waiting": [row(0, source="engine")],
          "running": [row(0, stat="sum"), row(NOW, stat="newest")]},
         MetricsState.NO_TRAFFIC, {"e2e_ms": None, "ttft_ms": None}),
    Case("idle-names-the-window",
         {**minimal(rate=0.0), "running": [row(0, stat="sum"), row(1, stat="pods")]},
         MetricsState.NO_TRAFFIC),
    Case("requests-finishing-with-nothing-in-flight-now-is-traffic",
         {**minimal(), "running": [row(0, stat="sum"), row(1, stat="pods"),
                                   row(NOW - 5, stat="newest")]},
         MetricsState.OK, {"running": 0.0}),
    Case("without-latency-samples-and-nothing-finished-the-source-is-empty",
         {**minimal(rate=0.0), "e2e": [], "ttft": []}, MetricsState.OK,
         {"latency_source": ""}),
    Case("failed-query-makes-partial-and-says-which",
         {**healthy(), "ttft": None}, MetricsState.PARTIAL, {"ttft_ms": None}),
    Case("partial-lists-every-failed-query",
         {**minimal(), "e2e": None, "ttft": None}, MetricsState.PARTIAL),
    Case("partial-lists-every-missing-signal",
         {**minimal(), "e2e": [], "ttft": None,
          "running": [row(2, stat="pods"), row(NOW - 5, stat="newest")]},
         MetricsState.PARTIAL),
    Case("no-rate-and-no-queue-is-partial", {**minimal(), "throughput": [], "waiting": []},
         MetricsState.PARTIAL),
    Case("inter-token-latency-is-optional-unless-targeted", {**minimal(), "itl": []},
         MetricsState.OK),
    Case("missing-itl-matters-when-targeted", {**minimal(), "itl": []},
         MetricsState.PARTIAL, spec=SignalSpec(itl_required=True)),
    Case("old-samples-are-stale", healthy(newest=NOW - 600), MetricsState.STALE,
         {"e2e_ms": None}),
    Case("samples-at-the-staleness-bound-are-fresh",
         minimal(newest=NOW - DEFAULT_STALE_AFTER), MetricsState.OK),
    Case("samples-beyond-the-staleness-bound-are-stale",
         minimal(newest=NOW - DEFAULT_STALE_AFTER - 1), MetricsState.STALE),
    Case("without-a-newest-stamp-the-sample-time-is-the-latest-evaluation",
         minimal(newest=None), MetricsState.OK, {"sample_time": NOW - 5}),
    Case("no-series-is-empty", healthy(key=ServiceKey("team-b", "other")),
         MetricsState.EMPTY),
    Case("no-series-names-the-failed-queries",
         {**{n: [] for n in minimal()}, "kv": None, "waiting": None}, MetricsState.EMPTY),
    Case("prometheus-down-is-unavailable", dict.fromkeys(healthy(), None),
         MetricsState.UNAVAILABLE),
    Case("garbage-rows-are-ignored",
         {**healthy(), "kv": [{"metric": "x"}, {"value": [1]}, 7, row(0.5, source="engine")]},
         MetricsState.OK, {"kv_usage": 0.5}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_parse_signals(case: Case, golden: Any) -> None:
    got = parse(case.results, case.spec)
    assert got.state == case.want_state, got.message
    for name, want in case.want.items():
        assert getattr(got, name) == (pytest.approx(want) if isinstance(want, float) else want)
    golden.check("slo", f"signals.{case.id}", got.message)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_replies_indexed_as_they_arrive_read_as_the_raw_ones(case: Case) -> None:
    """What the operator's Prometheus adapter hands over (``digest``: each reply indexed
    in its query's thread) parses exactly as the replies themselves."""
    digested = {name: digest(name, result) for name, result in case.results.items()}
    assert parse(digested, case.spec) == parse(case.results, case.spec)


# --- latency sources, percentiles, jitter and rates --------------------------------------------


def test_jitter_is_the_spread_bound_of_the_decode_histogram() -> None:
    """Mass 0.25 at or below 10 ms, 0.5 in (20, 40] ms, 0.25 above: mean 25 ms."""
    decode = [row(0.025, le="sum", source="request", window="60s")]
    decode += hist((0.25, 0.25, 0.75, 1.0), "request", bounds=DECODE_BOUNDS)
    got = parse({**minimal(), "decode": decode})
    assert got.state == MetricsState.OK
    assert got.jitter == pytest.approx(math.sqrt(2 * 0.25 * 0.015**2) / 0.025)


def test_without_a_decode_histogram_jitter_is_not_observed() -> None:
    got = parse(minimal())
    assert got.jitter is None
    assert got.itl_ms == pytest.approx(19.875)  # p99 of the itl histogram, from its own query


def test_decode_buckets_without_a_sum_give_no_jitter() -> None:
    decode = hist((0.25, 0.25, 0.75, 1.0), "request", bounds=DECODE_BOUNDS)
    assert parse({**minimal(), "decode": decode}).jitter is None


ANSWER_BOUNDS = ("100", "200", "500", "1000", "+Inf")


@pytest.mark.parametrize(("e2e_percentile", "want"), [(0.99, 500.0), (0.9, 200.0)])
def test_the_answer_tail_is_the_floor_of_the_generation_bucket_at_the_e2e_percentile(
        e2e_percentile: float, want: float) -> None:
    """80% of answers up to 200 tokens, 97% up to 500, all up to 1000: the P99 lies in
    (500, 1000], the P90 in (200, 500]; read beside the jitter's own source."""
    decode = [row(0.025, le="sum", source="request", window="60s")]
    decode += hist((0.25, 0.25, 0.75, 1.0), "request", bounds=DECODE_BOUNDS)
    decode += hist((0.5, 0.8, 0.97, 1.0, 1.0), "answers", bounds=ANSWER_BOUNDS)
    got = parse({**minimal(), "decode": decode}, SignalSpec(e2e_percentile=e2e_percentile))
    assert got.answer_tail_tokens == want
    assert got.jitter == pytest.approx(math.sqrt(2 * 0.25 * 0.015**2) / 0.025)


def test_without_generation_buckets_the_answer_tail_is_not_observed() -> None:
    assert parse(minimal()).answer_tail_tokens is None


def test_rows_of_other_windows_and_malformed_rows_before_good_ones_are_skipped() -> None:
    results = minimal()
    results["e2e"] = (lat((0.0, 0.0, 0.0, 9.0), "gateway", window="300s")
                      + [{"metric": {"namespace": "team-a"}, "value": [NOW, "1"]},
                         {"metric": {"namespace": "team-a", "service": "chat"}, "value": 5},
                         {"metric": {"namespace": "team-a", "service": "chat"}}]
                      + [row("NaN", quantile="0.99", source="gateway", window="60s"),
                         row(3.0, quantile="junk", source="gateway", window="60s")]
                      + results["e2e"])
    got = parse(results)
    assert got.state == MetricsState.OK
    assert got.e2e_ms == pytest.approx(2470.0)


def test_a_source_without_rows_or_without_inf_bucket_is_passed_over() -> None:
    results = minimal()
    results["e2e"] = (lat((1.0, 5.0, 10.0), "gateway", bounds=("0.5", "1.0", "2.5"))
                      + lat((9.0, 10.0, 10.0, 10.0), "engine"))
    got = parse(results)
    assert got.latency_source == "engine" and got.e2e_ms == pytest.approx(950.0)
    results["e2e"] = lat((9.0, 10.0, 10.0, 10.0), "engine")  # no gateway rows at all
    got = parse(results)
    assert got.latency_source == "engine" and got.e2e_ms == pytest.approx(950.0)


def test_a_slow_service_under_one_request_per_second_has_latencies() -> None:
    results = minimal(rate=0.5)
    results["e2e"] = lat((0.05, 0.25, 0.5, 0.5), "gateway")
    results["ttft"] = lat((0.25, 0.5, 0.5, 0.5), "gateway")
    got = parse(results)
    assert got.state == MetricsState.OK
    assert got.e2e_ms is not None and got.ttft_ms == pytest.approx(950.0)


def test_token_and_preemption_rates_are_read_per_signal() -> None:
    results = minimal()
    results["throughput"] += [row(5000, signal="prompt_tokens", window="60s"),
                              row(2000, signal="generation_tokens", window="60s"),
                              row(0.5, signal="preemptions", window="60s"),
                              row(99, signal="prompt_tokens", window="300s")]
    got = parse(results)
    assert (got.prompt_tokens_rate, got.generation_tokens_rate, got.preemptions_rate) == (
        5000.0, 2000.0, 0.5)


def test_arrival_rates_and_peak_come_from_the_gateway_per_window() -> None:
    results = minimal()
    results["throughput"] += [row(12.0, signal="arrivals", window="60s"),
                              row(99.0, signal="arrivals", window="300s"),
                              row(15.0, signal=ARRIVALS_RECENT, window="60s"),
                              row(90.0, signal=ARRIVALS_RECENT, window="300s")]
    results["burst"] = [row(30.0, window="60s"), row(180.0, window="300s")]
    got = parse(results)
    assert got.state == MetricsState.OK
    assert (got.arrival_rate, got.arrival_recent_rate, got.arrival_peak_rate) == (
        12.0, 15.0, 30.0)
    at_300 = parse(results, SignalSpec(window_s=300))
    assert (at_300.arrival_rate, at_300.arrival_recent_rate, at_300.arrival_peak_rate) == (
        99.0, 90.0, 180.0)


def test_without_gateway_arrivals_demand_from_arrivals_is_not_observed() -> None:
    """Pods without the gateway: no arrival series, so no arrival rate or peak (never 0),
    and the service is still OK on vLLM's completions."""
    got = parse(minimal())
    assert got.state == MetricsState.OK
    assert got.arrival_rate is None and got.arrival_peak_rate is None
    assert got.arrival_recent_rate is None
    assert got.request_rate == 10.0


@pytest.mark.parametrize(("peak", "mean", "want"), [
    pytest.param(30.0, 12.0, 30.0, id="peak-above-mean"),
    pytest.param(11.5, 12.0, 12.0, id="peak-below-mean-is-the-mean"),
    pytest.param(30.0, None, 30.0, id="peak-without-mean"),
    pytest.param("NaN", 12.0, None, id="nan-peak-is-not-observed"),
])
def test_arrival_peak_is_never_below_the_window_mean(peak: Any, mean: float | None,
                                                     want: float | None) -> None:
    results = minimal()
    if mean is not None:
        results["throughput"].append(row(mean, signal="arrivals", window="60s"))
    results["burst"] = [row(peak, window="60s")]
    assert parse(results).arrival_peak_rate == want


@pytest.mark.parametrize(("hits", "queries", "want"), [
    pytest.param(250.0, 1000.0, 0.25, id="share-of-prompt-tokens"),
    pytest.param(0.0, 1000.0, 0.0, id="no-hits"),
    pytest.param(1003.0, 1000.0, 1.0, id="overshoot-is-capped"),
    pytest.param(0.0, 0.0, None, id="nothing-looked-up"),
    pytest.param(None, 1000.0, None, id="hits-missing"),
    pytest.param(5.0, None, None, id="queries-missing"),
    pytest.param(5.0, "+Inf", None, id="infinite-queries"),
])
def test_prefix_hit_share_is_hits_over_lookups(hits: float | None, queries: Any,
                                               want: float | None) -> None:
    got = with_throughput(prefix_hits=hits, prefix_queries=queries).prefix_hit_share
    assert got == (pytest.approx(want) if want is not None else None)


def test_decode_mean_is_the_sum_rate_over_the_count_rate_of_the_chosen_source() -> None:
    """4 per-request observations per second summing to 0.1 s/s: 25 ms each on average;
    the per-token fallback is not read while the per-request source has samples."""
    decode = [row(0.1, le="sum", source="request", window="60s")]
    decode += hist((1.0, 1.0, 3.0, 4.0), "request", bounds=DECODE_BOUNDS)
    decode += [row(9.0, le="sum", source="token", window="60s")]
    decode += hist((1.0, 1.0, 1.0, 1.0), "token", bounds=DECODE_BOUNDS)
    got = parse({**minimal(), "decode": decode})
    assert got.decode_mean_ms == pytest.approx(25.0)
    # Without per-request samples, the per-token histogram is the source.
    fallback = hist((0, 0, 0, 0), "request", bounds=DECODE_BOUNDS)
    fallback += [row(0.03, le="sum", source="token", window="60s")]
    fallback += hist((1.0, 1.0, 1.0, 2.0), "token", bounds=DECODE_BOUNDS)
    assert parse({**minimal(), "decode": fallback}).decode_mean_ms == pytest.approx(15.0)


def test_decode_mean_weights_tokens_where_vllm_times_them() -> None:
    """vLLM's inter-token latency sum and count (one observation per generated token) win
    over the per-request histogram: a long answer weighs as its tokens do."""
    decode = [row(0.1, le="sum", source="request", window="60s")]
    decode += hist((1.0, 1.0, 3.0, 4.0), "request", bounds=DECODE_BOUNDS)
    results = minimal()
    results["decode"] = decode
    results["throughput"] += [row(2.0, signal="token_seconds", window="60s"),
                              row(50.0, signal="tokens_timed", window="60s")]
    assert parse(results).decode_mean_ms == pytest.approx(40.0)
    # No token timed in the window: the per-request mean stands.
    results["throughput"][-1] = row(0.0, signal="tokens_timed", window="60s")
    assert parse(results).decode_mean_ms == pytest.approx(25.0)


@pytest.mark.parametrize("decode", [
    pytest.param([], id="no-histogram"),
    pytest.param(hist((1.0, 1.0, 3.0, 4.0), "request", bounds=DECODE_BOUNDS), id="no-sum"),
    pytest.param([row("NaN", le="sum", source="request", window="60s"),
                  *hist((1.0, 1.0, 3.0, 4.0), "request", bounds=DECODE_BOUNDS)], id="nan-sum"),
    pytest.param([row(0.1, le="sum", source="request", window="60s"),
                  *hist((0, 0, 0, 0), "request", bounds=DECODE_BOUNDS)], id="no-requests"),
])
def test_decode_mean_is_not_observed_without_a_sum_and_a_count(decode: list[Any]) -> None:
    assert parse({**minimal(), "decode": decode}).decode_mean_ms is None


@pytest.mark.parametrize(("seconds", "count", "want"), [
    pytest.param(1.5, 3.0, 500.0, id="sum-rate-over-count-rate"),
    pytest.param(0.0, 3.0, 0.0, id="instant-prefills"),
    pytest.param(1.5, 0.0, None, id="no-prefill-finished"),
    pytest.param(None, 3.0, None, id="sum-missing"),
    pytest.param(1.5, None, None, id="count-missing"),
    pytest.param("NaN", 3.0, None, id="nan-sum"),
    pytest.param(-1.0, 3.0, None, id="negative-sum"),
])
def test_prefill_mean_is_vllms_prefill_time_sum_rate_over_its_count_rate(
        seconds: Any, count: float | None, want: float | None) -> None:
    got = with_throughput(prefill_seconds=seconds, prefills=count).prefill_mean_ms
    assert got == (pytest.approx(want) if want is not None else None)


# --- many services, hostile and long names ----------------------------------------------------


def test_hostile_names_map_to_their_own_service_only() -> None:
    evil = ServiceKey('a"} or vector(1) #', "x\ny")
    results = {k: healthy()[k] + healthy(key=evil, rate=3.0)[k] for k in healthy()}
    got = parse_signals(PLAN, results, {SVC: SignalSpec(), evil: SignalSpec()}, NOW)
    assert got[SVC].request_rate == 10.0
    assert got[evil].request_rate == 3.0


@pytest.mark.parametrize("damage", ["NaN", "+Inf", "-Inf", "not a number"])
def test_a_service_with_every_sample_damaged_is_partial_and_spares_the_others(
        damage: str) -> None:
    """One service's exporter sends only unusable values: that service has no load to
    decide on (Partial, naming what is missing); another in the same replies reads exactly
    as it reads alone."""
    other = ServiceKey("team-b", "code")
    bad = {n: [row(damage, **{k: v for k, v in r["metric"].items()
                              if k not in ("namespace", "service")})
               for r in rows] for n, rows in healthy().items()}
    results = {n: bad[n] + healthy(key=other)[n] for n in healthy()}
    got = parse_signals(PLAN, results, {SVC: SignalSpec(), other: SignalSpec()}, NOW)
    alone = parse_signals(PLAN, healthy(key=other), {other: SignalSpec()}, NOW)[other]
    assert got[SVC].state == MetricsState.PARTIAL
    assert "request rate" in got[SVC].message and "running" in got[SVC].message
    assert got[SVC].request_rate is None and got[SVC].e2e_ms is None
    assert got[other] == alone and alone.state == MetricsState.OK


def test_a_thousand_services_parse_from_one_result_set() -> None:
    keys = [ServiceKey(f"ns-{i % 50}", f"svc-{i}") for i in range(1000)]
    results: dict[str, list[dict[str, Any]]] = {}
    for k in keys:
        for name, rows in healthy(key=k).items():
            results.setdefault(name, []).extend(rows)
    got = parse_signals(PLAN, results, dict.fromkeys(keys, SignalSpec()), NOW)
    assert {s.state for s in got.values()} == {MetricsState.OK}


def test_long_names_are_found_under_their_pod_label_value() -> None:
    long_key = ServiceKey("team-a", "x" * 80)
    results = healthy(key=ServiceKey("team-a", "x" * 50 + "-abc123"))
    got = parse_signals(PLAN, results, {long_key: SignalSpec(service_label="x" * 50 + "-abc123")},
                        NOW)
    assert got[long_key].state == MetricsState.OK


label = st.sampled_from(["a", "b", "s", "t", "", "60s", "gateway", "engine", "legacy",
                         "requests", "arrivals", "prefix_hits", "prefix_queries", "request",
                         "token", "sum", "pods", "newest", "+Inf", "0.5", "0.99", "1.0", "count",
                         "x"])
value = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "", "abc"]),
                  st.floats(allow_nan=True, allow_infinity=True).map(str),
                  st.integers(-5, 10**6).map(str))
any_row = st.fixed_dictionaries({
    "metric": st.dictionaries(st.sampled_from(["namespace", "service", "le", "quantile",
                                                "window", "source", "signal", "stat"]),
                              label),
    "value": st.tuples(st.floats(min_value=0, max_value=2e9), value).map(list),
})
reply: Any = st.one_of(st.none(), st.lists(st.one_of(any_row, st.integers(),
                                                     st.text(max_size=3)), max_size=30))


@given(results=st.fixed_dictionaries({n: reply for n in QUERY_NAMES}))
@settings(max_examples=300, deadline=None)
def test_garbage_in_typed_state_out(results: dict[str, Any]) -> None:
    """Whatever Prometheus replies: no exception, no invented number, always a message."""
    keys = [ServiceKey("a", "s"), ServiceKey("b", "t")]
    got = parse_signals(build_queries([60]), results, dict.fromkeys(keys, SignalSpec()), 2e9)
    assert set(got) == set(keys)
    for s in got.values():
        for v in (s.e2e_ms, s.ttft_ms, s.itl_ms, s.jitter, s.request_rate, s.waiting,
                  s.running, s.kv_usage, s.arrival_rate, s.arrival_peak_rate,
                  s.decode_mean_ms):
            assert v is None or math.isfinite(v)
        assert s.prefix_hit_share is None or 0.0 <= s.prefix_hit_share <= 1.0
        assert s.message


# --- what a policy asks of its signals ----------------------------------------------------------


def test_spec_defaults_are_the_api_defaults() -> None:
    assert SignalSpec() == spec_for(Objectives(), 60.0)
    assert not spec_for(Objectives(), 60.0).itl_required
    assert spec_for(Objectives.model_validate({"interTokenLatencyMs": 50}), 60.0).itl_required


# --- what the docs say ------------------------------------------------------------------------


@pytest.mark.parametrize("state", [s.value for s in MetricsState])
def test_every_metrics_state_is_documented(state: str) -> None:
    assert f"| `{state}` |" in DOC


def test_the_staleness_bound_is_the_documented_one() -> None:
    table = re.search(r"\| `Stale` \| .*? is older than (\d+) s \|", DOC)
    tuning = re.search(r"staleness bound (\d+) s", DOC)
    assert table and tuning, "docs/slo-loop.md no longer states the staleness bound"
    assert float(table[1]) == float(tuning[1]) == DEFAULT_STALE_AFTER
