"""policy_for and replica_bounds: every SLOPolicy field reaches its ControlPolicy field as a
plain value, the service's bounds narrow the policy's range by one rule (the first
reconcile's too), and the tuning constants are the values docs/slo-loop.md states."""

from __future__ import annotations

import re
import typing
from collections.abc import Callable

import pytest

from slo_operator.api.models import InferenceServiceSpec, ReplicaBounds, SLOPolicySpec
from slo_operator.control import (
    ControlPolicy,
    StepTimes,
    capacity,
    law,
    policy_for,
    replica_bounds,
)
from slo_operator.control.capacity import DEFAULT_STEP_TIMES
from slo_operator.reconcile.desired import initial_replicas
from tests.support.paths import REPO

FULL = SLOPolicySpec.model_validate({
    "objectives": {"e2eLatencyMs": 1234, "ttftMs": 321, "interTokenLatencyMs": 45,
                   "throughputCVMax": 0.25},
    "window": "2m",
    "scaling": {"minReplicas": 2, "maxReplicas": 9, "scaleUpStabilization": "15s",
                "scaleDownStabilization": "10m", "maxScaleUpStep": 3, "maxScaleDownStep": 2,
                "scaleToZero": True, "idleBeforeZero": "20m"},
    "batching": {"mode": "restart", "minBatch": 4, "maxBatch": 96},
    "priority": 7,
    "gpuBudget": 12,
})


# --- policy_for -------------------------------------------------------------------------


def test_every_field_of_the_policy_reaches_the_control_policy() -> None:
    st = StepTimes(10.0, 0.5, 0.05)
    p = policy_for(FULL, step_times=st)
    assert p == ControlPolicy(
        e2e_target_ms=1234.0, ttft_target_ms=321.0, itl_target_ms=45.0, window_s=120.0,
        min_replicas=2, max_replicas=9, scale_up_stabilization_s=15.0,
        scale_down_stabilization_s=600.0, max_scale_up_step=3, max_scale_down_step=2,
        batching_mode="restart", min_batch=4, max_batch=96, gpu_budget=12, step_times=st,
        scale_to_zero=True, idle_before_zero_s=1200.0, jitter_max=0.25)
    assert p.step_times is st


def test_unset_optional_fields_stay_unset() -> None:
    p = policy_for(SLOPolicySpec())
    assert (p.itl_target_ms, p.gpu_budget, p.step_times, p.jitter_max) == (None,) * 4


@pytest.mark.parametrize("spec", [FULL, SLOPolicySpec()], ids=["full", "defaults"])
def test_values_are_plain_values_of_the_declared_types(spec: SLOPolicySpec) -> None:
    """Floats for times and targets, as the annotations say (not the API's ints)."""
    p = policy_for(spec, step_times=DEFAULT_STEP_TIMES)
    for name, hint in typing.get_type_hints(ControlPolicy).items():
        value = getattr(p, name)
        allowed = typing.get_args(hint) or (hint,)
        assert type(value) in allowed, (name, value, hint)


# --- replica bounds -------------------------------------------------------------------------


def policy_range(lo: int, hi: int) -> SLOPolicySpec:
    return SLOPolicySpec.model_validate(
        {"scaling": {"minReplicas": lo, "maxReplicas": hi, "scaleToZero": lo == 0}})


