"""SLO evaluation: window verdicts, attainment, budget, burn, and history across restarts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from slo_operator.api.models import Objectives
from slo_operator.api.observe import MetricsState, Signals
from slo_operator.slo.evaluate import (
    Outcome,
    SLOHistory,
    decode_runs,
    encode_runs,
    evaluate_window,
    record,
    report,
)

OBJ = Objectives.model_validate({"e2eLatencyMs": 1000, "ttftMs": 200,
                                 "throughputCVMax": 0.2})
OBJ_ITL = Objectives.model_validate({"e2eLatencyMs": 1000, "ttftMs": 200,
                                     "interTokenLatencyMs": 50})
FINE = Signals(state=MetricsState.OK, e2e_ms=900, ttft_ms=150, jitter=0.05, itl_ms=30,
               request_rate=5.0, waiting=0.0, running=3.0)
W = 60.0
HOUR = 3600.0
T = 1_800_000_000.0 - (1_800_000_000.0 % W)  # a window boundary


@pytest.mark.parametrize(("signals", "objectives", "want", "want_violations"), [
    (FINE, OBJ, Outcome.GOOD, ()),
    (replace(FINE, e2e_ms=1200), OBJ, Outcome.BAD, ("e2e",)),
    (replace(FINE, ttft_ms=250, jitter=0.5), OBJ, Outcome.BAD, ("ttft", "jitter")),
    (replace(FINE, itl_ms=80), OBJ, Outcome.GOOD, ()),
    (replace(FINE, itl_ms=80), OBJ_ITL, Outcome.BAD, ("itl",)),
    (replace(FINE, jitter=None), OBJ, Outcome.GOOD, ()),
    (replace(FINE, state=MetricsState.UNAVAILABLE), OBJ, Outcome.UNKNOWN, ()),
    (replace(FINE, state=MetricsState.STALE), OBJ, Outcome.UNKNOWN, ()),
    (replace(FINE, state=MetricsState.NO_TRAFFIC, e2e_ms=None, ttft_ms=None), OBJ,
     Outcome.UNKNOWN, ()),
    (replace(FINE, state=MetricsState.PARTIAL, ttft_ms=None), OBJ, Outcome.UNKNOWN, ()),
    (replace(FINE, state=MetricsState.PARTIAL, ttft_ms=None, e2e_ms=5000), OBJ,
     Outcome.BAD, ("e2e",)),
    (replace(FINE, request_rate=0.0, e2e_ms=None, ttft_ms=None, waiting=7.0), OBJ,
     Outcome.BAD, ("stuck",)),
], ids=["all-met", "e2e-over", "ttft-and-jitter-over", "itl-untargeted", "itl-over",
        "no-decode-samples-still-judged", "outage-unknown", "stale-unknown", "idle-unknown",
        "missing-ttft-unknown", "known-breach-counts-despite-gaps", "stuck-queue-bad"])
def test_window_verdict(signals: Signals, objectives: Objectives, want: Outcome,
                        want_violations: tuple[str, ...]) -> None:
    v = evaluate_window(signals, objectives)
    assert (v.outcome, v.violations) == (want, want_violations)
    assert v.message


def feed(outcomes: str, start: float = T, every: float = 15.0) -> SLOHistory:
    """One outcome per window, reported by four cycles per window (the last one wins)."""
    h = SLOHistory()
    for i, ch in enumerate(outcomes):
        for k in range(int(W // every)):
            o = Outcome(ch) if k == W // every - 1 else Outcome.UNKNOWN
            h = record(h, o, start + i * W + k * every, W, HOUR)
    return h


def test_attainment_budget_and_burn() -> None:
    h = feed("g" * 57 + "b" * 2 + "u")
    r = report(h, 0.9, HOUR, T + 59 * W)
    assert (r.good, r.bad, r.unknown) == (57, 2, 1)
    assert r.attainment == pytest.approx(57 / 59)
    assert r.error_budget_remaining == pytest.approx(1 - 2 / 6)  # 10% of 60 windows
    assert r.burn_rate_long == pytest.approx((2 / 59) / 0.1)
    assert r.burn_rate_short == pytest.approx((2 / 4) / 0.1)  # last 5 windows, one unknown
    assert r.meets_target is True


def test_unknown_windows_neither_earn_nor_spend() -> None:
    r = report(feed("u" * 30 + "g" * 30), 0.99, HOUR, T + 59 * W)
    assert (r.attainment, r.error_budget_remaining) == (1.0, 1.0)
    assert report(SLOHistory(), 0.99, HOUR, T).attainment is None


def test_period_rolls_and_operator_downtime_is_unknown() -> None:
    h = feed("b" * 10 + "g" * 50)
    later = report(h, 0.99, HOUR, T + 69 * W)  # ten windows later, nothing recorded
    assert (later.bad, later.unknown) == (0, 10)
    h2 = record(h, Outcome.GOOD, T + 70 * W, W, HOUR)
    assert len(h2.outcomes) == 60 and h2.outcomes.endswith("u" * 10 + "g")


def test_history_survives_a_restart_through_status() -> None:
    h = feed("g" * 20 + "b" + "g" * 30 + "bb" + "g")
    wire = json.loads(json.dumps(h.to_dict()))
    assert len(json.dumps(wire)) < 80  # run-length: compact whatever the period
    back = SLOHistory.from_dict(wire)
    assert back == h
    assert report(back, 0.99, HOUR, T + 54 * W) == report(h, 0.99, HOUR, T + 54 * W)


@pytest.mark.parametrize("garbage", [None, "x", {"windowSeconds": "60"},
                                     {"windowSeconds": 60, "lastIndex": "7", "runs": "g3"},
                                     {"windowSeconds": 60, "lastIndex": 7, "runs": "zz9g2"}])
def test_unreadable_history_is_empty_or_partial(garbage: object) -> None:
    h = SLOHistory.from_dict(garbage)
    assert set(h.outcomes) <= {"g", "b", "u"}


def test_window_change_starts_a_new_history() -> None:
    h = record(feed("bbbb"), Outcome.GOOD, T + 10 * W, 300.0, HOUR)
    assert (h.window_s, h.outcomes) == (300, "g")


def test_run_length_round_trip() -> None:
    s = "gggbbu" + "g" * 1000
    assert encode_runs(s) == "g3b2u1g1000"
    assert decode_runs(encode_runs(s)) == s
    assert decode_runs("g999999999", limit=10) == "g" * 10
