"""decide(), the control law: situations a platform engineer expects, the edges of each rule,
its boundaries one table per rule, a closed loop around a toy plant, and properties over
arbitrary observations (docs/slo-loop.md). The control issue rewrites these as scenarios
through decide over time."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slo_operator.api.observe import (
    MetricsState,
    Observation,
    ReplicaCounts,
    ServiceKey,
    Signals,
)
from slo_operator.control import (
    ControlPolicy,
    ControlState,
    Decision,
    GpuRequest,
    arbitrate,
    decide,
    law,
)
from slo_operator.control import reasons as R
from slo_operator.control.capacity import (
    DEFAULT_STEP_TIMES,
    Capacity,
    StepTimes,
    predicted_tokens_per_s,
    rate_at_batch,
)
from tests.operator.control.control_support import (
    KEY,
    OUTPUT,
    PER_REPLICA,
    PROMPT,
    T0,
    history,
    make_obs,
    make_policy,
    make_state,
)

# --- decide(): ---------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    obs: dict[str, Any]
    want_replicas: int
    want_reason: str
    policy: dict[str, Any] = field(default_factory=dict)
    state: ControlState = field(default_factory=ControlState)
    want_limited: str | None = None
    want_limit: int | None = 64
    want_valid: bool = True


SETTLED = history(2, since=T0 - 600)  # two replicas wanted for the last ten minutes

CASES = [
    Case(
        "load-step-breaching-e2e-scales-out-at-once",
        obs={"desired": 2, "rate": 80.0, "e2e": 12_000.0},
        state=make_state(recommendations=SETTLED),
        want_replicas=4,
        want_reason=R.SLO_VIOLATED,
    ),
    Case(
        "load-growth-within-slo-scales-out-from-the-model",
        obs={"desired": 2, "rate": 60.0},
        state=make_state(recommendations=SETTLED),
        want_replicas=3,
        want_reason=R.LOAD_INCREASED,
    ),
    Case(
        "need-inside-dead-band-holds",
        obs={"desired": 3, "rate": 3 * PER_REPLICA * 1.05},
        state=make_state(recommendations=history(3, since=T0 - 600)),
        want_replicas=3,
        want_reason=R.WITHIN_TOLERANCE,
    ),
    Case(
        "load-drop-waits-for-stabilization-window",
        obs={"desired": 4, "rate": 10.0},
        state=make_state(recommendations=history(4, since=T0 - 120)),
        want_replicas=4,
        want_reason=R.STABILIZING,
    ),
    Case(
        "first-decision-never-scales-in",
        obs={"desired": 4, "rate": 10.0},
        want_replicas=4,
        want_reason=R.STABILIZING,
    ),
    Case(
        "load-low-for-a-whole-window-scales-in-one-step",
        obs={"desired": 4, "rate": 10.0},
        state=make_state(recommendations=history(1, since=T0 - 400)),
        want_replicas=3,
        want_reason=R.LOAD_DECREASED,
        want_limited=R.SCALE_DOWN_LIMIT,
    ),
    Case(
        "scale-in-blocked-while-slo-violated",
        obs={"desired": 4, "rate": 10.0, "ttft": 1_500.0},
        state=make_state(recommendations=history(1, since=T0 - 400)),
        want_replicas=4,
        want_reason=R.SLO_VIOLATED,
    ),
    Case(
        "no-scale-in-right-after-a-scale-up",
        obs={"desired": 4, "rate": 10.0},
        state=make_state(
            recommendations=history(1, since=T0 - 400, until=T0 - 330),
            last_scale_time=T0 - 60,
            last_scale_direction=1,
        ),
        want_replicas=4,
        want_reason=R.REVERSAL_BLOCKED,
    ),
    Case(
        "pending-pods-block-further-scale-up",
        obs={
            "desired": 4,
            "ready": 2,
            "pending": 2,
            "rate": 200.0,
            "ttft": 5_000.0,
            "waiting": 50.0,
        },
        want_replicas=4,
        want_reason=R.PENDING,
        want_limited=R.PENDING,
    ),
    Case(
        "scale-up-step-capped",
        obs={"desired": 2, "rate": 300.0},
        want_replicas=6,
        want_reason=R.LOAD_INCREASED,
        want_limited=R.SCALE_UP_LIMIT,
    ),
    Case(
        "max-replicas-caps-and-says-so",
        obs={"desired": 6, "rate": 300.0},
        want_replicas=8,
        want_reason=R.LOAD_INCREASED,
        want_limited=R.TOO_MANY_REPLICAS,
    ),
    Case(
        "gpu-budget-caps-replicas",
        obs={"desired": 2, "rate": 100.0, "gpus_per_replica": 2},
        policy={"gpu_budget": 6},
        want_replicas=3,
        want_reason=R.LOAD_INCREASED,
        want_limited=R.GPU_BUDGET,
    ),
    Case(
        "min-replicas-floor-at-low-load",
        obs={"desired": 2, "rate": 1.0},
        policy={"min_replicas": 2},
        state=make_state(recommendations=history(1, since=T0 - 400)),
        want_replicas=2,
        want_reason=R.WITHIN_TOLERANCE,
        want_limited=R.TOO_FEW_REPLICAS,
    ),
    Case(
        "idle-service-scales-to-zero-after-window",
        obs={
            "desired": 1,
            "rate": 0.0,
            "running": 0.0,
            "e2e": None,
            "ttft": None,
            "state": MetricsState.NO_TRAFFIC,
        },
        policy={"min_replicas": 0, "scale_to_zero": True},
        state=make_state(recommendations=history(0, since=T0 - 400)),
        want_replicas=0,
        want_reason=R.SCALED_TO_ZERO_REASON,
    ),
    Case(
        "idle-service-keeps-min-one",
        obs={
            "desired": 2,
            "rate": 0.0,
            "running": 0.0,
            "e2e": None,
            "ttft": None,
            "state": MetricsState.NO_TRAFFIC,
        },
        state=make_state(recommendations=history(0, since=T0 - 400)),
        want_replicas=1,
        want_reason=R.NO_TRAFFIC,
        want_limited=R.TOO_FEW_REPLICAS,
    ),
    Case(
        "prometheus-down-holds-last-good",
        obs={"desired": 5, "state": MetricsState.UNAVAILABLE, "rate": None},
        state=make_state(last_good_replicas=5, last_good_limit=48),
        want_replicas=5,
        want_reason=R.METRICS_UNAVAILABLE,
        want_valid=False,
        want_limit=48,
    ),
    Case(
        "stale-metrics-never-scale-to-zero",
        obs={"desired": 3, "state": MetricsState.STALE},
        state=make_state(last_good_replicas=0),
        want_replicas=3,
        want_reason=R.METRICS_STALE,
        want_valid=False,
    ),
    Case(
        "series-vanished-holds",
        obs={"desired": 3, "state": MetricsState.EMPTY, "rate": None},
        want_replicas=3,
        want_reason=R.METRICS_EMPTY,
        want_valid=False,
    ),
    Case(
        "rate-missing-holds",
        obs={"desired": 3, "state": MetricsState.PARTIAL, "rate": None},
        want_replicas=3,
        want_reason=R.METRICS_PARTIAL,
        want_valid=False,
    ),
    Case(
        "new-service-without-pods-runs-minimum",
        obs={"desired": 0, "ready": 0, "state": MetricsState.EMPTY, "rate": None},
        policy={"min_replicas": 2},
        want_replicas=2,
        want_reason=R.WAITING_FOR_REPLICAS,
    ),
    Case(
        "burst-while-replicas-start-raises-live-limit",
        obs={
            "desired": 4,
            "ready": 2,
            "starting": 2,
            "rate": 40.0,
            "ttft": 2_500.0,
            "waiting": 30.0,
            "batch_limit": 32,
        },
        state=make_state(recommendations=history(4, since=T0 - 60)),
        want_replicas=4,
        want_reason=R.LIMIT_RAISED,
        want_limit=48,
    ),
    Case(
        "itl-over-target-lowers-live-limit",
        obs={"desired": 2, "rate": 30.0, "itl": 40.0},
        policy={"itl_target_ms": 30.0},
        state=make_state(recommendations=SETTLED),
        want_replicas=2,
        want_reason=R.LIMIT_LOWERED,
        want_limit=48,
    ),
    Case(
        "batching-off-never-moves-the-limit",
        obs={"desired": 2, "rate": 30.0, "itl": 40.0},
        policy={"itl_target_ms": 30.0, "batching_mode": "off"},
        state=make_state(recommendations=SETTLED),
        want_replicas=2,
        want_reason=R.STEADY,
        want_limit=64,
    ),
    Case(
        "restart-mode-ignores-a-small-limit-move",
        obs={"desired": 2, "rate": 30.0, "itl": 40.0},
        policy={"itl_target_ms": 30.0, "batching_mode": "restart"},
        state=make_state(recommendations=SETTLED),
        want_replicas=2,
        want_reason=R.STEADY,
        want_limit=64,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case) -> None:
    d = decide(make_obs(**case.obs), make_policy(**case.policy), case.state, T0)
    assert (d.replicas, d.reason, d.valid) == (
        case.want_replicas,
        case.want_reason,
        case.want_valid,
    ), d.message
    assert d.limited_reason == case.want_limited, d.limited_message
    assert d.batch_limit == case.want_limit
    assert d.message  # every decision explains itself
    if case.want_limited:
        assert d.limited_message


def test_invalid_decision_keeps_state_untouched() -> None:
    state = make_state(last_good_replicas=5, correction=1.4, recommendations=SETTLED)
    d = decide(
        make_obs(desired=5, state=MetricsState.UNAVAILABLE, rate=None), make_policy(), state, T0
    )
    assert d.state == state


def test_warming_replicas_do_not_teach_the_model() -> None:
    """A cold replica reads as a slow one: its samples must not lower the learnt speed."""
    slow = {"desired": 3, "rate": 40.0, "waiting": 20.0, "running": 180.0, "gen_rate": 4_000.0}
    warm = decide(make_obs(**slow), make_policy(), ControlState(), T0)
    cold = decide(make_obs(warming=1, **slow), make_policy(), ControlState(), T0)
    assert warm.state.speed < 0.9 and warm.state.speed_samples == 1
    assert cold.state.speed == 1.0 and cold.state.speed_samples == 0


def test_idle_replicas_do_not_teach_the_model() -> None:
    """Without a queue the observed throughput is the demand, not the capacity."""
    d = decide(
        make_obs(desired=3, rate=5.0, waiting=0.0, gen_rate=100.0),
        make_policy(),
        ControlState(),
        T0,
    )
    assert d.state.speed_samples == 0


def test_correction_is_frozen_while_capacity_is_starting() -> None:
    """During cold starts a latency-only rule keeps adding replicas; this one waits."""
    over = {"rate": 40.0, "e2e": 20_000.0}
    settled = make_state(recommendations=SETTLED)
    starting = decide(make_obs(desired=4, ready=2, starting=2, **over), make_policy(), settled, T0)
    steady = decide(make_obs(desired=2, **over), make_policy(), settled, T0)
    assert starting.state.correction == 1.0
    assert steady.state.correction > 1.0


def test_hardware_change_resets_learnt_speed() -> None:
    state = make_state(speed=0.5, speed_key="A100/bf16", speed_samples=9, recommendations=SETTLED)
    d = decide(make_obs(desired=2, rate=30.0), make_policy(), state, T0)
    assert d.state.speed == 1.0 and d.state.speed_key == "H200/bf16"


def test_infeasible_target_is_reported_and_not_chased() -> None:
    """A 600 ms e2e target for 200-token outputs cannot be met by any replica count."""
    d = decide(
        make_obs(desired=2, rate=30.0, e2e=4_000.0, ttft=100.0),
        make_policy(e2e_target_ms=600.0, ttft_target_ms=300.0),
        make_state(recommendations=SETTLED),
        T0,
    )
    assert d.limited_reason == R.TARGET_INFEASIBLE
    assert d.state.correction <= 1.0  # the e2e error does not inflate the replica need
    assert d.replicas == 2


def rates(values: list[float], step: float = 20.0) -> tuple[tuple[float, float], ...]:
    """Arrival-rate samples ending one step before T0."""
    n = len(values)
    return tuple((T0 - (n - i) * step, v) for i, v in enumerate(values))


def test_bursty_arrivals_keep_their_peak_planned() -> None:
    """Bursts rising faster than a cold start keep capacity for the peak (Azure code)."""
    bursty = [1, 1, 40, 38, 2, 1, 1, 42, 3, 1, 1, 1]
    d = decide(
        make_obs(desired=3, rate=2.0),
        make_policy(),
        make_state(rates=rates(bursty), recommendations=history(3, since=T0 - 600)),
        T0,
    )
    assert d.need is not None and d.need > 0.9 * 42 / PER_REPLICA  # planned for the peak
    assert d.replicas >= 2


def test_a_falling_ramp_is_not_held_up() -> None:
    """A smooth ramp down is not a burst: the plan follows the current rate."""
    ramp = [60 - 4 * i for i in range(12)]
    d = decide(
        make_obs(desired=3, rate=12.0),
        make_policy(),
        make_state(rates=rates(ramp), recommendations=history(3, since=T0 - 600)),
        T0,
    )
    assert d.need is not None and d.need < 1.0


def test_a_window_with_one_request_barely_moves_the_request_shape() -> None:
    state = make_state(
        prompt_tokens=500.0, output_tokens=200.0, recommendations=history(2, since=T0 - 600)
    )
    d = decide(
        make_obs(desired=2, rate=1 / 60, prompt=8000.0, output=10.0), make_policy(), state, T0
    )
    assert d.state.prompt_tokens is not None and d.state.prompt_tokens < 1000.0


def test_short_history_still_waits_a_whole_window_before_scale_in() -> None:
    """A restarted history (two minutes of low wishes) is not a whole scale-down window."""
    state = make_state(recommendations=history(1, since=T0 - 120))
    d = decide(make_obs(desired=4, rate=5.0), make_policy(), state, T0)
    assert (d.replicas, d.reason) == (4, R.STABILIZING)


def test_limit_does_not_chase_small_model_moves() -> None:
    """The ITL-guard batch drifting a little with the request shape leaves the limit alone."""
    pol = make_policy(itl_target_ms=30.0, max_batch=256)
    first = decide(
        make_obs(desired=2, rate=20.0, batch_limit=64, max_batch=256),
        pol,
        make_state(recommendations=SETTLED),
        T0,
    )
    moved = first.batch_limit
    again = decide(
        make_obs(desired=2, rate=20.0, batch_limit=moved, max_batch=256, prompt=560.0),
        pol,
        first.state,
        T0 + 20,
    )
    assert again.batch_limit == moved and again.limit_reason is None


def test_full_kv_cache_lowers_the_limit_from_where_it_is() -> None:
    """A burst on one replica fills its KV cache and vLLM preempts: admit fewer, from the
    limit in force (not from the model's batch)."""
    obs = make_obs(desired=1, rate=10.0, batch_limit=200, max_batch=256)
    full = replace(obs, signals=replace(obs.signals, kv_usage=0.99, preemptions_rate=2.0))
    d = decide(full, make_policy(max_batch=256), make_state(recommendations=SETTLED), T0)
    assert (d.batch_limit, d.limit_reason) == (150, R.LIMIT_LOWERED)
    assert "KV cache full" in d.limit_message


def test_no_raise_while_the_kv_cache_is_nearly_full() -> None:
    obs = make_obs(
        desired=4, ready=2, starting=2, rate=40.0, ttft=2_500.0, waiting=30.0, batch_limit=32
    )
    high = replace(obs, signals=replace(obs.signals, kv_usage=0.93))
    d = decide(high, make_policy(), make_state(recommendations=history(4, since=T0 - 60)), T0)
    assert d.batch_limit == 32 and d.limit_reason is None


def test_a_rising_load_is_planned_a_cold_start_ahead() -> None:
    """The replicas asked for now serve the load of a minute or two from now."""
    rising = [20 + 2 * i for i in range(6)]  # +0.1 req/s per second
    flat = [30.0] * 6
    kw = {"desired": 2, "rate": 30.0}
    st = {"recommendations": history(2, since=T0 - 600)}
    up = decide(make_obs(**kw), make_policy(), make_state(rates=rates(rising), **st), T0)
    level = decide(make_obs(**kw), make_policy(), make_state(rates=rates(flat), **st), T0)
    assert up.need is not None and level.need is not None
    # 0.1 req/s per second over a 60 s cold start plus a 60 s window: about 12 req/s more.
    assert up.need - level.need == pytest.approx(12 / PER_REPLICA, rel=0.25)


def test_a_short_cycle_still_scales_in_after_the_window() -> None:
    """With a 2 s cycle, 300 s of wishes are 150 decisions: the history keeps runs of
    equal wishes, so it spans the window and the scale-in comes when it should."""
    pol, state = make_policy(), ControlState()
    replicas, t, scaled_in_at = 4, T0, None
    while t < T0 + 400 and scaled_in_at is None:
        d = decide(make_obs(desired=replicas, rate=5.0, now=t), pol, state, t)
        state = d.state
        if d.replicas < replicas:
            scaled_in_at = t - T0
        replicas = d.replicas
        t += 2.0
    assert scaled_in_at is not None and 270 <= scaled_in_at <= 302
    assert len(state.recommendations) < 10


# --- edges of each rule ------------------------------------------------------------------------

POLICY_EDGES = make_policy()


def run_edges(obs: Observation, state: ControlState | None = None) -> Decision:
    return decide(obs, POLICY_EDGES, state or make_state(), T0)


def load_edges(d: Decision) -> tuple[float, float, float]:
    """(arrivals, burst, backlog) as the decision message states them."""
    m = re.search(r"load ([\d.]+) req/s \(\+([\d.]+) burst, \+([\d.]+) backlog\)", d.message)
    assert m, d.message
    return float(m[1]), float(m[2]), float(m[3])


def test_without_any_shape_the_defaults_are_planned_for() -> None:
    obs = make_obs()
    obs = replace(
        obs, signals=replace(obs.signals, prompt_tokens_rate=None, generation_tokens_rate=None)
    )
    d = run_edges(obs)
    assert (d.state.prompt_tokens, d.state.output_tokens) == (512.0, 128.0)
    assert "512+128 tokens" in d.message


@pytest.mark.parametrize(
    ("rate", "want"),
    [
        (10.0, 1000.0 + 0.5 * (500.0 - 1000.0)),  # 600 requests in the window: at most half way
        (0.5, 1000.0 + 0.3 * (500.0 - 1000.0)),  # 30 requests: 30% of the way
        (0.05, 1000.0 + 0.05 * (500.0 - 1000.0)),  # 3 requests: at least 5%
    ],
)
def test_request_shape_moves_by_how_many_requests_the_window_holds(
    rate: float, want: float
) -> None:
    d = run_edges(make_obs(rate=rate), make_state(prompt_tokens=1000.0, output_tokens=200.0))
    assert d.state.prompt_tokens == pytest.approx(want)


@pytest.mark.parametrize(
    ("dt", "arrivals"),
    [
        (15.0, 10.0 + 30.0 / 15.0),  # the queue grew by 30 in 15 s
        (1.0, 10.0 + 30.0),
        (
            2 * POLICY_EDGES.window_s,
            10.0 + 30.0 / (2 * POLICY_EDGES.window_s),
        ),  # still recent enough
        (2.5 * POLICY_EDGES.window_s, 10.0),  # too old to compare with
        (0.0, 10.0),  # same instant: no growth rate
    ],
    ids=["15s", "1s", "two-windows", "older", "same-time"],
)
def test_queue_growth_counts_as_arrivals(dt: float, arrivals: float) -> None:
    d = run_edges(
        make_obs(rate=10.0, waiting=30.0), make_state(last_waiting=0.0, last_time=T0 - dt)
    )
    got, _, backlog = load_edges(d)
    assert got == pytest.approx(arrivals, abs=0.005)
    assert backlog == pytest.approx(
        30.0 / (POLICY_EDGES.backlog_drain_s + POLICY_EDGES.cold_start_s), abs=0.005
    )


def test_queue_growth_needs_the_time_of_the_last_queue() -> None:
    d = run_edges(make_obs(rate=10.0, waiting=30.0), make_state(last_waiting=0.0))
    assert load_edges(d)[0] == pytest.approx(10.0)


def test_a_draining_queue_never_makes_arrivals_negative() -> None:
    d = run_edges(
        make_obs(rate=0.5, waiting=0.0), make_state(last_waiting=100.0, last_time=T0 - 10)
    )
    assert load_edges(d)[0] == 0.0


def test_requests_finishing_with_nothing_in_flight_still_need_replicas() -> None:
    d = run_edges(make_obs(desired=2, rate=10.0, waiting=0.0, running=0.0))
    assert d.need is not None and d.need > 0.3


def test_no_replicas_yet_counts_as_zero() -> None:
    d = run_edges(make_obs(desired=0, ready=0, rate=10.0))
    assert "replicas 0 -> " in d.message and d.replicas >= 1


@pytest.mark.parametrize(("starting", "pending"), [(1, 0), (0, 1)])
def test_replicas_on_their_way_are_waited_for(starting: int, pending: int) -> None:
    d = run_edges(
        make_obs(
            desired=2, ready=2, starting=starting, pending=pending, rate=2 * PER_REPLICA * 0.95
        )
    )
    assert d.replicas == 2
    assert d.reason == R.WAITING_FOR_REPLICAS


@pytest.mark.parametrize(
    ("correction", "e2e", "want"),
    [
        (2.9, 20_000.0, 3.0),  # twice the target: grows by sqrt(2), capped at 3
        (1.0, 40_000.0, 1.5),  # four times the target: at most 1.5x per cycle
        (1.0, 11_000.0, 1.1),  # just over: at least 1.1x
        (2.0, 9_000.0, 2.0),  # inside, not relaxed: kept
        (2.0, 4_000.0, 2.0 * 0.99),  # relaxed: decays towards 1
        (1.0, 4_000.0, math.sqrt(0.99)),  # below 1 the decay is slower
        (0.9, 4_000.0, 0.9),  # and stops at 0.9
    ],
)
def test_feedback_correction_steps(correction: float, e2e: float, want: float) -> None:
    d = run_edges(
        make_obs(desired=4, rate=5.0, e2e=e2e, ttft=300.0), make_state(correction=correction)
    )
    assert d.state.correction == pytest.approx(want)


def test_correction_is_kept_while_capacity_arrives() -> None:
    d = run_edges(make_obs(desired=4, ready=3, rate=5.0, e2e=20_000.0), make_state(correction=1.0))
    assert d.state.correction == 1.0


def test_correction_without_latency_is_kept() -> None:
    d = run_edges(make_obs(desired=4, rate=5.0, e2e=None, ttft=None), make_state(correction=2.0))
    assert d.state.correction == 2.0


def test_a_held_decision_carries_no_limits_need_or_error() -> None:
    obs = make_obs()
    obs = replace(obs, signals=replace(obs.signals, request_rate=None))
    d = run_edges(obs)
    assert not d.valid
    assert (
        d.limited_reason,
        d.limited_message,
        d.limit_reason,
        d.limit_message,
        d.need,
        d.slo_error,
    ) == (None, "", None, "", None, None)


def test_a_plain_decision_has_no_limit_message() -> None:
    d = run_edges(make_obs(desired=2, rate=2 * PER_REPLICA * 0.95))
    assert (d.limited_reason, d.limited_message) == (None, "")


def test_absurd_rates_need_a_bounded_number_of_replicas() -> None:
    d = run_edges(make_obs(rate=1e15))
    assert d.need == 1_000_000.0


@pytest.mark.parametrize(
    ("last", "appended"),
    [
        (T0 - 10.0, False),  # a sample less than a quarter window old: not stored again
        (T0 - POLICY_EDGES.window_s / 4, True),
        (T0 - 13.0, False),
    ],
)
def test_rates_are_stored_at_most_every_quarter_window(last: float, appended: bool) -> None:
    old = ((T0 - POLICY_EDGES.burst_lookback_s, 9.0), (last, 10.0))
    d = run_edges(make_obs(rate=10.0), make_state(rates=old))
    assert d.state.rates == ((*old, (T0, 10.0)) if appended else old)


def test_burst_headroom_from_rate_noise() -> None:
    """Rates jumping by 6 req/s: the upper quartile of the jumps over 1.627 deviations."""
    old = ((T0 - 200, 14.0), (T0 - 150, 20.0), (T0 - 100, 14.0), (T0 - 50, 20.0))
    d = run_edges(make_obs(rate=14.0), make_state(rates=old))
    assert load_edges(d)[1] == pytest.approx(6.0 / 1.627, abs=0.005)


def test_backlog_drains_over_at_least_a_second() -> None:
    policy = replace(POLICY_EDGES, backlog_drain_s=0.0, cold_start_s=0.0)
    d = decide(make_obs(rate=10.0, waiting=30.0), policy, make_state(), T0)
    assert load_edges(d)[2] == pytest.approx(30.0)


def test_a_queue_adds_to_the_need() -> None:
    calm = run_edges(make_obs(rate=10.0, waiting=0.0))
    queued = run_edges(make_obs(rate=10.0, waiting=300.0))
    assert calm.need is not None and queued.need is not None and queued.need > calm.need


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({"last_waiting": 5.0, "last_time": T0 - 15}, math.sqrt(2.0)),  # steady queue: corrected
        ({"last_waiting": 10.0, "last_time": T0 - 15}, 1.0),  # draining queue: wait
    ],
)
def test_correction_waits_for_a_draining_queue(fields: dict[str, float], want: float) -> None:
    d = run_edges(
        make_obs(desired=4, rate=5.0, e2e=20_000.0, waiting=5.0),
        make_state(correction=1.0, **fields),
    )
    assert d.state.correction == pytest.approx(want)


