"""decide() edges: request shape smoothing, queue growth, feedback correction, in-flight."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from slo_operator.api.observe import Observation
from slo_operator.control import ControlState, Decision, decide
from slo_operator.control import reasons as R
from tests.operator.control.control_support import (
    PER_REPLICA,
    T0,
    make_obs,
    make_policy,
    make_state,
)

POLICY = make_policy()


def run(obs: Observation, state: ControlState | None = None) -> Decision:
    return decide(obs, POLICY, state or make_state(), T0)


def load(d: Decision) -> tuple[float, float, float]:
    """(arrivals, burst, backlog) as the decision message states them."""
    m = re.search(r"load ([\d.]+) req/s \(\+([\d.]+) burst, \+([\d.]+) backlog\)", d.message)
    assert m, d.message
    return float(m[1]), float(m[2]), float(m[3])


def test_without_any_shape_the_defaults_are_planned_for() -> None:
    obs = make_obs()
    obs = replace(obs, signals=replace(obs.signals, prompt_tokens_rate=None,
                                       generation_tokens_rate=None))
    d = run(obs)
    assert (d.state.prompt_tokens, d.state.output_tokens) == (512.0, 128.0)
    assert "512+128 tokens" in d.message


@pytest.mark.parametrize(("rate", "want"), [
    (10.0, 1000.0 + 0.5 * (500.0 - 1000.0)),  # 600 requests in the window: at most half way
    (0.5, 1000.0 + 0.3 * (500.0 - 1000.0)),  # 30 requests: 30% of the way
    (0.05, 1000.0 + 0.05 * (500.0 - 1000.0)),  # 3 requests: at least 5%
])
def test_request_shape_moves_by_how_many_requests_the_window_holds(rate: float,
                                                                   want: float) -> None:
    d = run(make_obs(rate=rate), make_state(prompt_tokens=1000.0, output_tokens=200.0))
    assert d.state.prompt_tokens == pytest.approx(want)


@pytest.mark.parametrize(("dt", "arrivals"), [
    (15.0, 10.0 + 30.0 / 15.0),  # the queue grew by 30 in 15 s
    (1.0, 10.0 + 30.0),
    (2 * POLICY.window_s, 10.0 + 30.0 / (2 * POLICY.window_s)),  # still recent enough
    (2.5 * POLICY.window_s, 10.0),  # too old to compare with
    (0.0, 10.0),  # same instant: no growth rate
], ids=["15s", "1s", "two-windows", "older", "same-time"])
def test_queue_growth_counts_as_arrivals(dt: float, arrivals: float) -> None:
    d = run(make_obs(rate=10.0, waiting=30.0),
            make_state(last_waiting=0.0, last_time=T0 - dt))
    got, _, backlog = load(d)
    assert got == pytest.approx(arrivals, abs=0.005)
    assert backlog == pytest.approx(30.0 / (POLICY.backlog_drain_s + POLICY.cold_start_s),
                                    abs=0.005)


def test_queue_growth_needs_the_time_of_the_last_queue() -> None:
    d = run(make_obs(rate=10.0, waiting=30.0), make_state(last_waiting=0.0))
    assert load(d)[0] == pytest.approx(10.0)


def test_a_draining_queue_never_makes_arrivals_negative() -> None:
    d = run(make_obs(rate=0.5, waiting=0.0), make_state(last_waiting=100.0, last_time=T0 - 10))
    assert load(d)[0] == 0.0


def test_requests_finishing_with_nothing_in_flight_still_need_replicas() -> None:
    d = run(make_obs(desired=2, rate=10.0, waiting=0.0, running=0.0))
    assert d.need is not None and d.need > 0.3


def test_no_replicas_yet_counts_as_zero() -> None:
    d = run(make_obs(desired=0, ready=0, rate=10.0))
    assert "replicas 0 -> " in d.message and d.replicas >= 1


@pytest.mark.parametrize(("starting", "pending"), [(1, 0), (0, 1)])
def test_replicas_on_their_way_are_waited_for(starting: int, pending: int) -> None:
    d = run(make_obs(desired=2, ready=2, starting=starting, pending=pending,
                     rate=2 * PER_REPLICA * 0.95))
    assert d.replicas == 2
    assert d.reason == R.WAITING_FOR_REPLICAS


@pytest.mark.parametrize(("correction", "e2e", "want"), [
    (2.9, 20_000.0, 3.0),  # twice the target: grows by sqrt(2), capped at 3
    (1.0, 40_000.0, 1.5),  # four times the target: at most 1.5x per cycle
    (1.0, 11_000.0, 1.1),  # just over: at least 1.1x
    (2.0, 9_000.0, 2.0),  # inside, not relaxed: kept
    (2.0, 4_000.0, 2.0 * 0.99),  # relaxed: decays towards 1
    (1.0, 4_000.0, math.sqrt(0.99)),  # below 1 the decay is slower
    (0.9, 4_000.0, 0.9),  # and stops at 0.9
])
def test_feedback_correction_steps(correction: float, e2e: float, want: float) -> None:
    d = run(make_obs(desired=4, rate=5.0, e2e=e2e, ttft=300.0),
            make_state(correction=correction))
    assert d.state.correction == pytest.approx(want)


def test_correction_is_kept_while_capacity_arrives() -> None:
    d = run(make_obs(desired=4, ready=3, rate=5.0, e2e=20_000.0),
            make_state(correction=1.0))
    assert d.state.correction == 1.0


def test_correction_without_latency_is_kept() -> None:
    d = run(make_obs(desired=4, rate=5.0, e2e=None, ttft=None), make_state(correction=2.0))
    assert d.state.correction == 2.0


def test_a_held_decision_carries_no_limits_need_or_error() -> None:
    obs = make_obs()
    obs = replace(obs, signals=replace(obs.signals, request_rate=None))
    d = run(obs)
    assert not d.valid
    assert (d.limited_reason, d.limited_message, d.limit_reason, d.limit_message,
            d.need, d.slo_error) == (None, "", None, "", None, None)


def test_a_plain_decision_has_no_limit_message() -> None:
    d = run(make_obs(desired=2, rate=2 * PER_REPLICA * 0.95))
    assert (d.limited_reason, d.limited_message) == (None, "")


def test_absurd_rates_need_a_bounded_number_of_replicas() -> None:
    d = run(make_obs(rate=1e15))
    assert d.need == 1_000_000.0


@pytest.mark.parametrize(("last", "appended"), [
    (T0 - 10.0, False),  # a sample less than a quarter window old: not stored again
    (T0 - POLICY.window_s / 4, True),
    (T0 - 13.0, False),
])
def test_rates_are_stored_at_most_every_quarter_window(last: float, appended: bool) -> None:
    old = ((T0 - POLICY.burst_lookback_s, 9.0), (last, 10.0))
    d = run(make_obs(rate=10.0), make_state(rates=old))
    assert d.state.rates == ((*old, (T0, 10.0)) if appended else old)


def test_burst_headroom_from_rate_noise() -> None:
    """Rates jumping by 6 req/s: the upper quartile of the jumps over 1.627 deviations."""
    old = ((T0 - 200, 14.0), (T0 - 150, 20.0), (T0 - 100, 14.0), (T0 - 50, 20.0))
    d = run(make_obs(rate=14.0), make_state(rates=old))
    assert load(d)[1] == pytest.approx(6.0 / 1.627, abs=0.005)


def test_backlog_drains_over_at_least_a_second() -> None:
    policy = replace(POLICY, backlog_drain_s=0.0, cold_start_s=0.0)
    d = decide(make_obs(rate=10.0, waiting=30.0), policy, make_state(), T0)
    assert load(d)[2] == pytest.approx(30.0)


def test_a_queue_adds_to_the_need() -> None:
    calm = run(make_obs(rate=10.0, waiting=0.0))
    queued = run(make_obs(rate=10.0, waiting=300.0))
    assert calm.need is not None and queued.need is not None and queued.need > calm.need


@pytest.mark.parametrize(("fields", "want"), [
    ({"last_waiting": 5.0, "last_time": T0 - 15}, math.sqrt(2.0)),  # steady queue: corrected
    ({"last_waiting": 10.0, "last_time": T0 - 15}, 1.0),  # draining queue: wait
])
def test_correction_waits_for_a_draining_queue(fields: dict[str, float], want: float) -> None:
    d = run(make_obs(desired=4, rate=5.0, e2e=20_000.0, waiting=5.0),
            make_state(correction=1.0, **fields))
    assert d.state.correction == pytest.approx(want)


def test_correction_waits_for_warming_replicas() -> None:
    d = run(make_obs(desired=4, warming=1, rate=5.0, e2e=20_000.0), make_state(correction=1.0))
    assert d.state.correction == 1.0


def test_one_replica_inside_the_dead_band_stays_one() -> None:
    d = run(make_obs(desired=1, rate=1.05 * PER_REPLICA))
    assert d.replicas == 1


def test_from_zero_a_small_load_gets_one_replica() -> None:
    d = decide(make_obs(desired=0, ready=0, rate=0.5 * PER_REPLICA),
               replace(POLICY, min_replicas=0), make_state(), T0)
    assert d.replicas == 1


def test_scale_in_keeps_the_tolerance_to_spare() -> None:
    """A need of 2.8 fits in 3 replicas but not with 10% to spare: four stay."""
    d = run(make_obs(desired=4, rate=2.8 * PER_REPLICA),
            make_state(recommendations=tuple((T0 - 400 + 15 * i, 1) for i in range(27))))
    assert d.replicas == 4