@pytest.mark.parametrize(
    ("pol", "bounds", "want"),
    [
        pytest.param((2, 8), None, (2, 8), id="no-service-bounds-policy-range"),
        pytest.param((2, 8), ReplicaBounds(), (2, 8), id="empty-service-bounds-change-nothing"),
        pytest.param((2, 8), ReplicaBounds(min=3), (3, 8), id="service-raises-the-minimum"),
        pytest.param((2, 8), ReplicaBounds(min=2), (2, 8), id="service-minimum-equal-to-policy"),
        pytest.param((2, 8), ReplicaBounds(max=5), (2, 5), id="service-lowers-the-maximum"),
        pytest.param((2, 8), ReplicaBounds(max=8), (2, 8), id="service-maximum-equal-to-policy"),
        pytest.param((1, 8), ReplicaBounds(min=2, max=4), (2, 4), id="service-narrows-both"),
        pytest.param((2, 8), ReplicaBounds(min=8, max=8), (8, 8), id="service-pins-one-count"),
        pytest.param((1, 8), ReplicaBounds(max=20), (1, 8), id="service-cannot-widen-max"),
        pytest.param((3, 8), ReplicaBounds(min=1), (3, 8), id="service-cannot-lower-min"),
        pytest.param((2, 8), ReplicaBounds(min=0, max=1), (1, 1),
                     id="service-max-below-policy-min-tighter-max-wins"),
        pytest.param((2, 8), ReplicaBounds(min=9), (8, 8),
                     id="service-min-above-policy-max-cap-wins"),
        pytest.param((0, 8), ReplicaBounds(min=0), (0, 8), id="scale-to-zero-policy-keeps-zero"),
    ],
)
def test_replica_bounds(pol: tuple[int, int], bounds: ReplicaBounds | None,
                        want: tuple[int, int]) -> None:
    spec = policy_range(*pol)
    assert replica_bounds(spec, bounds) == want
    assert replica_bounds(spec) == replica_bounds(spec, None) == pol
    cp = policy_for(spec, bounds)
    # With scaleToZero the law keeps one replica while awake; zero comes by its idle rule.
    awake_min = max(want[0], 1) if spec.scaling.scale_to_zero else want[0]
    assert (cp.min_replicas, cp.max_replicas) == (awake_min, want[1])
    # The first reconcile uses the same rule as the loop.
    svc = InferenceServiceSpec.model_validate(
        {"model": {"name": "m", "sizeBillions": 8},
         "replicas": (bounds or ReplicaBounds()).model_dump(exclude_none=True)}
    )
    assert initial_replicas(svc, spec) == want


# --- tuning constants, as docs/slo-loop.md states them -----------------------------------------

DOC = (REPO / "docs" / "slo-loop.md").read_text()
TUNING = " ".join(DOC.split("\n## Tuning constants\n", 1)[1].split("\n## ", 1)[0].split())
WHOLE = " ".join(DOC.split())
POLICY = policy_for(SLOPolicySpec())
FRACTIONS = {"half": 0.5, "a third": 1 / 3, "a quarter": 0.25}


def pct(x: str) -> float:
    return float(x) / 100.0


def minutes(x: str) -> float:
    return float(x) * 60.0