def test_correction_waits_for_warming_replicas() -> None:
    d = run_edges(
        make_obs(desired=4, warming=1, rate=5.0, e2e=20_000.0), make_state(correction=1.0)
    )
    assert d.state.correction == 1.0


def test_one_replica_inside_the_dead_band_stays_one() -> None:
    d = run_edges(make_obs(desired=1, rate=1.05 * PER_REPLICA))
    assert d.replicas == 1


def test_from_zero_a_small_load_gets_one_replica() -> None:
    d = decide(
        make_obs(desired=0, ready=0, rate=0.5 * PER_REPLICA),
        replace(POLICY_EDGES, min_replicas=0),
        make_state(),
        T0,
    )
    assert d.replicas == 1


def test_scale_in_keeps_the_tolerance_to_spare() -> None:
    """A need of 2.8 fits in 3 replicas but not with 10% to spare: four stay."""
    d = run_edges(
        make_obs(desired=4, rate=2.8 * PER_REPLICA),
        make_state(recommendations=tuple((T0 - 400 + 15 * i, 1) for i in range(27))),
    )
    assert d.replicas == 4


# --- boundaries, one table per rule ------------------------------------------------------------

POLICY_BOUNDARY = make_policy()
COVERED = history(1, since=T0 - 400)  # wishes of one replica for longer than the window
T1 = T0 + 7.0


