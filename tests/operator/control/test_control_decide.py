"""decide(): one table of situations, each with what a platform engineer expects."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from slo_operator.api.observe import MetricsState
from slo_operator.control import ControlState, decide
from slo_operator.control import reasons as R
from tests.operator.control.control_support import (
    PER_REPLICA,
    T0,
    history,
    make_obs,
    make_policy,
    make_state,
)


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
    Case("load-step-breaching-e2e-scales-out-at-once",
         obs={"desired": 2, "rate": 80.0, "e2e": 12_000.0},
         state=make_state(recommendations=SETTLED),
         want_replicas=4, want_reason=R.SLO_VIOLATED),
    Case("load-growth-within-slo-scales-out-from-the-model",
         obs={"desired": 2, "rate": 60.0}, state=make_state(recommendations=SETTLED),
         want_replicas=3, want_reason=R.LOAD_INCREASED),
    Case("need-inside-dead-band-holds",
         obs={"desired": 3, "rate": 3 * PER_REPLICA * 1.05},
         state=make_state(recommendations=history(3, since=T0 - 600)),
         want_replicas=3, want_reason=R.WITHIN_TOLERANCE),
    Case("load-drop-waits-for-stabilization-window",
         obs={"desired": 4, "rate": 10.0},
         state=make_state(recommendations=history(4, since=T0 - 120)),
         want_replicas=4, want_reason=R.STABILIZING),
    Case("first-decision-never-scales-in",
         obs={"desired": 4, "rate": 10.0}, want_replicas=4, want_reason=R.STABILIZING),
    Case("load-low-for-a-whole-window-scales-in-one-step",
         obs={"desired": 4, "rate": 10.0},
         state=make_state(recommendations=history(1, since=T0 - 400)),
         want_replicas=3, want_reason=R.LOAD_DECREASED, want_limited=R.SCALE_DOWN_LIMIT),
    Case("scale-in-blocked-while-slo-violated",
         obs={"desired": 4, "rate": 10.0, "ttft": 1_500.0},
         state=make_state(recommendations=history(1, since=T0 - 400)),
         want_replicas=4, want_reason=R.SLO_VIOLATED),
    Case("no-scale-in-right-after-a-scale-up",
         obs={"desired": 4, "rate": 10.0},
         state=make_state(recommendations=history(1, since=T0 - 400, until=T0 - 330),
                          last_scale_time=T0 - 60, last_scale_direction=1),
         want_replicas=4, want_reason=R.REVERSAL_BLOCKED),
    Case("pending-pods-block-further-scale-up",
         obs={"desired": 4, "ready": 2, "pending": 2, "rate": 200.0, "ttft": 5_000.0,
              "waiting": 50.0},
         want_replicas=4, want_reason=R.PENDING, want_limited=R.PENDING),
    Case("scale-up-step-capped",
         obs={"desired": 2, "rate": 300.0}, want_replicas=6, want_reason=R.LOAD_INCREASED,
         want_limited=R.SCALE_UP_LIMIT),
    Case("max-replicas-caps-and-says-so",
         obs={"desired": 6, "rate": 300.0}, want_replicas=8, want_reason=R.LOAD_INCREASED,
         want_limited=R.TOO_MANY_REPLICAS),
    Case("gpu-budget-caps-replicas",
         obs={"desired": 2, "rate": 100.0, "gpus_per_replica": 2}, policy={"gpu_budget": 6},
         want_replicas=3, want_reason=R.LOAD_INCREASED, want_limited=R.GPU_BUDGET),
    Case("min-replicas-floor-at-low-load",
         obs={"desired": 2, "rate": 1.0}, policy={"min_replicas": 2},
         state=make_state(recommendations=history(1, since=T0 - 400)),
         want_replicas=2, want_reason=R.WITHIN_TOLERANCE, want_limited=R.TOO_FEW_REPLICAS),
    Case("idle-service-scales-to-zero-after-window",
         obs={"desired": 1, "rate": 0.0, "running": 0.0, "e2e": None, "ttft": None,
              "state": MetricsState.NO_TRAFFIC},
         policy={"min_replicas": 0, "scale_to_zero": True},
         state=make_state(recommendations=history(0, since=T0 - 400)),
         want_replicas=0, want_reason=R.SCALED_TO_ZERO_REASON),
    Case("idle-service-keeps-min-one",
         obs={"desired": 2, "rate": 0.0, "running": 0.0, "e2e": None, "ttft": None,
              "state": MetricsState.NO_TRAFFIC},
         state=make_state(recommendations=history(0, since=T0 - 400)),
         want_replicas=1, want_reason=R.NO_TRAFFIC, want_limited=R.TOO_FEW_REPLICAS),
    Case("prometheus-down-holds-last-good",
         obs={"desired": 5, "state": MetricsState.UNAVAILABLE, "rate": None},
         state=make_state(last_good_replicas=5, last_good_limit=48),
         want_replicas=5, want_reason=R.METRICS_UNAVAILABLE, want_valid=False, want_limit=48),
    Case("stale-metrics-never-scale-to-zero",
         obs={"desired": 3, "state": MetricsState.STALE},
         state=make_state(last_good_replicas=0),
         want_replicas=3, want_reason=R.METRICS_STALE, want_valid=False),
    Case("series-vanished-holds",
         obs={"desired": 3, "state": MetricsState.EMPTY, "rate": None},
         want_replicas=3, want_reason=R.METRICS_EMPTY, want_valid=False),
    Case("rate-missing-holds",
         obs={"desired": 3, "state": MetricsState.PARTIAL, "rate": None},
         want_replicas=3, want_reason=R.METRICS_PARTIAL, want_valid=False),
    Case("new-service-without-pods-runs-minimum",
         obs={"desired": 0, "ready": 0, "state": MetricsState.EMPTY, "rate": None},
         policy={"min_replicas": 2},
         want_replicas=2, want_reason=R.WAITING_FOR_REPLICAS),
    Case("burst-while-replicas-start-raises-live-limit",
         obs={"desired": 4, "ready": 2, "starting": 2, "rate": 40.0, "ttft": 2_500.0,
              "waiting": 30.0, "batch_limit": 32},
         state=make_state(recommendations=history(4, since=T0 - 60)),
         want_replicas=4, want_reason=R.LIMIT_RAISED, want_limit=48),
    Case("itl-over-target-lowers-live-limit",
         obs={"desired": 2, "rate": 30.0, "itl": 40.0}, policy={"itl_target_ms": 30.0},
         state=make_state(recommendations=SETTLED),
         want_replicas=2, want_reason=R.LIMIT_LOWERED, want_limit=48),
    Case("batching-off-never-moves-the-limit",
         obs={"desired": 2, "rate": 30.0, "itl": 40.0},
         policy={"itl_target_ms": 30.0, "batching_mode": "off"},
         state=make_state(recommendations=SETTLED),
         want_replicas=2, want_reason=R.STEADY, want_limit=64),
    Case("restart-mode-ignores-a-small-limit-move",
         obs={"desired": 2, "rate": 30.0, "itl": 40.0},
         policy={"itl_target_ms": 30.0, "batching_mode": "restart"},
         state=make_state(recommendations=SETTLED),
         want_replicas=2, want_reason=R.STEADY, want_limit=64),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case) -> None:
    d = decide(make_obs(**case.obs), make_policy(**case.policy), case.state, T0)
    assert (d.replicas, d.reason, d.valid) == (case.want_replicas, case.want_reason,
                                               case.want_valid), d.message
    assert d.limited_reason == case.want_limited, d.limited_message
    assert d.batch_limit == case.want_limit
    assert d.message  # every decision explains itself
    if case.want_limited:
        assert d.limited_message


def test_invalid_decision_keeps_state_untouched() -> None:
    state = make_state(last_good_replicas=5, correction=1.4, recommendations=SETTLED)
    d = decide(make_obs(desired=5, state=MetricsState.UNAVAILABLE, rate=None),
               make_policy(), state, T0)
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
    d = decide(make_obs(desired=3, rate=5.0, waiting=0.0, gen_rate=100.0), make_policy(),
               ControlState(), T0)
    assert d.state.speed_samples == 0


def test_correction_is_frozen_while_capacity_is_starting() -> None:
    """During cold starts a latency-only rule keeps adding replicas; this one waits."""
    over = {"rate": 40.0, "e2e": 20_000.0}
    settled = make_state(recommendations=SETTLED)
    starting = decide(make_obs(desired=4, ready=2, starting=2, **over), make_policy(),
                      settled, T0)
    steady = decide(make_obs(desired=2, **over), make_policy(), settled, T0)
    assert starting.state.correction == 1.0
    assert steady.state.correction > 1.0


def test_hardware_change_resets_learnt_speed() -> None:
    state = make_state(speed=0.5, speed_key="A100/bf16", speed_samples=9,
                       recommendations=SETTLED)
    d = decide(make_obs(desired=2, rate=30.0), make_policy(), state, T0)
    assert d.state.speed == 1.0 and d.state.speed_key == "H200/bf16"


def test_infeasible_target_is_reported_and_not_chased() -> None:
    """A 600 ms e2e target for 200-token outputs cannot be met by any replica count."""
    d = decide(make_obs(desired=2, rate=30.0, e2e=4_000.0, ttft=100.0),
               make_policy(e2e_target_ms=600.0, ttft_target_ms=300.0),
               make_state(recommendations=SETTLED), T0)
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
    d = decide(make_obs(desired=3, rate=2.0), make_policy(),
               make_state(rates=rates(bursty), recommendations=history(3, since=T0 - 600)), T0)
    assert d.need is not None and d.need > 0.9 * 42 / PER_REPLICA  # planned for the peak
    assert d.replicas >= 2


def test_a_falling_ramp_is_not_held_up() -> None:
    """A smooth ramp down is not a burst: the plan follows the current rate."""
    ramp = [60 - 4 * i for i in range(12)]
    d = decide(make_obs(desired=3, rate=12.0), make_policy(),
               make_state(rates=rates(ramp), recommendations=history(3, since=T0 - 600)), T0)
    assert d.need is not None and d.need < 1.0


def test_a_window_with_one_request_barely_moves_the_request_shape() -> None:
    state = make_state(prompt_tokens=500.0, output_tokens=200.0,
                       recommendations=history(2, since=T0 - 600))
    d = decide(make_obs(desired=2, rate=1 / 60, prompt=8000.0, output=10.0), make_policy(),
               state, T0)
    assert d.state.prompt_tokens is not None and d.state.prompt_tokens < 1000.0


def test_short_history_still_waits_a_whole_window_before_scale_in() -> None:
    """A restarted history (two minutes of low wishes) is not a whole scale-down window."""
    state = make_state(recommendations=history(1, since=T0 - 120))
    d = decide(make_obs(desired=4, rate=5.0), make_policy(), state, T0)
    assert (d.replicas, d.reason) == (4, R.STABILIZING)


def test_limit_does_not_chase_small_model_moves() -> None:
    """The ITL-guard batch drifting a little with the request shape leaves the limit alone."""
    pol = make_policy(itl_target_ms=30.0, max_batch=256)
    first = decide(make_obs(desired=2, rate=20.0, batch_limit=64, max_batch=256), pol,
                   make_state(recommendations=SETTLED), T0)
    moved = first.batch_limit
    again = decide(make_obs(desired=2, rate=20.0, batch_limit=moved, max_batch=256,
                            prompt=560.0), pol, first.state, T0 + 20)
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
    obs = make_obs(desired=4, ready=2, starting=2, rate=40.0, ttft=2_500.0, waiting=30.0,
                   batch_limit=32)
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