# (where the doc states it, pattern, the code's values, how each captured text reads)
TUNED = [
    # "## Tuning constants"
    pytest.param("tuning", r"dead band (\d+)%", (POLICY.tolerance,), pct, id="dead-band"),
    pytest.param("tuning", r"burst headroom over (\d+) minutes", (POLICY.burst_lookback_s,),
                 minutes, id="burst-lookback"),
    pytest.param("tuning", r"noise ([\d.]+) deviation", (POLICY.burst_k,), float,
                 id="burst-noise-deviations"),
    pytest.param("tuning", r"rises from at most (\w+(?: \w+)?) its peak", (law.BURST_RISE,),
                 FRACTIONS.__getitem__, id="burst-rise"),
    pytest.param("tuning", r"backlog drained in (\d+) s after a (\d+) s cold start",
                 (POLICY.backlog_drain_s, POLICY.cold_start_s), float,
                 id="backlog-drain-and-cold-start"),
    pytest.param("tuning", r"live limit changes at least (\d+) s apart",
                 (POLICY.limit_interval_s,), float, id="live-limit-interval"),
    pytest.param("tuning", r"restart-mode changes at least (\d+) minutes apart",
                 (POLICY.restart_interval_s,), minutes, id="restart-limit-interval"),
    pytest.param("tuning", r"planned utilisation ([\d.]+)", (capacity.TARGET_UTILIZATION,),
                 float, id="planned-utilisation"),
    pytest.param("tuning", r"latency margin ([\d.]+)", (capacity.LATENCY_MARGIN,), float,
                 id="latency-margin"),
    pytest.param("tuning", r"tail output ([\d.]+)x the mean", (capacity.TAIL_OUTPUT_FACTOR,),
                 float, id="tail-output-factor"),
    pytest.param("tuning", r"KV use ([\d.]+) \(([\d.]+) with preemptions\) lowers the limit",
                 (law.KV_FULL, law.KV_HIGH), float, id="kv-full-and-high"),
    pytest.param("tuning", r"correction ([\d.]+)\.\.([\d.]+), growing by the error itself up to "
                 r"([\d.]+) and its root beyond \(at most ([\d.]+)\), held between errors "
                 r"([\d.]+) and 1,", (law.CORRECTION_MIN, law.CORRECTION_MAX,
                                      law.CORRECTION_STEP_MIN, law.CORRECTION_STEP_MAX,
                                      law.RELAXED_ERROR), float,
                 id="correction-range-growth-and-hold"),
    pytest.param("tuning", r"decaying with a half-life of (\d+) s", (law.CORRECTION_HALF_LIFE_S,),
                 float, id="correction-half-life"),
    pytest.param("tuning", r"speed ([\d.]+)\.\.([\d.]+);", (law.SPEED_MIN, law.SPEED_MAX), float,
                 id="speed-range"),
    pytest.param("tuning", r"weight `rate x window / (\d+)` \(([\d.]+)\.\.([\d.]+)\)",
                 (law.SHAPE_REQUESTS, law.SHAPE_ALPHA_MIN, law.SHAPE_ALPHA_MAX), float,
                 id="request-shape-smoothing"),
    # The sections that explain them ("Seed and learning", "Demand", "Feedback", "Batch
    # limit" and its moves, "Protections").
    pytest.param("whole", r"smoothed \(EWMA ([\d.]+)\)", (law.SPEED_ALPHA,), float,
                 id="speed-ewma"),
    pytest.param("whole", r"successive differences / ([\d.]+)", (law.NOISE_SCALE,), float,
                 id="noise-scale"),
    pytest.param("whole", r"grows \(by `min\(([\d.]+), max\(", (law.CORRECTION_STEP_MAX,),
                 float, id="correction-step"),
    pytest.param("whole", r"stays within (\d+)% of `interTokenLatencyMs`", (law.ITL_HEADROOM,),
                 pct, id="itl-headroom"),
    pytest.param("whole", r"the limit in force x([\d.]+) \(`LimitLowered`\)",
                 (law.LIMIT_DOWN_FACTOR,), float, id="limit-down-factor"),
    pytest.param("whole", r"the limit in force x([\d.]+) \(`LimitRaised`\)",
                 (law.LIMIT_UP_FACTOR,), float, id="limit-up-factor"),
    pytest.param("whole", r"moves the limit by at least (\d+)% \(and 1\)",
                 (law.LIMIT_MIN_CHANGE,), pct, id="latency-limit-min-change"),
    pytest.param("whole", r"only for at least (\d+)% \(and 2\)", (law.LIMIT_MODEL_CHANGE,),
                 pct, id="model-limit-min-change"),
    pytest.param("whole", r"spans less than (\d+)% of the scale-down window",
                 (law.HISTORY_COVERAGE,), pct, id="history-coverage"),
]


@pytest.mark.parametrize(("where", "pattern", "code", "read"), TUNED)
def test_tuning_constants_are_the_documented_values(
        where: str, pattern: str, code: tuple[float, ...], read: Callable[[str], float]) -> None:
    m = re.search(pattern, TUNING if where == "tuning" else WHOLE)
    assert m, f"docs/slo-loop.md no longer says {pattern!r}"
    assert tuple(read(g) for g in m.groups()) == pytest.approx(code)