def at(
    need: float,
    cur: int,
    *,
    policy: ControlPolicy = POLICY_BOUNDARY,
    state: ControlState | None = None,
    **obs: Any,
) -> Decision:
    """A decision whose model need is exactly ``need`` replicas (no latency, no queue)."""
    obs.setdefault("e2e", None)
    obs.setdefault("ttft", None)
    d = decide(
        make_obs(desired=cur, rate=need * PER_REPLICA, **obs), policy, state or make_state(), T0
    )
    assert d.need == pytest.approx(need, rel=1e-12), d.message
    assert d.valid
    return d


def with_signals(obs: Observation, **fields: Any) -> Observation:
    return replace(obs, signals=replace(obs.signals, **fields))


# --- messages (shown in status and Events) ---------------------------------------------------
def test_the_decision_message_states_the_whole_computation() -> None:
    d = decide(make_obs(desired=2, rate=10.0), POLICY_BOUNDARY, make_state(), T0)
    assert d.message == (
        "load 10.00 req/s (+0.00 burst, +0.00 backlog) x0.99 correction at 22.45 req/s per "
        "replica (batch 64, 500+200 tokens, speed 1.00) needs 0.44 replicas; e2e 4000/10000 ms, "
        "TTFT 300/1000 ms; replicas 2 -> 2, limit 64 -> 64"
    )


@pytest.mark.parametrize(
    ("signals", "itl_target", "text"),
    [
        ({"itl": 12.34}, 30.0, "e2e 4000/10000 ms, TTFT 300/1000 ms, ITL 12.3/30 ms"),
        ({"itl": 12.34}, None, "e2e 4000/10000 ms, TTFT 300/1000 ms, ITL 12.3 ms"),
        ({"e2e": None, "ttft": None}, None, "no latency samples"),
        ({"e2e": None}, None, "TTFT 300/1000 ms"),
    ],
)
def test_latency_text(signals: dict[str, Any], itl_target: float | None, text: str) -> None:
    d = decide(
        make_obs(desired=2, rate=10.0, **signals),
        replace(POLICY_BOUNDARY, itl_target_ms=itl_target),
        make_state(),
        T0,
    )
    assert f"; {text}; replicas" in d.message


def test_an_infeasible_target_says_by_how_much() -> None:
    d = decide(
        make_obs(desired=2, rate=30.0, e2e=4_000.0, ttft=100.0),
        make_policy(e2e_target_ms=600.0, ttft_target_ms=300.0),
        make_state(),
        T0,
    )
    assert d.limited_message == (
        "inter-token latency of 5.2 ms at batch 8 exceeds the 0.5 ms per token the targets "
        "leave for 200-token outputs; sizing for throughput"
    )


def test_a_small_rate_is_planned_as_it_is() -> None:
    d = decide(make_obs(desired=1, rate=0.5, waiting=None), POLICY_BOUNDARY, make_state(), T0)
    assert d.message.startswith("load 0.50 req/s (+0.00 burst, +0.00 backlog)")


# --- validity, held decisions and bring-up ---------------------------------------------------
@pytest.mark.parametrize(
    ("state", "reason", "text"),
    [
        (MetricsState.UNAVAILABLE, R.METRICS_UNAVAILABLE, "Prometheus could not be queried"),
        (MetricsState.STALE, R.METRICS_STALE, "newest sample is too old"),
        (MetricsState.EMPTY, R.METRICS_EMPTY, "no series for this service"),
        (MetricsState.PARTIAL, R.METRICS_PARTIAL, "request rate missing: the load is unknown"),
    ],
)
def test_held_decisions_say_why_and_what_they_hold(
    state: MetricsState, reason: str, text: str
) -> None:
    obs = make_obs(desired=5, state=state, rate=None)
    d = decide(obs, POLICY_BOUNDARY, make_state(last_good_replicas=5, last_good_limit=48), T0)
    assert (d.valid, d.reason, d.replicas, d.batch_limit) == (False, reason, 5, 48)
    assert d.message == f"{text}; holding 5 replica(s) and batch limit 48"
    told = decide(with_signals(obs, message="scrape failed"), POLICY_BOUNDARY, make_state(), T0)
    assert told.message == "scrape failed; holding 5 replica(s) and batch limit 64"


def test_an_infinite_rate_is_held() -> None:
    d = decide(make_obs(desired=3, rate=math.inf), POLICY_BOUNDARY, make_state(), T0)
    assert (d.valid, d.reason, d.replicas) == (False, R.METRICS_PARTIAL, 3)


@pytest.mark.parametrize(
    ("last_good", "desired", "lo", "hi", "held"),
    [
        (None, 3, 1, 8, 3),  # nothing held yet: the current replicas
        (1, 3, 1, 8, 1),  # the last good decision
        (0, 1, 0, 8, 1),  # never zero while replicas run
        (0, 0, 0, 8, 0),
        (20, 3, 1, 8, 8),  # inside the bounds
        (1, 3, 2, 8, 2),
    ],
)
def test_a_hold_keeps_the_last_good_replicas(
    last_good: int | None, desired: int, lo: int, hi: int, held: int
) -> None:
    d = decide(
        make_obs(desired=desired, state=MetricsState.STALE),
        replace(POLICY_BOUNDARY, min_replicas=lo, max_replicas=hi),
        make_state(last_good_replicas=last_good),
        T0,
    )
    assert (d.valid, d.replicas) == (False, held)


