"""Query results -> Signals: typed outcomes for empty, NaN, stale, partial and hostile data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from slo_operator.api.observe import MetricsState, ServiceKey
from slo_operator.slo.promql import build_queries
from slo_operator.slo.signals import SignalSpec, parse_signals

NOW = 1_800_000_000.0
SVC = ServiceKey("team-a", "chat")
PLAN = build_queries([60, 300])
E2E_BOUNDS = ("0.5", "1.0", "2.5", "+Inf")


def row(key: ServiceKey, value: Any, ts: float = NOW, **labels: str) -> dict[str, Any]:
    return {"metric": {"namespace": key.namespace, "service": key.name, "pod": "p-0", **labels},
            "value": [ts, str(value)]}


def hist(key: ServiceKey, counts: tuple[float, ...], source: str, window: str = "60s",
         bounds: tuple[str, ...] = E2E_BOUNDS) -> list[dict[str, Any]]:
    return [row(key, c, le=le, source=source, window=window) for le, c in zip(bounds, counts,
                                                                            strict=True)]


def healthy(key: ServiceKey = SVC, window: str = "60s", newest: float = NOW - 5,
            rate: Any = 10.0) -> dict[str, list[dict[str, Any]]]:
    """One service at 10 req/s: e2e p99 in (1, 2.5] s, TTFT in (0.5, 1] s."""
    return {
        "e2e": hist(key, (1.0, 5.0, 10.0, 10.0), "gateway", window)
        + hist(key, (9.0, 10.0, 10.0, 10.0), "engine", window),
        "ttft": hist(key, (5.0, 10.0, 10.0, 10.0), "gateway", window),
        "itl": hist(key, (10.0, 10.0, 10.0, 10.0), "engine", window),
        "decode": [],
        "throughput": [row(key, rate, signal="requests", window=window),
                       row(key, 5000, signal="prompt_tokens", window=window),
                       row(key, 2000, signal="generation_tokens", window=window),
                       row(key, 0, signal="preemptions", window=window)],
        "waiting": [row(key, 2, source="engine"), row(key, 3, source="gateway")],
        "running": [row(key, 40, stat="sum"), row(key, 2, stat="pods"),
                    row(key, newest, stat="newest")],
        "kv": [row(key, 0.4, source="engine")],
    }


@dataclass
class Case:
    id: str
    results: dict[str, Any]
    want_state: MetricsState
    want: dict[str, Any] = field(default_factory=dict)
    spec: SignalSpec = field(default_factory=SignalSpec)
    want_message: str = ""


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


CASES = [
    Case("healthy-service-ok-with-client-visible-latency", healthy(), MetricsState.OK,
         {"e2e_ms": 2470.0, "ttft_ms": 950.0, "waiting": 5.0, "running": 40.0, "pods": 2,
          "request_rate": 10.0, "kv_usage": 0.4, "latency_source": "gateway"}),
    Case("percentile-comes-from-the-policy", healthy(), MetricsState.OK,
         {"e2e_ms": 1000.0, "ttft_ms": 500.0},
         spec=SignalSpec(e2e_percentile=0.5, ttft_percentile=0.5)),
    Case("gateway-without-samples-falls-back-to-engine",
         with_(healthy(), e2e=hist(SVC, (0, 0, 0, 0), "gateway")
               + hist(SVC, (9.0, 10.0, 10.0, 10.0), "engine")),
         MetricsState.OK, {"e2e_ms": 950.0, "latency_source": "engine"}),
    Case("window-of-the-policy-is-read", with_(healthy(window="300s")), MetricsState.OK,
         {"request_rate": 10.0}, spec=SignalSpec(window_s=300)),
    Case("other-window-only-is-partial", healthy(window="300s"), MetricsState.PARTIAL,
         {"request_rate": None}, want_message="request rate"),
    Case("nan-rate-is-not-zero", healthy(rate="NaN"), MetricsState.PARTIAL,
         {"request_rate": None}),
    Case("inf-kv-is-not-observed", with_(healthy(), kv=[row(SVC, "+Inf", source="engine")]),
         MetricsState.OK, {"kv_usage": None}),
    Case("legacy-kv-name-is-a-fallback",
         with_(healthy(), kv=[row(SVC, 0.7, source="legacy")]), MetricsState.OK,
         {"kv_usage": 0.7}),
    Case("idle-service-is-no-traffic",
         with_(healthy(rate=0), e2e=hist(SVC, (0, 0, 0, 0), "gateway"),
               ttft=[], waiting=[row(SVC, 0, source="engine")],
               running=[row(SVC, 0, stat="sum"), row(SVC, NOW, stat="newest")]),
         MetricsState.NO_TRAFFIC, {"e2e_ms": None, "ttft_ms": None}),
    Case("failed-query-makes-partial-and-says-which",
         with_(healthy(), ttft=None), MetricsState.PARTIAL, {"ttft_ms": None},
         want_message="failed queries: ttft"),
    Case("missing-itl-matters-only-when-targeted",
         with_(healthy(), itl=[]), MetricsState.PARTIAL, {}, spec=SignalSpec(itl_required=True),
         want_message="inter-token latency"),
    Case("old-samples-are-stale", healthy(newest=NOW - 600), MetricsState.STALE,
         {"e2e_ms": None}, want_message="600s old"),
    Case("no-series-is-empty", healthy(key=ServiceKey("team-b", "other")),
         MetricsState.EMPTY, {}),
    Case("prometheus-down-is-unavailable", dict.fromkeys(healthy(), None),
         MetricsState.UNAVAILABLE, {}),
    Case("garbage-rows-are-ignored",
         with_(healthy(), kv=[{"metric": "x"}, {"value": [1]}, 7,
                              row(SVC, 0.5, source="engine")]),
         MetricsState.OK, {"kv_usage": 0.5}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_parse_signals(case: Case) -> None:
    got = parse_signals(PLAN, case.results, {SVC: case.spec}, NOW)[SVC]
    assert got.state == case.want_state, got.message
    for name, want in case.want.items():
        assert getattr(got, name) == (pytest.approx(want) if isinstance(want, float) else want)
    assert case.want_message in got.message


def test_hostile_names_map_to_their_own_service_only() -> None:
    evil = ServiceKey('a"} or vector(1) #', "x\ny")
    results = {k: (healthy()[k] or []) + (healthy(key=evil, rate=3.0)[k] or [])
               for k in healthy()}
    got = parse_signals(PLAN, results, {SVC: SignalSpec(), evil: SignalSpec()}, NOW)
    assert got[SVC].request_rate == 10.0
    assert got[evil].request_rate == 3.0


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
