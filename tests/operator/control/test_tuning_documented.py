"""The tuning constants are the values docs/slo-loop.md states ("Tuning constants", "Moves").

A constant changed in code without the documentation (or the other way round) fails here.
"""

from __future__ import annotations

from slo_operator.api.models import SLOPolicySpec
from slo_operator.control import capacity, law
from slo_operator.control.policy import policy_for
from slo_operator.slo import signals


def test_control_policy_tuning_fields() -> None:
    p = policy_for(SLOPolicySpec())
    assert p.tolerance == 0.1  # dead band 10%
    assert p.burst_k == 1.0  # noise 1 deviation
    assert p.burst_lookback_s == 600.0  # burst headroom over 10 minutes
    assert p.backlog_drain_s == 30.0 and p.cold_start_s == 60.0
    assert p.limit_interval_s == 10.0  # live limit changes at least 10 s apart
    assert p.restart_interval_s == 1800.0  # restart-mode changes at least 30 minutes apart


def test_capacity_constants() -> None:
    assert capacity.TARGET_UTILIZATION == 0.8
    assert capacity.LATENCY_MARGIN == 0.8
    assert capacity.TAIL_OUTPUT_FACTOR == 2.4


def test_control_law_constants() -> None:
    assert (law.CORRECTION_MIN, law.CORRECTION_MAX) == (0.9, 3.0)
    assert law.RELAXED_ERROR == 0.7 and law.CORRECTION_DECAY == 0.99
    assert (law.SPEED_MIN, law.SPEED_MAX) == (0.33, 3.0) and law.SPEED_ALPHA == 0.3
    assert law.SHAPE_REQUESTS == 100.0
    assert (law.SHAPE_ALPHA_MIN, law.SHAPE_ALPHA_MAX) == (0.05, 0.5)
    assert law.BURST_RISE == 0.5 and law.NOISE_SCALE == 1.627
    assert (law.KV_FULL, law.KV_HIGH) == (0.98, 0.9)
    assert (law.LIMIT_DOWN_FACTOR, law.LIMIT_UP_FACTOR) == (0.75, 1.5)
    assert (law.LIMIT_MIN_CHANGE, law.LIMIT_MODEL_CHANGE) == (0.1, 0.25)
    assert law.ITL_HEADROOM == 0.8


def test_staleness_bound() -> None:
    assert signals.DEFAULT_STALE_AFTER == 120.0