@pytest.mark.parametrize(
    ("mode", "last_good", "limit"),
    [
        ("live", None, 100),  # nothing to hold: the limit in force
        ("live", 100, 64),  # the last good one, inside the range
        ("live", 2, 8),
        ("live", 32, 32),
        ("off", 32, 100),  # batching off: the limit is never touched
    ],
)
def test_a_hold_keeps_the_last_good_limit(mode: str, last_good: int | None, limit: int) -> None:
    d = decide(
        make_obs(desired=2, state=MetricsState.STALE, batch_limit=100),
        replace(POLICY_BOUNDARY, batching_mode=mode),
        make_state(last_good_limit=last_good),
        T0,
    )
    assert d.batch_limit == limit


@pytest.mark.parametrize(
    ("state", "ready", "bring_up"),
    [
        (MetricsState.EMPTY, 0, True),
        (MetricsState.EMPTY, 1, False),  # series vanished while a replica serves: hold
        (MetricsState.STALE, 0, False),
    ],
)
def test_bring_up_only_without_series_and_replicas(
    state: MetricsState, ready: int, bring_up: bool
) -> None:
    d = decide(
        make_obs(desired=2, ready=ready, state=state, rate=None),
        POLICY_BOUNDARY,
        make_state(last_good_replicas=2),
        T0,
    )
    assert d.valid is bring_up
    assert d.reason == (
        R.WAITING_FOR_REPLICAS
        if bring_up
        else (R.METRICS_EMPTY if state == MetricsState.EMPTY else R.METRICS_STALE)
    )


@pytest.mark.parametrize(("desired", "lo", "want"), [(3, 1, 3), (20, 1, 8), (0, 2, 2), (1, 0, 1)])
def test_bring_up_runs_the_minimum(desired: int, lo: int, want: int) -> None:
    d = decide(
        make_obs(desired=desired, ready=0, state=MetricsState.EMPTY, rate=None, batch_limit=100),
        replace(POLICY_BOUNDARY, min_replicas=lo),
        make_state(),
        T1,
    )
    assert (d.valid, d.replicas, d.reason, d.batch_limit) == (
        True,
        want,
        R.WAITING_FOR_REPLICAS,
        64,
    )
    assert d.message == f"no replica serves yet; running {want} until metrics arrive"
    assert (d.state.last_good_replicas, d.state.last_good_limit, d.state.last_good_time) == (
        want,
        64,
        T1,
    )


def test_bring_up_at_zero_stays_at_zero() -> None:
    d = decide(
        make_obs(desired=0, ready=0, state=MetricsState.EMPTY, rate=None, batch_limit=100),
        replace(POLICY_BOUNDARY, min_replicas=0, batching_mode="off"),
        make_state(),
        T0,
    )
    assert (d.valid, d.replicas, d.reason, d.batch_limit) == (True, 0, R.SCALED_TO_ZERO_REASON, 100)
    assert d.message == "no replicas and no series: scaled to zero"
    assert d.state == make_state()


@pytest.mark.parametrize(
    ("min_batch", "max_batch", "limit", "want"),
    [
        (1, 1, 5, 1),
        (1, 64, 1, 1),
        (8, 64, 100, 64),
        (8, 64, 3, 8),
        (8, 1, 5, 1),
    ],
)
def test_limits_are_kept_in_range(min_batch: int, max_batch: int, limit: int, want: int) -> None:
    obs = make_obs(max_batch=max_batch)
    pol = replace(POLICY_BOUNDARY, min_batch=min_batch, max_batch=max_batch)
    assert law._in_range(limit, obs, pol) == want


def test_a_limit_out_of_a_one_sequence_range_comes_back() -> None:
    d = decide(
        make_obs(desired=2, rate=1.0, batch_limit=3, max_batch=1),
        replace(POLICY_BOUNDARY, min_batch=1, max_batch=1),
        make_state(),
        T0,
    )
    assert d.batch_limit == 1


def test_a_one_sequence_limit_stays() -> None:
    d = decide(
        make_obs(desired=2, rate=1.0, batch_limit=1, max_batch=64),
        replace(POLICY_BOUNDARY, min_batch=1, max_batch=1),
        make_state(),
        T0,
    )
    assert d.batch_limit == 1


# --- request shape -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rate", "lam", "want"),
    [
        (None, 1.0, None),
        (100.0, 0.0, None),
        (100.0, 0.5, 200.0),
        (math.inf, 1.0, None),
        (0.0, 1.0, None),
        (0.5, 1.0, 0.5),
        (1e7, 1.0, 1e7),
        (2e7, 1.0, None),
        (100.0, 4.0, 25.0),
    ],
)
def test_tokens_per_request(rate: float | None, lam: float, want: float | None) -> None:
    assert law._per_request(rate, lam) == want


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        (None, 5.0, 5.0),
        (4.0, None, 4.0),
        (None, None, None),
        (4.0, 6.0, 4.5),
    ],
)
def test_smoothing(old: float | None, new: float | None, want: float | None) -> None:
    assert law._smooth(old, new, 0.25) == want


# --- speed learning ----------------------------------------------------------------------------
def learn(
    *,
    ready: int = 2,
    warming: int = 0,
    starting: int = 0,
    waiting: float | None = 4.0,
    running: float | None = 64.0,
    gen: float | None = 2_000.0,
    prompt: float | None = 0.0,
    limit: int = 64,
    speed: float = 1.0,
) -> tuple[float, int]:
    obs = make_obs(
        desired=ready,
        ready=ready,
        warming=warming,
        starting=starting,
        batch_limit=limit,
        waiting=waiting,
        running=running,
    )
    obs = with_signals(obs, generation_tokens_rate=gen, prompt_tokens_rate=prompt)
    return law._learn_speed(obs, DEFAULT_STEP_TIMES, 500.0, speed, 3)


def expected_speed(
    serving: int, running: float, gen: float, prompt: float, speed: float = 1.0
) -> float:
    st = DEFAULT_STEP_TIMES
    ratio = (
        gen / serving / predicted_tokens_per_s(st, running / serving)
        + prompt / serving * st.prefill_ms_per_token / 1000.0
    )
    return 0.7 * speed + 0.3 * max(0.33, min(3.0, ratio))


def test_speed_from_saturated_replicas() -> None:
    speed, samples = learn(ready=2, running=100.0, gen=3_000.0, prompt=20_000.0, speed=1.2)
    assert speed == pytest.approx(expected_speed(2, 100.0, 3_000.0, 20_000.0, 1.2), rel=1e-12)
    assert samples == 4


def test_speed_without_prompt_rate() -> None:
    speed, _ = learn(ready=1, running=40.0, gen=6_000.0, prompt=None)
    assert speed == pytest.approx(expected_speed(1, 40.0, 6_000.0, 0.0), rel=1e-12)
    assert 0.7 + 0.3 * 0.33 < speed < 0.7 + 0.3 * 3.0  # not clamped


@pytest.mark.parametrize(("gen", "want"), [(1e9, 0.7 + 0.3 * 3.0), (1.0, 0.7 + 0.3 * 0.33)])
def test_speed_ratio_is_clamped(gen: float, want: float) -> None:
    assert learn(gen=gen)[0] == pytest.approx(want)


@pytest.mark.parametrize(
    ("kw", "learns"),
    [
        ({}, True),
        ({"warming": 1}, False),
        ({"starting": 1}, False),
        ({"ready": 0}, False),
        ({"ready": 1, "running": 32.0}, True),  # one warm replica is enough
        ({"waiting": None}, False),
        ({"waiting": 0.5}, False),
        ({"waiting": 1.0}, True),
        ({"waiting": 1.5}, True),
        ({"running": 0.0}, False),
        ({"gen": 0.0}, False),
        ({"running": 64.0, "limit": 64}, True),  # exactly half the limit per replica
        ({"running": 62.0, "limit": 64}, False),
        ({"ready": 1, "running": 0.75, "limit": 0}, True),  # a limit of 0 counts as 1
    ],
)
def test_speed_is_learnt_only_from_warm_saturated_replicas(
    kw: dict[str, Any], learns: bool
) -> None:
    speed, samples = learn(**kw)
    assert (samples == 4) is learns
    assert (speed != 1.0) is learns


# --- latency ratios and correction ---------------------------------------------------------------
def cap(feasible: bool = True) -> Capacity:
    return Capacity(batch=32, rate=10.0, itl_ms=20.0, feasible=feasible, best_itl_ms=10.0)


def sig(**kw: Any) -> Any:
    return make_obs(**kw).signals


@pytest.mark.parametrize(
    ("signals", "policy", "feasible", "floor", "want"),
    [
        (
            {"ttft": 500.0, "e2e": 4_000.0, "itl": 24.0},
            {"itl_target_ms": 30.0},
            True,
            10.0,
            {"ttft": 0.5, "e2e": 0.4, "itl": 0.8},
        ),
        ({"ttft": 500.0, "e2e": 4_000.0, "itl": 24.0}, {}, True, 10.0, {"ttft": 0.5, "e2e": 0.4}),
        (
            {"ttft": 500.0, "e2e": 4_000.0, "itl": 24.0},
            {"itl_target_ms": 30.0},
            False,
            10.0,
            {"ttft": 0.5},
        ),
        (
            {"ttft": 500.0, "e2e": None, "itl": None},
            {"itl_target_ms": 30.0},
            True,
            800.0,
            {"ttft": 0.5},
        ),  # one step at the margin: still reachable
        ({"ttft": 500.0, "e2e": None}, {}, True, 800.1, {}),  # beyond any replica count
        ({"ttft": None, "e2e": None}, {}, True, 10.0, {}),
    ],
)
def test_latency_ratios(
    signals: dict[str, Any],
    policy: dict[str, Any],
    feasible: bool,
    floor: float,
    want: dict[str, float],
) -> None:
    got = law._ratios(sig(**signals), replace(POLICY_BOUNDARY, **policy), cap(feasible), floor)
    assert got == pytest.approx(want)


def test_ttft_counts_when_one_prefill_step_fits_its_target() -> None:
    """One 500-token step takes 16.11 ms, two sequences 16.16 ms: a 20.175 ms target
    (16.14 ms with the margin) is reachable."""
    d = decide(
        make_obs(desired=2, rate=1.0, e2e=None, ttft=10.0),
        replace(POLICY_BOUNDARY, ttft_target_ms=20.175),
        make_state(),
        T0,
    )
    assert d.slo_error == pytest.approx(10.0 / 20.175)


@pytest.mark.parametrize(
    ("correction", "err", "settling", "want"),
    [
        (1.0, None, False, 1.0),
        (1.0, 1.0, False, 1.0),  # on target: kept
        (1.0, 1.5, False, math.sqrt(1.5)),
        (1.0, 1.21, False, 1.1),
        (1.0, 9.0, False, 1.5),  # at most 1.5x per cycle
        (2.0, 4.0, True, 2.0),  # settling: kept
        (1.0, 0.7, False, 1.0),  # not relaxed yet
        (1.0, 0.69, False, math.sqrt(0.99)),
        (1.5, 0.5, False, 1.5 * 0.99),
        (1.005, 0.5, False, 1.0),
        (0.95, 0.5, False, 0.95 * math.sqrt(0.99)),
        (0.9, 0.5, False, 0.9),
        (2.5, 4.0, False, 3.0),
    ],
)
def test_correction(correction: float, err: float | None, settling: bool, want: float) -> None:
    assert law._correct(correction, err, settling) == pytest.approx(want)


