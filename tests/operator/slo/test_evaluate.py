"""SLO evaluation: window verdicts, the run-length history across restarts, attainment,
error budget and burn rates (docs/slo-loop.md, "SLO evaluation")."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

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

W = 60.0
HOUR = 3600.0
T = 1_800_000_000.0 - (1_800_000_000.0 % W)  # a window boundary

# --- window verdicts ----------------------------------------------------------------------

OBJ = Objectives.model_validate({"e2eLatencyMs": 1000, "ttftMs": 200,
                                 "throughputCVMax": 0.2})
OBJ_ITL = Objectives.model_validate({"e2eLatencyMs": 1000, "ttftMs": 200,
                                     "interTokenLatencyMs": 50})
OBJ_ALL = Objectives.model_validate({"e2eLatencyMs": 800, "ttftMs": 300,
                                     "throughputCVMax": 0.15, "interTokenLatencyMs": 50})
FINE = Signals(state=MetricsState.OK, e2e_ms=900, ttft_ms=150, jitter=0.05, itl_ms=30,
               request_rate=5.0, waiting=0.0, running=3.0)
WITHIN_ALL = Signals(state=MetricsState.OK, request_rate=10.0, e2e_ms=700.0, ttft_ms=200.0,
                     jitter=0.1, itl_ms=40.0)


@dataclass
class Case:
    id: str
    signals: Signals
    objectives: Objectives
    want_outcome: Outcome
    want_violations: tuple[str, ...] = ()


VERDICTS = [
    Case("all-objectives-met", FINE, OBJ, Outcome.GOOD),
    Case("on-target-is-met", replace(WITHIN_ALL, e2e_ms=800.0, ttft_ms=300.0, jitter=0.15,
                                     itl_ms=50.0), OBJ_ALL, Outcome.GOOD),
    Case("e2e-over", replace(FINE, e2e_ms=1200), OBJ, Outcome.BAD, ("e2e",)),
    Case("ttft-and-jitter-over", replace(FINE, ttft_ms=250, jitter=0.5), OBJ, Outcome.BAD,
         ("ttft", "jitter")),
    Case("every-objective-over", replace(WITHIN_ALL, e2e_ms=900.0, ttft_ms=400.0, jitter=0.2,
                                         itl_ms=60.0), OBJ_ALL, Outcome.BAD,
         ("e2e", "ttft", "jitter", "itl")),
    Case("itl-over-but-not-targeted", replace(FINE, itl_ms=80), OBJ, Outcome.GOOD),
    Case("jitter-over-any-bound-but-not-targeted", replace(FINE, jitter=9.0),
         OBJ_ITL, Outcome.GOOD),
    Case("jitter-over-a-bound-the-policy-sets", replace(FINE, jitter=0.25), OBJ, Outcome.BAD,
         ("jitter",)),
    Case("itl-over-its-target", replace(FINE, itl_ms=80), OBJ_ITL, Outcome.BAD, ("itl",)),
    Case("no-decode-samples-still-judged", replace(FINE, jitter=None), OBJ, Outcome.GOOD),
    Case("outage-is-unknown", replace(FINE, state=MetricsState.UNAVAILABLE), OBJ,
         Outcome.UNKNOWN),
    Case("stale-is-unknown", replace(FINE, state=MetricsState.STALE), OBJ, Outcome.UNKNOWN),
    Case("idle-is-unknown", replace(FINE, state=MetricsState.NO_TRAFFIC, e2e_ms=None,
                                    ttft_ms=None), OBJ, Outcome.UNKNOWN),
    Case("missing-ttft-is-unknown", replace(FINE, state=MetricsState.PARTIAL, ttft_ms=None),
         OBJ, Outcome.UNKNOWN),
    Case("no-latency-samples-is-unknown", replace(WITHIN_ALL, e2e_ms=None, ttft_ms=None),
         OBJ_ALL, Outcome.UNKNOWN),
    Case("known-breach-counts-despite-gaps",
         replace(FINE, state=MetricsState.PARTIAL, ttft_ms=None, e2e_ms=5000), OBJ,
         Outcome.BAD, ("e2e",)),
    Case("stuck-queue-is-bad", replace(FINE, request_rate=0.0, e2e_ms=None, ttft_ms=None,
                                       waiting=7.0), OBJ, Outcome.BAD, ("stuck",)),
    Case("one-request-stuck-is-bad", replace(WITHIN_ALL, request_rate=0.0, waiting=1.0),
         OBJ_ALL, Outcome.BAD, ("stuck",)),
    Case("idle-with-an-empty-queue-is-judged",
         replace(WITHIN_ALL, request_rate=0.0, waiting=0.0), OBJ_ALL, Outcome.GOOD),
    Case("idle-without-a-queue-signal-is-judged",
         replace(WITHIN_ALL, request_rate=0.0, waiting=None), OBJ_ALL, Outcome.GOOD),
    Case("a-queue-while-requests-finish-is-not-stuck",
         replace(WITHIN_ALL, request_rate=10.0, waiting=5.0), OBJ_ALL, Outcome.GOOD),
]


@pytest.mark.parametrize("case", VERDICTS, ids=[c.id for c in VERDICTS])
def test_window_verdict(case: Case, golden: Any) -> None:
    v = evaluate_window(case.signals, case.objectives)
    assert (v.outcome, v.violations) == (case.want_outcome, case.want_violations)
    golden.check("slo", f"verdict.{case.id}", v.message)


# --- recording windows --------------------------------------------------------------------


def feed(outcomes: str, start: float = T, every: float = 15.0) -> SLOHistory:
    """One outcome per window, reported by four cycles per window (the last one wins)."""
    h = SLOHistory()
    for i, ch in enumerate(outcomes):
        for k in range(int(W // every)):
            o = Outcome(ch) if k == W // every - 1 else Outcome.UNKNOWN
            h = record(h, o, start + i * W + k * every, W, HOUR)
    return h


def test_period_rolls_and_operator_downtime_is_unknown() -> None:
    h = feed("b" * 10 + "g" * 50)
    later = report(h, 0.99, HOUR, T + 69 * W)  # ten windows later, nothing recorded
    assert (later.bad, later.unknown) == (0, 10)
    h2 = record(h, Outcome.GOOD, T + 70 * W, W, HOUR)
    assert len(h2.outcomes) == 60 and h2.outcomes.endswith("u" * 10 + "g")


def test_window_change_starts_a_new_history() -> None:
    h = record(feed("bbbb"), Outcome.GOOD, T + 10 * W, 300.0, HOUR)
    assert (h.window_s, h.outcomes) == (300, "g")


def test_record_with_one_second_windows_and_a_period_of_one_window() -> None:
    assert record(SLOHistory(), Outcome.GOOD, 10.0, 1.0, 5.0) == SLOHistory(1, 10, "g")
    h = record(SLOHistory(), Outcome.GOOD, 0.0, 60.0, 60.0)
    assert record(h, Outcome.BAD, 60.0, 60.0, 60.0) == SLOHistory(60, 1, "b")


def test_record_never_rewrites_the_past_or_the_stored_history() -> None:
    stored = SLOHistory(60, 10, "gb")
    assert record(stored, Outcome.GOOD, 9 * 60.0, 60.0, HOUR) == stored  # clock went back
    assert record(stored, Outcome.GOOD, 11 * 60.0, 60.0, HOUR) == SLOHistory(60, 11, "gbg")
    assert stored == SLOHistory(60, 10, "gb")


# --- the history in status ------------------------------------------------------------------


def test_history_survives_a_restart_through_status() -> None:
    h = feed("g" * 20 + "b" + "g" * 30 + "bb" + "g")
    wire = json.loads(json.dumps(h.to_dict()))
    assert len(json.dumps(wire)) < 80  # run-length: compact whatever the period
    back = SLOHistory.from_dict(wire)
    assert back == h
    assert report(back, 0.99, HOUR, T + 54 * W) == report(h, 0.99, HOUR, T + 54 * W)


@pytest.mark.parametrize("garbage", [
    pytest.param(None, id="none"),
    pytest.param("x", id="not-a-mapping"),
    pytest.param({"windowSeconds": "60"}, id="window-as-text"),
    pytest.param({"windowSeconds": 60, "lastIndex": "7", "runs": "g3"}, id="index-as-text"),
    pytest.param({"windowSeconds": 60, "lastIndex": 7, "runs": "zz9g2"}, id="junk-in-runs"),
])
def test_unreadable_history_is_empty_or_partial(garbage: object) -> None:
    h = SLOHistory.from_dict(garbage)
    assert set(h.outcomes) <= {"g", "b", "u"}


def test_history_from_dict_edges() -> None:
    assert len(SLOHistory.from_dict({"windowSeconds": 60, "lastIndex": 1,
                                     "runs": "g200000"}).outcomes) == 100_000
    assert SLOHistory.from_dict({"windowSeconds": 0, "lastIndex": 1, "runs": "g1"}) \
        == SLOHistory()
    assert SLOHistory.from_dict({"windowSeconds": 1, "lastIndex": 5, "runs": "g2"}) \
        == SLOHistory(1, 5, "gg")
    assert SLOHistory.from_dict({"windowSeconds": 60, "lastIndex": "x", "runs": "g1"}) \
        == SLOHistory(60)
    assert SLOHistory.from_dict(None).window_s == 60


def test_run_length_round_trip() -> None:
    s = "gggbbu" + "g" * 1000
    assert encode_runs(s) == "g3b2u1g1000"
    assert decode_runs(encode_runs(s)) == s
    assert decode_runs("g999999999", limit=10) == "g" * 10


def test_decode_runs_limits() -> None:
    assert len(decode_runs("g2000000")) == 1_000_000
    assert decode_runs("g5b5", limit=7) == "gggggbb"
    assert decode_runs("g3b3g3", limit=7) == "gggbbbg"


# --- the report -------------------------------------------------------------------------------


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


def test_report_of_a_period_shorter_than_a_window_is_the_newest_window() -> None:
    r = report(SLOHistory(60, 10, "gb"), 0.9, 30, 600)
    assert (r.good, r.bad, r.unknown) == (0, 1, 0)


def test_report_arithmetic() -> None:
    half = report(SLOHistory(60, 10, "gb"), 0.9, 120, 600)
    assert half.attainment == 0.5 and half.meets_target is False
    assert half.error_budget_remaining == pytest.approx(1.0 - 1 / 0.2)
    assert half.current == Outcome.BAD
    one = report(SLOHistory(60, 10, "g"), 0.9, 60, 600)
    assert one.error_budget_remaining == 1.0 and one.attainment == 1.0
    nothing = report(SLOHistory(60, 10, "u"), 0.9, 60, 600)
    assert nothing.error_budget_remaining is None and nothing.attainment is None
    small = report(SLOHistory(60, 10, "ggggb"), 0.9, 300, 600)  # half a window of budget
    assert small.error_budget_remaining == pytest.approx(1.0 - 1 / 0.5)
    exact = report(SLOHistory(60, 10, "gggggggggb"), 0.9, 600, 600)
    assert exact.meets_target is True


def test_a_target_of_one_has_no_budget_and_no_burn_rate() -> None:
    clean = report(SLOHistory(60, 10, "gg"), 1.0, 120, 600)
    assert clean.error_budget_remaining == 1.0 and clean.burn_rate_long is None
    spent = report(SLOHistory(60, 10, "gb"), 1.0, 120, 600)
    assert spent.error_budget_remaining == 0.0 and spent.burn_rate_short is None


def test_short_burn_rate_covers_a_twelfth_of_the_period_at_least_one_window() -> None:
    r = report(SLOHistory(60, 10, "g" * 10 + "bg"), 0.9, 720, 600)
    assert r.burn_rate_short == 0.0
    assert r.burn_rate_long == pytest.approx((1 / 12) / 0.1)


def test_current_outcome_is_the_newest_window_only_when_it_is_now() -> None:
    assert report(SLOHistory(60, 10, "bg"), 0.9, 600, 600).current == Outcome.GOOD
    assert report(SLOHistory(60, 9, "gg"), 0.9, 600, 600).current == Outcome.UNKNOWN
