"""decide() edges: request shape smoothing, queue growth, feedback correction, in-flight."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from control_support import PER_REPLICA, T0, make_obs, make_policy, make_state

from slo_operator.api.observe import Observation
from slo_operator.control import ControlState, Decision, decide
from slo_operator.control import reasons as R

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