def test_correction_waits_while_the_model_already_wants_more() -> None:
    """With the correction at 2 the model wants 6 of the 4 replicas: the miss is explained."""
    d = decide(
        make_obs(desired=4, rate=3.0 * PER_REPLICA, e2e=20_000.0, ttft=None),
        POLICY_BOUNDARY,
        make_state(correction=2.0),
        T0,
    )
    assert d.state.correction == 2.0


def test_correction_grows_when_the_model_says_the_replicas_suffice() -> None:
    d = decide(
        make_obs(desired=4, rate=4.0 * PER_REPLICA, e2e=20_000.0, ttft=None),
        POLICY_BOUNDARY,
        make_state(),
        T0,
    )
    assert d.state.correction == pytest.approx(math.sqrt(2.0))


def test_idle_needs_nothing() -> None:
    d = decide(
        make_obs(desired=2, rate=0.0, running=None, waiting=None, e2e=None, ttft=None),
        POLICY_BOUNDARY,
        make_state(),
        T0,
    )
    assert d.need == 0.0
    assert d.reason == R.STABILIZING


def test_idle_with_a_queue_is_not_idle() -> None:
    d = decide(
        make_obs(desired=2, rate=0.0, running=0.0, waiting=3.0, e2e=None, ttft=None),
        POLICY_BOUNDARY,
        make_state(),
        T0,
    )
    assert d.need is not None and d.need > 0


# --- dead band -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("need", "cur", "want"),
    [
        (2.0, 2, 2),
        (2.2, 2, 2),  # at the tolerance: inside
        (2.21, 2, 3),
        (3.0, 2, 3),
        (2.0 + 1.5e-9, 1, 3),  # a hair above two replicas is three
        (2.0, 1, 2),
        (0.5, 0, 1),
        (5.0, 4, 5),
    ],
)
def test_dead_band_up(need: float, cur: int, want: int) -> None:
    assert at(need, cur).replicas == want


def test_exactly_at_the_tolerance_stays() -> None:
    need = 1.37
    d = at(need, 1, policy=replace(POLICY_BOUNDARY, tolerance=need - 1.0))
    assert d.replicas == 1


@pytest.mark.parametrize(
    ("need", "want"),
    [
        (2.5, 3),  # 2.75 with the tolerance: three
        (2.72, 3),
        (2.73, 4),  # 3.003: four stay
        (1.0, 3),  # one step at a time
    ],
)
def test_dead_band_down(need: float, want: int) -> None:
    d = at(need, 4, state=make_state(recommendations=COVERED))
    assert d.replicas == want


def test_inside_the_band_at_many_replicas_nothing_moves() -> None:
    """9.9 of 10 replicas: 10.89 with the tolerance, yet inside the band (9.9 <= 11)."""
    d = at(
        9.9,
        10,
        policy=replace(POLICY_BOUNDARY, max_replicas=16),
        state=make_state(recommendations=history(10, since=T0 - 400)),
    )
    assert (d.replicas, d.reason) == (10, R.STEADY)


def test_scale_in_by_exactly_one_step_is_not_limited() -> None:
    d = at(2.5, 4, state=make_state(recommendations=COVERED))
    assert (d.replicas, d.limited_reason, d.reason) == (3, None, R.LOAD_DECREASED)


def test_scale_in_beyond_the_step_says_so() -> None:
    d = at(0.5, 4, state=make_state(recommendations=COVERED))
    assert (d.replicas, d.limited_reason) == (3, R.SCALE_DOWN_LIMIT)
    assert d.limited_message == "wanted 1 replicas, at most 1 removed per decision"


def test_scale_out_by_exactly_the_step_is_not_limited() -> None:
    d = at(6.0, 2)
    assert (d.replicas, d.limited_reason) == (6, None)


def test_scale_out_beyond_the_step_says_so() -> None:
    d = at(7.5, 2)
    assert (d.replicas, d.limited_reason) == (6, R.SCALE_UP_LIMIT)
    assert d.limited_message == "wanted 8 replicas, at most 4 added per decision"


# --- SLO hold ----------------------------------------------------------------------------------
def test_on_target_the_scale_in_goes_ahead() -> None:
    d = at(1.0, 4, e2e=10_000.0, state=make_state(recommendations=COVERED))
    assert (d.replicas, d.reason) == (3, R.LOAD_DECREASED)


def test_over_target_without_a_scale_in_is_not_a_hold() -> None:
    d = decide(
        make_obs(desired=2, rate=2.0 * PER_REPLICA, e2e=12_000.0, ttft=None),
        POLICY_BOUNDARY,
        make_state(recommendations=history(2, since=T0 - 400)),
        T0,
    )
    assert d.replicas == 2
    assert d.reason == R.WITHIN_TOLERANCE  # 2.2 after the correction: inside the band


# --- stabilization windows ---------------------------------------------------------------------
def test_a_wish_exactly_a_window_old_still_counts_down() -> None:
    state = make_state(recommendations=((T0 - 300.0, 4),), history_since=T0 - 400)
    d = at(1.0, 4, state=state)
    assert (d.replicas, d.reason) == (4, R.STABILIZING)
    assert d.state.recommendations == ((T0 - 300.0, 4), (T0, 2))


def test_a_wish_older_than_the_window_is_dropped() -> None:
    state = make_state(recommendations=((T0 - 300.5, 4),), history_since=T0 - 400)
    d = at(1.0, 4, state=state)
    assert d.replicas == 3
    assert d.state.recommendations == ((T0, 2),)


def test_a_wish_exactly_an_up_window_old_still_counts_up() -> None:
    pol = replace(POLICY_BOUNDARY, scale_up_stabilization_s=60.0)
    state = make_state(recommendations=((T0 - 60.0, 2),), history_since=T0 - 400)
    assert at(4.5, 2, policy=pol, state=state).replicas == 2
    later = make_state(recommendations=((T0 - 60.5, 2),), history_since=T0 - 400)
    assert at(4.5, 2, policy=pol, state=later).replicas == 5


def test_equal_wishes_are_kept_once_with_their_last_time() -> None:
    recs = ((T0 - 150.0, 3), (T0 - 100.0, 2), (T0 - 50.0, 3))
    d = at(2.5, 3, state=make_state(recommendations=recs, history_since=T0 - 400))
    assert d.state.recommendations == ((T0 - 150.0, 3), (T0 - 100.0, 2), (T0, 3))


def test_a_new_wish_is_appended() -> None:
    recs = ((T0 - 150.0, 3), (T0 - 100.0, 2))
    d = at(2.5, 3, state=make_state(recommendations=recs, history_since=T0 - 400))
    assert d.state.recommendations == (*recs, (T0, 3))


def test_the_wish_history_is_bounded() -> None:
    recs = tuple((T0 - 200.0 + i, i % 2 + 5) for i in range(128))
    d = at(2.5, 3, state=make_state(recommendations=recs, history_since=T0 - 400))
    assert d.state.recommendations == (*recs[1:], (T0, 3))


@pytest.mark.parametrize(
    ("recs", "since", "want"),
    [
        (((T0 - 400.0, 1), (T0 - 200.0, 1)), None, T0 - 400.0),  # state before historySince
        (((T0 - 400.0, 1),), T0 - 100.0, T0 - 100.0),
        ((), T0 - 1000.0, T0),  # history lost: starts now
        ((), None, T0),
    ],
)
def test_history_start(
    recs: tuple[tuple[float, int], ...], since: float | None, want: float
) -> None:
    d = at(2.0, 2, state=make_state(recommendations=recs, history_since=since))
    assert d.state.history_since == want


@pytest.mark.parametrize(("since", "want"), [(T0 - 270.0, 3), (T0 - 269.0, 4)])
def test_history_must_span_most_of_the_window(since: float, want: int) -> None:
    recs = history(1, since=since)
    d = at(1.0, 4, state=make_state(recommendations=recs, history_since=since))
    assert d.replicas == want


# --- reversal block ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("direction", "ago", "want"),
    [
        (1, 299.0, 4),  # down right after up: blocked
        (1, 300.0, 3),  # a whole window later: allowed
        (0, 10.0, 3),
        (-1, 10.0, 3),
    ],
)
def test_no_scale_in_soon_after_a_scale_out(direction: int, ago: float, want: int) -> None:
    state = make_state(
        recommendations=COVERED, last_scale_time=T0 - ago, last_scale_direction=direction
    )
    d = at(1.0, 4, state=state)
    assert d.replicas == want
    assert (d.reason == R.REVERSAL_BLOCKED) is (want == 4)


UP_WINDOW = replace(POLICY_BOUNDARY, scale_up_stabilization_s=120.0)


@pytest.mark.parametrize(
    ("direction", "ago", "want"),
    [
        (-1, 119.0, 2),
        (-1, 120.0, 3),
        (0, 10.0, 3),
        (1, 10.0, 3),
    ],
)
def test_no_scale_out_soon_after_a_scale_in(direction: int, ago: float, want: int) -> None:
    state = make_state(last_scale_time=T0 - ago, last_scale_direction=direction)
    d = at(3.0, 2, policy=UP_WINDOW, state=state)
    assert d.replicas == want
    assert (d.reason == R.REVERSAL_BLOCKED) is (want == 2)


@pytest.mark.parametrize("direction", [1, -1])
def test_staying_put_is_no_reversal(direction: int) -> None:
    state = make_state(
        recommendations=history(2, since=T0 - 400),
        last_scale_time=T0 - 10,
        last_scale_direction=direction,
    )
    d = at(2.0, 2, policy=UP_WINDOW, state=state)
    assert (d.replicas, d.reason) == (2, R.STEADY)
    assert (d.state.last_scale_time, d.state.last_scale_direction) == (T0 - 10, direction)


@pytest.mark.parametrize(("need", "cur", "direction"), [(3.0, 2, 1), (1.0, 4, -1)])
def test_a_move_is_remembered(need: float, cur: int, direction: int) -> None:
    d = at(need, cur, state=make_state(recommendations=COVERED))
    assert (d.state.last_scale_time, d.state.last_scale_direction) == (T0, direction)


def test_staying_put_from_a_fresh_state_remembers_no_move() -> None:
    d = at(2.0, 2)
    assert (d.state.last_scale_time, d.state.last_scale_direction) == (None, 0)


# --- pending pods ------------------------------------------------------------------------------
def test_one_pending_pod_blocks_a_scale_out() -> None:
    d = at(4.0, 2, ready=1, pending=1)
    assert (d.replicas, d.reason, d.limited_reason) == (2, R.PENDING, R.PENDING)
    assert d.limited_message == (
        "1 pod(s) Pending for lack of GPUs; no further scale-up (wanted 4) until they schedule"
    )


