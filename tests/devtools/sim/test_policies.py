"""Peer autoscaling rules on small tables (their pure arithmetic)."""

from __future__ import annotations

import pytest

from slo_devtools.sim.bench import step_model
from slo_devtools.sim.policies import (
    OPERATOR_PERIOD_S,
    HpaBehavior,
    Schedule,
    apa_desired,
    dynamo_replicas,
    hpa_average_value,
    kpa_desired,
    llmd_slo_signal,
    wva_saturation,
)
from slo_operator.settings import OperatorSettings


@pytest.mark.parametrize(("total", "target", "current", "want"), [
    pytest.param(0.0, 1.0, 4, 0, id="queue-reads-zero-asks-for-nothing"),
    pytest.param(10.0, 5.0, 1, 2, id="ceil-of-total-over-target"),
    pytest.param(21.0, 5.0, 4, 4, id="inside-10pct-tolerance-holds"),
    pytest.param(23.0, 5.0, 4, 5, id="outside-tolerance-scales"),
])
def test_hpa_average_value(total: float, target: float, current: int, want: int) -> None:
    assert hpa_average_value(total, target, current) == want


def test_hpa_scale_down_waits_for_the_stabilization_window() -> None:
    b = HpaBehavior(down_window_s=300.0)
    assert b.apply(8, 4, 0.0) == 8
    assert b.apply(2, 8, 100.0) == 8  # the 8 of t=0 is still in the window
    assert b.apply(2, 8, 301.0) == 2
    assert b.apply(40, 2, 302.0) == 6  # at most max(2x, +4) per step


@pytest.mark.parametrize(("stable", "panic", "ready", "panicking", "cur", "want"), [
    pytest.param(60.0, 60.0, 2, False, 2, (2, False), id="steady"),
    pytest.param(40.0, 200.0, 2, False, 2, (7, True), id="burst-enters-panic"),
    pytest.param(10.0, 10.0, 7, True, 7, (7, True), id="no-scale-down-while-panicking"),
    pytest.param(10.0, 10.0, 7, False, 7, (1, False), id="calm-scales-down"),
])
def test_kpa(stable: float, panic: float, ready: int, panicking: bool, cur: int,
             want: tuple[int, bool]) -> None:
    assert kpa_desired(stable, panic, 30.0, ready, panicking, cur) == want


@pytest.mark.parametrize(("ttft", "tpot", "want"), [
    (None, None, 0.0), (1.5, 0.02, 0.5), (0.3, 0.08, 0.8), (6.0, None, 2.0)])
def test_llmd_signal(ttft: float | None, tpot: float | None, want: float) -> None:
    assert llmd_slo_signal(ttft, tpot, 3.0, 0.1) == pytest.approx(want)


@pytest.mark.parametrize(("reps", "want"), [
    pytest.param([], 1, id="nothing-ready"),
    pytest.param([(0, 10, 0.05), (0, 12, 0.04)], -1, id="idle-pair-one-can-go"),
    pytest.param([(0, 10, 0.05)], 0, id="single-idle-stays"),
    pytest.param([(6, 256, 0.3), (0, 200, 0.75)], 1, id="one-saturated-one-low-spare"),
    pytest.param([(2, 256, 0.3), (3, 256, 0.2)], 1, id="queues-eat-the-spare"),
    pytest.param([(0, 100, 0.5), (0, 90, 0.5)], 0, id="spare-without-a-replica-less"),
])
def test_wva_saturation(reps: list[tuple[int, int, float]], want: int) -> None:
    assert wva_saturation(reps) == want


@pytest.mark.parametrize(("cur", "value", "target", "want"), [
    pytest.param(4, 32.0, 32.0, 4, id="on-target"),
    pytest.param(4, 34.0, 32.0, 4, id="inside-band"),
    pytest.param(4, 64.0, 32.0, 8, id="double"),
    pytest.param(4, 200.0, 32.0, 8, id="at-most-2N"),
    pytest.param(8, 1.0, 32.0, 4, id="at-least-N-over-2"),
])
def test_apa(cur: int, value: float, target: float, want: int) -> None:
    assert apa_desired(cur, value, target) == want


def test_dynamo_replicas_grow_with_load_and_need_none_without() -> None:
    m = step_model()
    assert dynamo_replicas(0.0, 1000, 200, m, 500, 75, 2048) == 0
    few = dynamo_replicas(5.0, 1000, 200, m, 500, 75, 2048)
    many = dynamo_replicas(50.0, 1000, 200, m, 500, 75, 2048)
    assert 1 <= few < many
    # A tighter ITL target means smaller batches, so more replicas.
    assert dynamo_replicas(50.0, 1000, 200, m, 500, 6, 2048) > many


def test_schedule_starts_replicas_one_cold_start_ahead() -> None:
    s = Schedule([1, 1, 5, 1], window_s=60.0, lead_s=62.0, period_s=5.0)
    assert s.want(0.0) == 1
    assert s.want(60.0 - 62.0 - 5.0 + 60.0) == 5  # 53 s: window 2 is within the lead
    assert s.want(180.0) == 1


def test_operator_period_matches_the_operator() -> None:
    assert OperatorSettings().interval == OPERATOR_PERIOD_S
