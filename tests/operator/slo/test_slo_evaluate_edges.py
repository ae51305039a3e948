"""SLO evaluation edges: stuck services, exact verdicts, run-length limits, report arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from slo_operator.api.models import Objectives
from slo_operator.api.observe import MetricsState, Signals
from slo_operator.slo.evaluate import (
    Outcome,
    SLOHistory,
    Verdict,
    decode_runs,
    evaluate_window,
    record,
    report,
)

OBJ = Objectives(e2eLatencyMs=800, ttftMs=300, throughputCVMax=0.15,
                 interTokenLatencyMs=50)
GOOD = {"e2e_ms": 700.0, "ttft_ms": 200.0, "jitter": 0.1, "itl_ms": 40.0}


def sig(**fields: object) -> Signals:
    return Signals(**{"state": MetricsState.OK, "request_rate": 10.0, **GOOD, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "want"), [
    ({"request_rate": 0.0, "waiting": 1.0}, Verdict(
        Outcome.BAD, ("stuck",), "1 request(s) waiting, none finished in the window")),
    ({"request_rate": 0.0, "waiting": 0.0}, Verdict(Outcome.GOOD, (), "all objectives met")),
    ({"request_rate": 0.0, "waiting": None}, Verdict(Outcome.GOOD, (), "all objectives met")),
    ({"request_rate": 10.0, "waiting": 5.0}, Verdict(Outcome.GOOD, (), "all objectives met")),
    ({"e2e_ms": 800.0, "ttft_ms": 300.0, "jitter": 0.15, "itl_ms": 50.0},
     Verdict(Outcome.GOOD, (), "all objectives met")),  # on target is met
    ({"e2e_ms": 900.0, "ttft_ms": 400.0, "jitter": 0.2, "itl_ms": 60.0}, Verdict(
        Outcome.BAD, ("e2e", "ttft", "jitter", "itl"),
        "e2e 900ms > 800ms, ttft 400ms > 300ms, jitter 0.2 > 0.15, itl 60ms > 50ms")),
    ({"e2e_ms": None, "ttft_ms": None},
     Verdict(Outcome.UNKNOWN, (), "no samples for e2e, ttft")),
    ({"state": MetricsState.STALE}, Verdict(Outcome.UNKNOWN, (), "metrics Stale")),
    ({"state": MetricsState.NO_TRAFFIC}, Verdict(Outcome.UNKNOWN, (), "no traffic")),
], ids=["stuck", "idle-empty-queue", "idle-no-queue-signal", "queue-while-finishing",
        "on-target", "all-over", "no-samples", "stale", "no-traffic"])
def test_verdicts(fields: dict[str, object], want: Verdict) -> None:
    assert evaluate_window(sig(**fields), OBJ) == want


def test_verdicts_and_reports_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Verdict(Outcome.GOOD).message = "x"  # type: ignore[misc]
    r = report(SLOHistory(60, 10, "g"), 0.9, 600, 600)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.good = 0  # type: ignore[misc]
    assert Verdict(Outcome.GOOD).message == ""


def test_decode_runs_limits() -> None:
    assert len(decode_runs("g2000000")) == 1_000_000
    assert decode_runs("g5b5", limit=7) == "gggggbb"
    assert decode_runs("g3b3g3", limit=7) == "gggbbbg"


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


def test_record_with_one_second_windows_and_a_period_of_one_window() -> None:
    assert record(SLOHistory(), Outcome.GOOD, 10.0, 1.0, 5.0) == SLOHistory(1, 10, "g")
    h = record(SLOHistory(), Outcome.GOOD, 0.0, 60.0, 60.0)
    assert record(h, Outcome.BAD, 60.0, 60.0, 60.0) == SLOHistory(60, 1, "b")


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