def test_pending_pods_do_not_report_a_limit_when_nothing_is_wanted() -> None:
    d = at(2.0, 2, ready=1, pending=1)
    assert (d.replicas, d.limited_reason, d.reason) == (2, None, R.WAITING_FOR_REPLICAS)


def test_a_starting_and_a_pending_pod_are_on_their_way() -> None:
    d = at(2.0, 2, starting=1, pending=1)
    assert d.reason == R.WAITING_FOR_REPLICAS


# --- bounds and budget --------------------------------------------------------------------------
def test_at_the_minimum_with_a_need_at_the_minimum_nothing_is_reported() -> None:
    d = at(2.0, 2, policy=replace(POLICY_BOUNDARY, min_replicas=2))
    assert (d.replicas, d.limited_reason) == (2, None)


def test_below_the_minimum_is_reported() -> None:
    d = at(
        0.5,
        2,
        policy=replace(POLICY_BOUNDARY, min_replicas=2),
        state=make_state(recommendations=COVERED),
    )
    assert (d.replicas, d.limited_reason) == (2, R.TOO_FEW_REPLICAS)
    assert d.limited_message == "the load needs 1; minReplicas is 2"


def test_at_the_maximum_with_a_need_at_the_maximum_nothing_is_reported() -> None:
    d = at(8.0, 8)
    assert (d.replicas, d.limited_reason) == (8, None)


def test_the_maximum_outranks_a_step_that_lands_on_it() -> None:
    d = at(11.5, 4)
    assert (d.replicas, d.limited_reason) == (8, R.TOO_MANY_REPLICAS)
    assert d.limited_message == "the load needs 12; maxReplicas is 8"


@pytest.mark.parametrize(
    ("budget", "gpr", "need", "cur", "want", "limited"),
    [
        (6, 2, 5.0, 3, 3, R.GPU_BUDGET),  # the budget lands where the replicas are
        (6, 2, 3.0, 3, 3, None),  # the load fits the budget exactly
        (3, 1, 5.0, 2, 3, R.GPU_BUDGET),
        (6, 4, 3.0, 1, 1, R.GPU_BUDGET),
        (0, 1, 2.0, 2, 0, R.GPU_BUDGET),
        (20, 1, 3.0, 2, 3, None),
    ],
)
def test_gpu_budget(
    budget: int, gpr: int, need: float, cur: int, want: int, limited: str | None
) -> None:
    d = at(
        need,
        cur,
        policy=replace(POLICY_BOUNDARY, gpu_budget=budget, min_replicas=0),
        gpus_per_replica=gpr,
    )
    assert (d.replicas, d.limited_reason) == (want, limited)
    assert type(d.replicas) is int


def test_gpu_budget_message() -> None:
    d = at(5.0, 3, policy=replace(POLICY_BOUNDARY, gpu_budget=6), gpus_per_replica=2)
    assert d.limited_message == "gpuBudget 6 allows 3 replicas of 2 GPU(s); the load needs 5"


# --- limit history -----------------------------------------------------------------------------
def test_an_unchanged_limit_is_not_recorded() -> None:
    old = ((T0 - 100.0, 48),)
    d = at(2.0, 2, state=make_state(limits=old))
    assert d.state.limits == old


def test_limit_changes_are_recorded_and_bounded() -> None:
    old = tuple((T0 - 1000.0 + i, 40 + i) for i in range(10))
    d = at(2.0, 2, batch_limit=32, state=make_state(limits=old))
    assert d.batch_limit == 64
    assert d.state.limits == (*old[1:], (T0, 64))


# --- burst statistics ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("points", "want"),
    [
        ([], 0.0),
        ([(0.0, 1.0), (1.0, 3.0)], 0.0),  # two points: no trend
        ([(0.0, 1.0), (1.0, 3.0), (3.0, 7.0)], 2.0),
        ([(0.0, 1.0), (0.1, 1.2), (0.2, 1.4)], 2.0),  # a short span still has a slope
        ([(5.0, 1.0), (5.0, 3.0), (5.0, 7.0)], 0.0),  # one instant: no slope
        ([(T0, 10.0), (T0 + 10.0, 8.0), (T0 + 30.0, 4.0), (T0 + 40.0, 2.0)], -0.2),
    ],
)
def test_slope(points: list[tuple[float, float]], want: float) -> None:
    assert law._slope(points) == pytest.approx(want)


@pytest.mark.parametrize(
    ("xs", "want"),
    [
        ([], 0.0),
        ([5.0, 9.0, 1.0], 0.0),  # too few to tell
        ([0.0, 1.0, 3.0, 6.0], 3.0 / 1.627),  # jumps 1, 2, 3: the upper one
        ([10.0, 11.0, 13.0, 16.0, 20.0], 4.0 / 1.627),  # jumps 1..4: index 3
        ([10.0, 9.0, 7.0, 4.0, 0.0, 5.0, 11.0, 18.0, 26.0], 7.0 / 1.627),
    ],
)
def test_noise(xs: list[float], want: float) -> None:
    assert law._noise(xs) == pytest.approx(want)


@pytest.mark.parametrize(
    ("rates", "horizon", "want"),
    [
        (((T0, 1.0), (T0 + 100.0, 10.0)), 100.0, 10.0),  # from a tenth within the horizon
        (((T0, 1.0), (T0 + 100.5, 10.0)), 100.0, 0.0),  # too slow to be a burst
        (((T0, 5.0), (T0 + 10.0, 10.0)), 100.0, 10.0),  # from exactly half
        (((T0, 5.1), (T0 + 10.0, 10.0)), 100.0, 0.0),
        (((T0, 10.0), (T0 + 10.0, 1.0)), 100.0, 0.0),  # a fall is no burst
        (((T0, 0.2), (T0 + 10.0, 0.8)), 100.0, 0.8),
        (((T0, 1.0), (T0 + 10.0, 10.0), (T0 + 20.0, 6.0)), 100.0, 10.0),
        (((T0, 4.0), (T0 + 10.0, 5.0), (T0 + 20.0, 6.0), (T0 + 30.0, 7.0)), 100.0, 0.0),
        (((T0, 4.0), (T0 + 10.0, 7.0), (T0 + 20.0, 1.0), (T0 + 30.0, 2.0)), 100.0, 2.0),
    ],
)
def test_burst_peak(rates: tuple[tuple[float, float], ...], horizon: float, want: float) -> None:
    assert law._burst_peak(rates, horizon) == want


def test_a_burst_within_a_cold_start_and_a_window_is_planned_for() -> None:
    """A rise from 2 to 40 req/s 110 s ago (cold start 60 s + window 60 s) keeps its peak."""
    rates = ((T0 - 230.0, 2.0), (T0 - 110.0, 40.0))
    d = decide(
        make_obs(desired=3, rate=20.0),
        POLICY_BOUNDARY,
        make_state(rates=rates, recommendations=history(3, since=T0 - 600)),
        T0,
    )
    burst = d.message.split("(+")[1].split(" burst")[0]
    assert float(burst) == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("rates", "trend"),
    [
        # the point exactly two windows old counts for the trend: +0.1 req/s per second
        (((T0 - 120.0, 8.0), (T0 - 60.0, 14.0)), 0.1 * 120.0),
        # older points do not: two points are no trend
        (((T0 - 180.0, 30.0), (T0 - 60.0, 14.0)), 0.0),
    ],
)
def test_trend_window(rates: tuple[tuple[float, float], ...], trend: float) -> None:
    d = decide(
        make_obs(desired=3, rate=20.0),
        replace(POLICY_BOUNDARY, burst_k=0.0),
        make_state(rates=rates, recommendations=history(3, since=T0 - 600)),
        T0,
    )
    burst = float(d.message.split("(+")[1].split(" burst")[0])
    assert burst == pytest.approx(trend, abs=0.01)


# --- reason ------------------------------------------------------------------------------------
def reason(
    target: int = 2,
    cur: int = 2,
    rec: int = 2,
    need: float = 2.0,
    idle: bool = False,
    err: float | None = None,
    held: str | None = None,
    in_flight: bool = False,
    limit_reason: str | None = None,
    old_limit: int = 64,
    limit: int = 64,
) -> str:
    return law._reason(
        target, cur, rec, need, idle, err, held, in_flight, limit_reason, old_limit, limit
    )


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"target": 3}, R.LOAD_INCREASED),
        ({"target": 3, "err": 1.0}, R.LOAD_INCREASED),
        ({"target": 3, "err": 1.5}, R.SLO_VIOLATED),
        ({"target": 1, "idle": True}, R.NO_TRAFFIC),
        ({"target": 0, "idle": True}, R.SCALED_TO_ZERO_REASON),
        ({"target": 1}, R.LOAD_DECREASED),
        ({"limit_reason": R.LIMIT_RAISED, "limit": 96}, R.LIMIT_RAISED),
        ({"limit_reason": R.LIMIT_RAISED}, R.STEADY),  # the limit did not move
        ({"limit": 96}, R.STEADY),
        ({"held": R.STABILIZING}, R.STABILIZING),
        ({"held": R.STABILIZING, "limit_reason": R.LIMIT_LOWERED, "limit": 48}, R.LIMIT_LOWERED),
        ({"in_flight": True}, R.WAITING_FOR_REPLICAS),
        ({"in_flight": True, "rec": 1}, R.STEADY),
        ({"rec": 3}, R.STEADY),
        ({"idle": True, "need": 0.0}, R.NO_TRAFFIC),
        ({"need": 2.0}, R.STEADY),
        ({"need": 2.0 + 1.5e-9}, R.WITHIN_TOLERANCE),
        ({"need": 1.0}, R.WITHIN_TOLERANCE),
        ({"need": 1.5}, R.STEADY),
    ],
)
def test_reason(kw: dict[str, Any], want: str) -> None:
    assert reason(**kw) == want


# --- batch limit -------------------------------------------------------------------------------
def limit(
    *,
    current: int = 32,
    step: int = 32,
    ratios: dict[str, float] | None = None,
    waiting: float = 0.0,
    cur: int = 2,
    in_flight: bool = False,
    floor: int = 8,
    ceiling: int = 64,
    kv: float | None = None,
    preempt: float | None = None,
    bias: float = 1.0,
    limits: tuple[tuple[float, int], ...] = (),
    mode: str = "live",
    pending: int = 0,
    **policy: Any,
) -> tuple[int, float, str | None, str]:
    obs = with_signals(
        make_obs(desired=cur, pending=pending, batch_limit=current),
        kv_usage=kv,
        preemptions_rate=preempt,
    )
    pol = replace(POLICY_BOUNDARY, batching_mode=mode, **policy)
    state = make_state(limit_bias=bias, limits=limits)
    return law._batch_limit(
        obs, pol, state, T0, step, ratios or {}, waiting, cur, in_flight, floor, ceiling
    )


def test_batching_off_leaves_the_limit_and_its_bias() -> None:
    assert limit(mode="off", ratios={"itl": 2.0}, bias=0.7, step=64) == (32, 0.7, None, "")


@pytest.mark.parametrize(
    ("kv", "preempt", "lowered"),
    [
        (None, None, False),
        (0.98, None, True),
        (0.979, None, False),
        (0.9, 0.1, True),
        (0.9, 0.5, True),
        (0.899, 0.1, False),
        (0.9, 0.0, False),
        (0.95, None, False),
    ],
)
def test_a_full_kv_cache_lowers_the_limit(
    kv: float | None, preempt: float | None, lowered: bool
) -> None:
    got = limit(kv=kv, preempt=preempt)
    assert got[0] == (24 if lowered else 32)
    if lowered:
        assert got == (
            24,
            0.75,
            R.LIMIT_LOWERED,
            "in-flight limit 32 -> 24 (KV cache full; model batch 32, range 8..64)",
        )


@pytest.mark.parametrize(("itl", "want"), [(1.0, 32), (1.5, 24), (2.5, 24)])
def test_inter_token_latency_over_target_lowers_the_limit(itl: float, want: int) -> None:
    got = limit(ratios={"itl": itl})
    assert got[0] == want
    if want != 32:
        assert got[2:] == (
            R.LIMIT_LOWERED,
            "in-flight limit 32 -> 24 (inter-token latency "
            "over target; model batch 32, range 8..64)",
        )


RAISE: dict[str, Any] = {"ratios": {"ttft": 1.5}, "waiting": 1.0, "in_flight": True}


@pytest.mark.parametrize(
    ("kw", "raised"),
    [
        ({}, True),
        ({"ratios": {"ttft": 1.0}}, False),
        ({"ratios": {"ttft": 2.5}}, True),
        ({"ratios": {"ttft": 0.5}}, False),
        ({"waiting": 0.0}, False),
        ({"waiting": 0.5}, True),
        ({"in_flight": False}, False),  # replicas are not short
        ({"in_flight": False, "cur": 8}, True),  # at maxReplicas
        ({"in_flight": False, "cur": 7, "max_replicas": 8}, False),
        ({"in_flight": False, "pending": 1}, True),
        ({"kv": 0.9}, False),
        ({"kv": 0.89}, True),
        ({"ratios": {"ttft": 1.5, "itl": 0.8}}, False),
        ({"ratios": {"ttft": 1.5, "itl": 0.79}}, True),
    ],
)
def test_a_queue_while_replicas_are_short_raises_the_limit(
    kw: dict[str, Any], raised: bool
) -> None:
    got = limit(**{**RAISE, **kw})
    assert got[0] == (48 if raised else 32)
    if raised:
        assert got == (
            48,
            1.5,
            R.LIMIT_RAISED,
            "in-flight limit 32 -> 48 (requests queue "
            "while replicas are short; model batch 32, range 8..64)",
        )


@pytest.mark.parametrize(
    ("bias", "want"),
    [
        (0.5, 0.75),
        (1.5, 1.25),
        (0.92, 1.0),
        (1.08, 1.0),
        (0.8, 0.9),
    ],
)
def test_the_bias_halves_its_way_back_once_latency_is_fine(bias: float, want: float) -> None:
    assert limit(bias=bias, current=200, step=32, ceiling=256)[1] == pytest.approx(want)


@pytest.mark.parametrize(
    ("ratios", "kv", "restored"),
    [
        ({"e2e": 0.8, "ttft": 0.1}, None, True),
        ({"e2e": 0.81}, None, False),
        ({"e2e": 0.5}, 0.9, False),
        ({"e2e": 0.5}, 0.89, True),
    ],
)
def test_the_bias_comes_back_only_with_room(
    ratios: dict[str, float], kv: float | None, restored: bool
) -> None:
    got = limit(bias=0.5, ratios=ratios, kv=kv)
    assert got[1] == (0.75 if restored else 0.5)


def test_a_way_back_moves_the_limit_and_says_why() -> None:
    assert limit(bias=0.5, step=64, current=32) == (
        48,
        0.75,
        R.LIMIT_RESTORED,
        "in-flight limit 32 -> 48 (latency back inside targets; model batch 64, range 8..64)",
    )


def test_the_model_batch_moving_resizes_the_limit() -> None:
    assert limit(step=64, current=32) == (
        64,
        1.0,
        R.LIMIT_RESIZED,
        "in-flight limit 32 -> 64 (the model's batch for the current "
        "request shape moved; model batch 64, range 8..64)",
    )


@pytest.mark.parametrize(
    ("ratios", "kv", "want"),
    [
        ({"e2e": 1.2}, None, 32),  # a latency in trouble: no way up
        ({"e2e": 1.0}, None, 64),
        ({"e2e": 1.5}, None, 32),
        ({}, 0.95, 32),  # the KV cache in trouble
        ({}, None, 64),
    ],
)
def test_no_way_up_while_in_trouble(ratios: dict[str, float], kv: float | None, want: int) -> None:
    assert limit(step=64, current=32, ratios=ratios, kv=kv)[0] == want


def test_the_way_down_stays_open_in_trouble() -> None:
    assert limit(step=16, current=32, ratios={"e2e": 1.2})[0] == 16


RECENT = ((T0 - 200.0, 40), (T0 - 100.0, 36), (T0 - 5.0, 32))


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"ratios": {"itl": 1.5}}, 24),
        ({"ratios": {"itl": 1.5}, "limits": RECENT}, 32),  # 5 s after the last change
        ({"ratios": {"itl": 1.5}, "limits": ((T0 - 10.0, 32),)}, 24),  # the interval has passed
        ({"ratios": {"itl": 1.5}, "limits": ((T0 - 9.0, 32),)}, 32),
        ({"current": 4, "floor": 1, "ratios": {"itl": 1.5}}, 3),  # a step of one sequence
        (
            {
                "current": 64,
                "ceiling": 66,
                "ratios": {"ttft": 1.5},
                "waiting": 1.0,
                "in_flight": True,
            },
            64,
        ),  # +2 on 64 is below a tenth
        (
            {
                "current": 60,
                "ceiling": 66,
                "ratios": {"ttft": 1.5},
                "waiting": 1.0,
                "in_flight": True,
            },
            66,
        ),
    ],
)
def test_latency_moves(kw: dict[str, Any], want: int) -> None:
    assert limit(**kw)[0] == want


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"step": 40}, 40),  # a quarter: a clear change
        ({"step": 39}, 32),
        ({"step": 34}, 32),
        ({"current": 4, "step": 6, "floor": 1}, 6),  # two sequences at least
        ({"current": 4, "step": 5, "floor": 1}, 4),
        ({"step": 40, "limits": ((T0 - 60.0, 32),)}, 40),  # once a window
        ({"step": 40, "limits": ((T0 - 59.0, 32),)}, 32),
        ({"step": 40, "limits": RECENT}, 32),
        ({"current": 8, "step": 9}, 8),  # at the floor: in range
        ({"current": 64, "step": 63}, 64),  # at the ceiling: in range
        ({"current": 70, "step": 68}, 64),  # beyond the ceiling: back at once
        ({"current": 6, "step": 7, "limits": RECENT}, 8),
    ],
)
def test_model_moves(kw: dict[str, Any], want: int) -> None:
    assert limit(**kw)[0] == want


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"current": 16, "step": 32}, 32),  # double: worth a restart
        ({"current": 16, "step": 31}, 16),
        ({"current": 16, "step": 20}, 16),
        ({"current": 64, "step": 32}, 32),  # half
        ({"current": 63, "step": 32}, 63),
        ({"current": 16, "step": 32, "limits": ((T0 - 1800.0, 16),)}, 32),
        ({"current": 16, "step": 32, "limits": ((T0 - 1799.0, 16),)}, 16),
        ({"current": 16, "step": 32, "limits": RECENT}, 16),
        ({"current": 8, "step": 10}, 8),  # at the floor: in range
        ({"current": 64, "step": 60}, 64),
        ({"current": 100, "step": 60}, 60),  # out of range: moves whenever
        ({"current": 6, "step": 7, "limits": RECENT}, 8),
    ],
)
def test_restart_moves(kw: dict[str, Any], want: int) -> None:
    assert limit(mode="restart", **kw)[0] == want


def test_the_limit_in_force_is_what_the_replicas_are_planned_at() -> None:
    """A 10 ms inter-token target: the guard's batch is 37; the limit moves to it and the
    replicas are planned at it."""
    pol = replace(POLICY_BOUNDARY, itl_target_ms=10.0)
    d = decide(make_obs(desired=2, rate=20.0, e2e=None, ttft=None), pol, make_state(), T0)
    assert (d.batch_limit, d.limit_reason) == (37, R.LIMIT_RESIZED)
    assert "(batch 37," in d.message


# --- more boundaries ---------------------------------------------------------------------------
def test_a_decision_is_immutable() -> None:
    d = at(2.0, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.replicas = 3  # type: ignore[misc]


def test_a_slow_replica_is_still_planned_from_the_model() -> None:
    """Under one request per second per replica: the model still sizes, and corrects."""
    slow = StepTimes(base_ms=100.0, per_seq_ms=5.0, prefill_ms_per_token=1.0)
    d = decide(
        make_obs(desired=4, rate=0.5, e2e=None, ttft=2_000.0),
        replace(POLICY_BOUNDARY, step_times=slow),
        make_state(),
        T0,
    )
    assert "at 0.29 req/s per replica" in d.message
    assert d.state.correction == pytest.approx(math.sqrt(2.0))
    assert d.need == pytest.approx(0.5 * math.sqrt(2.0) / 0.2909, rel=0.01)


def test_speed_from_a_replica_slower_than_a_token_per_second() -> None:
    st = StepTimes(base_ms=2_000.0, per_seq_ms=0.0, prefill_ms_per_token=0.0)
    obs = with_signals(
        make_obs(desired=1, batch_limit=1, waiting=2.0, running=1.0),
        generation_tokens_rate=0.25,
        prompt_tokens_rate=0.0,
    )
    assert law._learn_speed(obs, st, 500.0, 1.0, 0) == (pytest.approx(0.7 + 0.3 * 0.5), 1)


WIDE = replace(POLICY_BOUNDARY, tolerance=0.5, max_scale_down_step=4)


@pytest.mark.parametrize(
    ("need", "cur", "want"),
    [
        (2.0, 4, 3),  # 3.0 with the tolerance: three
        (2.0 + 1e-9, 4, 4),  # a hair above: four stay
        (2.0, 5, 3),
        (2.0 + 1e-9, 5, 4),
        (1.0, 5, 2),  # 1.5 with the tolerance: two
    ],
)
def test_scale_in_with_the_tolerance_to_spare(need: float, cur: int, want: int) -> None:
    assert at(need, cur, policy=WIDE, state=make_state(recommendations=COVERED)).replicas == want


def test_the_minimum_outranks_a_step_that_lands_on_it() -> None:
    d = at(
        0.5,
        3,
        policy=replace(POLICY_BOUNDARY, min_replicas=2),
        state=make_state(recommendations=COVERED),
    )
    assert (d.replicas, d.limited_reason) == (2, R.TOO_FEW_REPLICAS)


def test_the_budget_outranks_a_step_that_lands_on_it() -> None:
    d = at(9.0, 1, policy=replace(POLICY_BOUNDARY, gpu_budget=5))
    assert (d.replicas, d.limited_reason) == (5, R.GPU_BUDGET)


def test_an_older_rate_counts_for_the_trend_only_within_two_windows() -> None:
    rates = ((T0 - 180.0, 2.0), (T0 - 60.0, 14.0))
    d = decide(
        make_obs(desired=3, rate=20.0),
        replace(POLICY_BOUNDARY, burst_k=0.0),
        make_state(rates=rates, recommendations=history(3, since=T0 - 600)),
        T0,
    )
    assert d.message.startswith("load 20.00 req/s (+0.00 burst")


def test_a_recent_rate_sample_is_not_stored_again() -> None:
    old = ((T0 - 500.0, 9.0), (T0 - 300.0, 9.5), (T0 - 10.0, 10.0))
    d = decide(make_obs(rate=10.0), POLICY_BOUNDARY, make_state(rates=old), T0)
    assert d.state.rates == old


def test_no_move_leaves_everything() -> None:
    assert limit() == (32, 1.0, None, "")
    assert limit(bias=0.8, step=40, current=32) == (32, 0.9, None, "")


# --- a closed loop around a toy plant ----------------------------------------------------------

CYCLE = 15.0
COLD_START = 60.0
WARM_UP = 30.0
TRUE_SPEED = 0.8


@dataclass
class Plant:
    ready_at: list[float] = field(default_factory=list)
    queue: float = 0.0
    limit: int = 64

    def set_replicas(self, n: int, now: float) -> None:
        while len(self.ready_at) < n:
            self.ready_at.append(now + COLD_START)
        while len(self.ready_at) > n:
            self.ready_at.remove(max(self.ready_at))  # the newest (least ready) goes first

    def step(self, now: float, lam: float) -> Observation:
        st = DEFAULT_STEP_TIMES.scaled(TRUE_SPEED)
        ready = sum(1 for t in self.ready_at if t <= now)
        warming = sum(1 for t in self.ready_at if now - WARM_UP < t <= now)
        mu = rate_at_batch(st, self.limit, PROMPT, OUTPUT, utilization=1.0)
        cap = ready * mu
        served = min(lam + self.queue / CYCLE, cap)
        self.queue = max(0.0, self.queue + (lam - served) * CYCLE)
        u = min(0.99, served / cap) if cap else 0.0
        # Little's law: sequences in flight = rate x decode time; the limit caps it.
        lam_r = served / ready if ready else 0.0
        room = 1000.0 - lam_r * OUTPUT * st.per_seq_ms
        batch = (
            min(float(self.limit), lam_r * OUTPUT * st.base_ms / room)
            if room > 0
            else float(self.limit)
        )
        batch = max(1.0, batch) if served else 0.0
        if lam + self.queue / CYCLE >= cap:
            batch = float(self.limit)  # saturated: every slot is taken
        prefill_ms = st.prefill_ms_per_token * PROMPT + st.step_ms(max(1.0, batch))
        wait_ms = (self.queue / cap * 1000.0 if cap else 60_000.0) + prefill_ms * u / (2 * (1 - u))
        ttft = prefill_ms + wait_ms
        itl = st.step_ms(max(1.0, batch))
        sig = Signals(
            state=MetricsState.OK,
            e2e_ms=ttft + 2 * OUTPUT * itl,
            ttft_ms=ttft,
            itl_ms=itl,
            request_rate=served,
            prompt_tokens_rate=served * PROMPT,
            generation_tokens_rate=served * OUTPUT,
            waiting=self.queue,
            running=ready * batch,
            sample_time=now,
        )
        n = len(self.ready_at)
        return Observation(
            key=KEY,
            now=now,
            signals=sig,
            replicas=ReplicaCounts(desired=n, ready=ready, warming=warming, starting=n - ready),
            batch_limit=self.limit,
            max_batch=64,
            hardware="H200",
            precision="bf16",
        )


def load_plant(t: float) -> float:
    """10 req/s for 10 min, 60 req/s for 20 min, 10 req/s for 30 min."""
    return 60.0 if 600 <= t < 1800 else 10.0


def run_plant() -> list[tuple[float, int, bool, str]]:
    policy = make_policy()
    plant, state = Plant(), ControlState()
    plant.set_replicas(1, T0 - 600)
    trace = []
    for i in range(int(3600 / CYCLE)):
        t = i * CYCLE
        obs = plant.step(T0 + t, load_plant(t))
        good = (obs.signals.e2e_ms or 0) <= policy.e2e_target_ms and (
            obs.signals.ttft_ms or 0
        ) <= policy.ttft_target_ms
        d = decide(obs, policy, state, T0 + t)
        state = d.state
        plant.set_replicas(d.replicas, T0 + t)
        plant.limit = d.batch_limit
        trace.append((t, d.replicas, good, d.reason))
    return trace


def test_converges_after_a_load_step() -> None:
    trace = run_plant()
    # Within 3 minutes of the step the SLO holds for the rest of the high phase.
    assert all(good for t, _, good, _ in trace if 780 <= t < 1800), [
        (t, n, r) for t, n, g, r in trace if 780 <= t < 1800 and not g
    ]
    # Replicas settle: no change in the last 10 minutes of the high phase.
    assert len({n for t, n, _, _ in trace if 1200 <= t < 1800}) == 1


def test_does_not_flap_or_overshoot() -> None:
    trace = run_plant()
    counts = [n for _, n, _, _ in trace]
    moves = [b - a for a, b in itertools.pairwise(counts) if b != a]
    reversals = sum(1 for a, b in itertools.pairwise(moves) if (a > 0) != (b > 0))
    assert reversals <= 1, moves  # one way up, one way down
    mu = rate_at_batch(DEFAULT_STEP_TIMES.scaled(TRUE_SPEED), 64, PROMPT, OUTPUT)
    assert max(counts) <= math.ceil(60.0 / mu) + 2, counts  # no several-fold overshoot


def test_scales_in_after_the_window_and_not_before() -> None:
    trace = run_plant()
    level = next(n for t, n, _, _ in trace if t == 1800 - CYCLE)  # just before the drop
    assert all(n == level for t, n, _, _ in trace if 1800 <= t < 1800 + 300)
    end = trace[-1][1]
    assert end < level and end <= 2


# --- properties over arbitrary observations ----------------------------------------------------

anything = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=0, max_value=1e6)
)
counts = st.integers(min_value=0, max_value=20)


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    sig = Signals(
        state=draw(st.sampled_from(list(MetricsState))),
        e2e_ms=draw(anything),
        ttft_ms=draw(anything),
        itl_ms=draw(anything),
        jitter=draw(anything),
        request_rate=draw(anything),
        prompt_tokens_rate=draw(anything),
        generation_tokens_rate=draw(anything),
        waiting=draw(anything),
        running=draw(anything),
        kv_usage=draw(st.one_of(st.none(), st.floats(min_value=0, max_value=1))),
        preemptions_rate=draw(anything),
    )
    ready = draw(counts)
    return Observation(
        key=KEY,
        now=T0,
        signals=sig,
        replicas=ReplicaCounts(
            desired=draw(counts),
            ready=ready,
            warming=draw(st.integers(0, ready)),
            starting=draw(counts),
            pending=draw(counts),
        ),
        batch_limit=draw(st.integers(0, 512)),
        max_batch=draw(st.integers(1, 512)),
        hardware=draw(st.sampled_from(["", "H100-SXM5-80GB", "NVIDIA H200", "weird"])),
        precision=draw(st.sampled_from(["bf16", "fp16", "fp8"])),
        model_size_b=draw(st.one_of(st.none(), st.floats(min_value=0.5, max_value=500))),
        gpus_per_replica=draw(st.integers(1, 8)),
    )


@given(
    obs=observations(),
    mode=st.sampled_from(["live", "restart", "off"]),
    lo=st.integers(0, 3),
    span=st.integers(0, 10),
    itl=st.one_of(st.none(), st.floats(min_value=5, max_value=500)),
)
@settings(max_examples=500, deadline=None)
def test_decisions_stay_inside_the_users_bounds(
    obs: Observation, mode: str, lo: int, span: int, itl: float | None
) -> None:
    pol = make_policy(
        min_replicas=lo,
        max_replicas=max(1, lo + span),
        batching_mode=mode,
        scale_to_zero=lo == 0,
        itl_target_ms=itl,
    )
    d = decide(obs, pol, ControlState(), T0)
    assert pol.min_replicas <= d.replicas <= pol.max_replicas
    assert d.reason and d.message
    assert d.need is None or not math.isnan(d.need)
    if mode == "off":
        assert d.batch_limit == obs.batch_limit
    elif d.valid and d.batch_limit != obs.batch_limit:
        ceiling = min(pol.max_batch, obs.max_batch)
        assert min(pol.min_batch, ceiling) <= d.batch_limit <= ceiling
    if not d.valid and obs.replicas.desired > 0:
        assert d.replicas > 0  # never to zero for lack of data
    # The new state survives status (strict JSON: no NaN or Infinity for the API server).
    wire = json.loads(json.dumps(d.state.to_dict(), allow_nan=False))
    assert ControlState.from_dict(wire).to_dict() == d.state.to_dict()


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[GpuRequest], dict[str, int], dict[str, int | None]]:
    pools, tenants = ["H100", "A100"], ["t1", "t2", "t3"]
    reqs = [
        GpuRequest(
            ServiceKey("ns", f"s{i}"),
            draw(st.integers(0, 12)),
            draw(st.integers(0, 8)),
            draw(st.integers(1, 4)),
            draw(st.integers(0, 3)),
            draw(st.sampled_from(tenants)),
            draw(st.sampled_from(pools)),
            draw(st.integers(0, 2)),
        )
        for i in range(draw(st.integers(1, 8)))
    ]
    free = {p: draw(st.integers(0, 16)) for p in pools}
    budgets = {t: draw(st.one_of(st.none(), st.integers(0, 40))) for t in tenants}
    return reqs, free, budgets


@given(fleet=fleets())
@settings(max_examples=300, deadline=None)
def test_grants_respect_pools_budgets_and_priorities(
    fleet: tuple[list[GpuRequest], dict[str, int], dict[str, int | None]],
) -> None:
    reqs, free, budgets = fleet
    grants = arbitrate(reqs, free, budgets)
    for pool in free:
        mine = [r for r in reqs if r.pool == pool]
        used = sum(grants[r.key].replicas * r.gpus_per_replica for r in mine)
        held = sum(r.held * r.gpus_per_replica for r in mine)
        assert used <= held + free[pool]
    for tenant, budget in budgets.items():
        if budget is not None:
            used = sum(
                grants[r.key].replicas * r.gpus_per_replica for r in reqs if r.tenant == tenant
            )
            assert used <= budget
    for r in reqs:
        g = grants[r.key]
        assert 0 <= g.replicas <= max(r.wanted, 0)
        assert (g.reason is None) == (g.replicas >= r.wanted)
