"""decide(), the control law, as scenarios over time (docs/slo-loop.md).

As Knative's autoscaler tests do (github.com/knative/serving,
pkg/autoscaler/scaling/autoscaler_test.go: metrics recorded at increasing times, the
desired scale asserted after each), every scenario feeds ``decide`` one observation per
20 s cycle through ``Loop``, carries ``decision.state`` forward, and asserts replicas,
reasons and the figures of ``Decision.explanation``. Messages are pinned only in
tests/golden/control.yaml. Then a closed loop around a toy plant whose replicas are slower
than the seed, and properties over arbitrary observations.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slo_operator.api.activation import Wake
from slo_operator.api.models import SLOPolicySpec
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
    policy_for,
)
from slo_operator.control import reasons as R
from slo_operator.control.capacity import (
    DEFAULT_STEP_TIMES,
    KV_PLAN_SHARE,
    LATENCY_MARGIN,
    TAIL_OUTPUT_FACTOR,
    TARGET_UTILIZATION,
    decode_context,
    rate_at_batch,
    replica_capacity,
)
from tests.operator.control.control_support import (
    CYCLE,
    KEY,
    OUTPUT,
    PER_REPLICA,
    PROMPT,
    T0,
    Loop,
    decode_time,
    make_obs,
    make_policy,
    make_signals,
    make_state,
    prefill_time,
)

SEED = DEFAULT_STEP_TIMES  # what make_obs's H200/bf16 service is seeded with
IDLE: dict[str, Any] = {"rate": 0.0, "running": 0.0, "waiting": 0.0, "e2e": None, "ttft": None,
                        "state": MetricsState.NO_TRAFFIC}
ITL_POLICY = make_policy(itl_target_ms=30.0)


def settled(replicas: int, *, policy: ControlPolicy | None = None, seconds: float = 600.0,
            **obs: Any) -> Loop:
    """A loop that has run ``seconds`` at these signals: its history spans every window."""
    loop = Loop(replicas=replicas, policy=policy or make_policy())
    loop.run(seconds, **obs)
    return loop


def moves(ds: list[Decision], start: int) -> list[tuple[int, str]]:
    """(replicas, reason) of each decision that changed the replicas."""
    out, last = [], start
    for d in ds:
        if d.replicas != last:
            out.append((d.replicas, d.reason))
        last = d.replicas
    return out


# --- scaling on load -------------------------------------------------------------------------


def test_a_steady_load_keeps_the_replicas_it_needs() -> None:
    ds = Loop(replicas=1).run(600, rate=10.0)
    assert {(d.replicas, d.reason, d.limited_reason, d.limit_reason) for d in ds} == {
        (1, R.STEADY, None, None)}  # resting at minReplicas the load needs is no limit
    e = ds[-1].explanation
    assert e is not None
    assert (e.demand.source, e.demand.arrivals) == ("completions", 10.0)
    assert e.demand.burst_kind == "none"
    assert (e.need.driver, e.need.batch) == ("load", 64)  # no ITL objective, a roomy e2e one
    assert e.need.replicas == pytest.approx(10.0 * e.need.correction / e.need.per_replica)


def test_a_rising_load_is_planned_a_cold_start_ahead() -> None:
    loop = settled(1, rate=10.0)
    ramp = [loop.step(rate=r, arrivals=r) for r in (10.0 + 4.0 * i for i in range(1, 16))]
    assert {reason for _, reason in moves(ramp, 1)} == {R.LOAD_INCREASED}
    assert ramp[-1].replicas > 1
    assert any(d.explanation.demand.burst_kind == "trend" for d in ramp if d.explanation)
    for d in ramp:  # capacity leads the load: each cycle's arrivals fit the planned replicas
        assert d.explanation is not None
        assert d.replicas * d.explanation.need.per_replica >= d.explanation.demand.arrivals


@pytest.mark.parametrize(("need", "reason"), [
    (3.15, R.WITHIN_TOLERANCE),  # up to 10% over 3 replicas: no scale-out
    (2.9, R.STEADY),
    (1.95, R.WITHIN_TOLERANCE),  # fits in 2, but not with the 10% to spare: no scale-in
])
def test_a_need_inside_the_dead_band_moves_nothing(need: float, reason: str) -> None:
    # e2e at 0.8 of its target: inside it, but not relaxed enough to decay the correction.
    ds = Loop(replicas=3).run(600, rate=need * PER_REPLICA, e2e=8_000.0)
    assert {(d.replicas, d.reason) for d in ds} == {(3, reason)}
    assert ds[-1].need == pytest.approx(need)


def _steady_need(rate: float, *, pooled: bool, policy: ControlPolicy | None = None
                 ) -> law.Need:
    """The need a steady ``rate`` settles on (replicas that follow it, max 1000)."""
    loop = Loop(replicas=max(1, round(rate / PER_REPLICA)),
                policy=replace(policy or make_policy(), max_replicas=1000))
    d = loop.run(600, rate=rate, pooled=pooled)[-1]
    assert d.explanation is not None
    return d.explanation.need


@pytest.mark.parametrize("busy", [0.5, 2.0, 8.0, 30.0, 120.0])
def test_pooled_routing_sizes_the_in_flight_count_and_never_needs_more(busy: float) -> None:
    # A load-aware router spreads the service's in-flight requests over every replica, so
    # their noise is the whole count's (its square root), not each replica's share of it:
    # a large service runs closer to full use, a small one as without pooling.
    rate = busy * PER_REPLICA / TARGET_UTILIZATION
    alone, pooled = _steady_need(rate, pooled=False), _steady_need(rate, pooled=True)
    assert alone.busy is None and pooled.busy == pytest.approx(busy)
    assert pooled.driver == alone.driver == "load"
    assert busy < pooled.replicas <= alone.replicas == pytest.approx(busy / TARGET_UTILIZATION)
    # Headroom over the busy replicas: a shrinking share as the load grows.
    share = (pooled.replicas - busy) / busy
    assert share <= 1.0 / TARGET_UTILIZATION - 1.0 + 1e-9
    if busy >= 30.0:
        assert share < 0.5 * (1.0 / TARGET_UTILIZATION - 1.0)


@pytest.mark.parametrize(("answer_tail", "pooled"), [
    pytest.param(None, True, id="no-tail-measured"),
    pytest.param(400.0, True, id="a-tail-within-the-models"),
    pytest.param(1_000.0, False, id="a-tail-longer-than-the-models"),
])
def test_a_measured_tail_longer_than_the_models_keeps_the_planned_utilisation(
        answer_tail: float | None, pooled: bool) -> None:
    # Answers of 200 tokens on average, 480 in the model's tail: requests of comparable
    # work pool; a tail of 1,000 tokens holds a replica's batch whatever the picker does.
    rate = 30.0 * PER_REPLICA / TARGET_UTILIZATION
    loop = Loop(replicas=round(rate / PER_REPLICA), policy=replace(make_policy(),
                                                                     max_replicas=1000))
    need = loop.run(600, rate=rate, pooled=True, answer_tail=answer_tail)[-1].explanation
    assert need is not None
    assert (need.need.busy is not None) == pooled
    if not pooled:
        assert need.need.replicas == pytest.approx(
            rate / need.need.per_replica, rel=1e-6)


def test_pooled_headroom_follows_the_highest_percentile_the_objectives_set() -> None:
    def need(**objectives: float) -> float:
        spec = SLOPolicySpec.model_validate({
            "objectives": {"e2eLatencyMs": 10_000, "ttftMs": 1_000, **objectives},
            "batching": {"minBatch": 8, "maxBatch": 64}})
        policy = policy_for(spec)
        return _steady_need(40.0 * PER_REPLICA, pooled=True, policy=policy).replicas

    p99 = need()  # e2e at P99 (the default)
    assert need(e2ePercentile=0.999) > p99 > need(e2ePercentile=0.9)
    # Never below the P95 of the count, whatever the objectives read.
    assert need(e2ePercentile=0.5, ttftPercentile=0.5) == need(e2ePercentile=0.9) == need(
        e2ePercentile=0.95)


def test_a_load_drop_waits_the_scale_down_window_then_steps_down() -> None:
    # First tokens at their floor: no queueing holds the scale-in (LatencyHeadroom).
    loop = settled(4, rate=80.0, ttft=30.0)
    assert loop.replicas == 4
    ds = loop.run(600, rate=10.0, ttft=30.0)
    waited = [d for d in ds if d.replicas == 4]
    assert {d.reason for d in waited} == {R.STABILIZING}
    # The last wish for 4 was one cycle before the drop; a wish counts for the whole window.
    assert len(waited) * CYCLE == loop.policy.scale_down_stabilization_s
    assert moves(ds, 4) == [(3, R.LOAD_DECREASED), (2, R.LOAD_DECREASED), (1, R.LOAD_DECREASED)]
    steps = [d.limited_reason for d in ds if d.reason == R.LOAD_DECREASED]
    assert steps == [R.SCALE_DOWN_LIMIT, R.SCALE_DOWN_LIMIT, None]  # one a decision, said so
    assert ds[-1].reason == R.STEADY


def test_a_new_service_waits_a_whole_window_before_its_first_scale_in() -> None:
    ds = Loop(replicas=4).run(400, rate=10.0)  # no history: the replicas count as the wish
    first = next(i for i, d in enumerate(ds) if d.replicas < 4)
    assert first * CYCLE >= law.HISTORY_COVERAGE * make_policy().scale_down_stabilization_s
    assert {d.reason for d in ds[:first]} == {R.STABILIZING}


def test_an_idle_service_goes_to_its_minimum_after_the_window() -> None:
    loop = settled(3, rate=60.0)
    assert loop.replicas == 3
    ds = loop.run(600, **IDLE)
    assert moves(ds, 3) == [(2, R.NO_TRAFFIC), (1, R.NO_TRAFFIC)]
    waited = [d for d in ds if d.replicas == 3]  # the whole window first
    assert len(waited) * CYCLE == loop.policy.scale_down_stabilization_s
    last = ds[-1]
    assert (last.replicas, last.reason) == (1, R.NO_TRAFFIC)
    assert last.explanation is not None and last.explanation.demand.total == 0.0


# --- the SLO feedback -------------------------------------------------------------------------


def test_a_load_step_with_a_latency_miss_scales_out_for_the_slo() -> None:
    loop = settled(2, rate=10.0)
    d = loop.step(rate=80.0, e2e=12_000.0)
    assert (d.replicas > 2, d.reason) == (True, R.SLO_VIOLATED)
    assert d.slo_error == pytest.approx(1.2)


def test_a_latency_miss_the_model_does_not_explain_grows_the_correction_to_a_scale_out() -> None:
    loop = settled(1, rate=10.0)
    # Three times the target while the model says 0.4 replica: the correction grows by its
    # largest step, CORRECTION_STEP_MAX, each cycle.
    ds = loop.run(200, rate=10.0, e2e=30_000.0)
    up = next(i for i, d in enumerate(ds) if d.replicas > 1)
    assert ds[up].reason == R.SLO_VIOLATED
    corrections = [d.explanation.need.correction for d in ds if d.explanation]
    assert corrections[: up + 1] == sorted(set(corrections[: up + 1]))  # grows each cycle
    assert max(corrections) <= law.CORRECTION_MAX
    assert {d.explanation.demand.total for d in ds if d.explanation} == {10.0}  # the load did not


@pytest.mark.parametrize("cycle", [CYCLE, 5.0])
def test_a_learnt_correction_fades_with_relaxed_time_not_with_the_decision_count(
        cycle: float) -> None:
    loop = Loop(replicas=1, cycle=cycle)
    loop.run(600, rate=10.0)
    learnt = loop.run(200, rate=10.0, e2e=30_000.0)[-1].explanation
    assert learnt is not None and learnt.need.correction > 2.0
    # Half an hour well inside the targets (e2e at 0.4 of its target), at any interval.
    relaxed = loop.run(1800, rate=10.0)[-1].explanation
    assert relaxed is not None
    assert relaxed.need.correction / learnt.need.correction == pytest.approx(
        0.5 ** (1800 / law.CORRECTION_HALF_LIFE_S), rel=0.02)
    # A gap between decisions (an operator restarted) vouches for one window at most.
    loop.now += 7200
    after_gap = loop.step(rate=10.0).explanation
    assert after_gap is not None
    assert after_gap.need.correction / relaxed.need.correction == pytest.approx(
        0.5 ** (loop.policy.window_s / law.CORRECTION_HALF_LIFE_S), rel=0.02)


@pytest.mark.parametrize(("error", "growth"), [(1.005, 1.005), (1.05, 1.05), (1.21, 1.1),
                                             (1.44, 1.2), (9.0, law.CORRECTION_STEP_MAX)])
def test_a_miss_grows_the_correction_by_the_error_near_the_objective_and_its_root_beyond(
        error: float, growth: float) -> None:
    # A P99 read 0.5% over its objective (interpolated inside a coarse bucket) adds 0.5% of
    # replicas, not a tenth that then outlives the hour at full cost.
    loop = settled(2, rate=10.0)
    before = loop.step(rate=10.0).explanation
    after = loop.step(rate=10.0, e2e=error * loop.policy.e2e_target_ms).explanation
    assert before is not None and after is not None
    assert after.need.correction / before.need.correction == pytest.approx(growth, rel=1e-6)


@pytest.mark.parametrize("remembered", [0.5, 0.92, 9.0])
def test_a_remembered_correction_outside_its_range_is_brought_inside_it(
        remembered: float) -> None:
    # Status written by an operator whose correction could decay below 1, or edited by
    # hand: the next decision plans with the correction inside CORRECTION_MIN..MAX, at any
    # error (e2e 0.8 of its target holds a correction where it is).
    loop = Loop(replicas=2, state=make_state(correction=remembered))
    d = loop.step(rate=10.0, e2e=0.8 * loop.policy.e2e_target_ms)
    assert d.explanation is not None
    assert d.explanation.need.correction == pytest.approx(
        min(law.CORRECTION_MAX, max(law.CORRECTION_MIN, remembered)))


def test_a_small_persistent_latency_miss_is_not_stuck_inside_the_dead_band() -> None:
    loop = settled(1, rate=10.0)
    ds = loop.run(600, rate=10.0, e2e=12_000.0)  # 20% over target, every cycle
    assert R.SLO_VIOLATED in {d.reason for d in ds}
    assert ds[-1].replicas > 1


def test_no_scale_in_while_the_slo_is_violated() -> None:
    loop = settled(3, rate=60.0)
    assert loop.replicas == 3
    ds = loop.run(600, rate=10.0, ttft=1_500.0)
    assert {(d.replicas, d.reason) for d in ds} == {(3, R.SLO_VIOLATED)}
    ds = loop.run(900, rate=10.0)  # latency back inside: the scale-in goes ahead
    assert ds[-1].replicas < 3


@pytest.mark.parametrize(("e2e", "reason", "held"), [
    # A measured miss (1.1 of the objective) stops the scale-in, as it does anywhere.
    (4_400.0, R.SLO_VIOLATED, False),
    # Met, but inside the planning margin (0.9): the knee the model sizes at when the
    # target is out of its reach says nothing of the end-to-end latency, so the
    # measurement decides and the replicas stay.
    (3_600.0, R.LATENCY_HEADROOM, True),
])
def test_where_the_model_calls_the_target_out_of_reach_the_measured_e2e_holds_a_scale_in(
        e2e: float, reason: str, held: bool) -> None:
    # 200-token outputs leave a 4 s target too little per token for the model's tail
    # request (TargetInfeasible), yet the replicas meet it where they run small batches.
    policy = make_policy(e2e_target_ms=4_000.0)
    loop = settled(3, rate=60.0, policy=policy, e2e=3_000.0)
    assert loop.replicas == 3
    ds = loop.run(600, rate=10.0, e2e=e2e)
    assert {d.limited_reason for d in ds} == {R.TARGET_INFEASIBLE}
    assert {(d.replicas, d.reason) for d in ds} == {(3, reason)}
    assert {d.explanation is not None and d.explanation.e2e_held for d in ds} == {held}
    assert ds[-1].need is not None and ds[-1].need < 2  # the model alone would scale in
    ds = loop.run(900, rate=10.0, e2e=3_000.0)  # outside the margin: the scale-in goes ahead
    assert ds[-1].replicas < 3
    assert not any(d.explanation is not None and d.explanation.e2e_held for d in ds)


def test_a_feasible_target_scales_in_with_e2e_inside_its_objective() -> None:
    # Where the model reaches the targets its sizing stands for the latency: e2e at 0.9 of
    # its objective holds nothing.
    loop = settled(3, rate=60.0, e2e=9_000.0)
    ds = loop.run(900, rate=10.0, e2e=9_000.0)
    assert R.TARGET_INFEASIBLE not in {d.limited_reason for d in ds}
    assert ds[-1].replicas < 3
    assert R.LATENCY_HEADROOM not in {d.reason for d in ds}


def _target_for_margin(share: float) -> float:
    """An e2e target whose per-token budget (margin applied) is ``share`` of the smallest
    batch's inter-token latency on the default seed and request shape."""
    policy = make_policy()
    best = replica_capacity(SEED, prompt_tokens=PROMPT, output_tokens=OUTPUT, itl_budget=1e9,
                            min_batch=policy.min_batch, max_batch=policy.max_batch).best_itl_ms
    tail = TAIL_OUTPUT_FACTOR * OUTPUT - 1.0
    return policy.ttft_target_ms + tail * share * best / LATENCY_MARGIN


@pytest.mark.parametrize(("share", "miss", "grows"), [
    # The smallest batch misses the target only with the planning margin applied: the
    # model's tail request is an estimate, so the measured miss is feedback and replicas
    # are added for it, while the model still reports the target out of reach.
    pytest.param(0.9, 1.15, True, id="inside-the-margin"),
    # Even the smallest batch takes far longer per token than the target leaves: more
    # replicas cannot shorten a step, so the miss holds the replicas but adds none.
    pytest.param(0.6, 1.5, False, id="beyond-the-margin"),
])
def test_an_end_to_end_miss_the_model_calls_out_of_reach_adds_replicas_only_inside_the_margin(
        share: float, miss: float, grows: bool) -> None:
    target = _target_for_margin(share)
    loop = settled(2, rate=30.0, policy=make_policy(e2e_target_ms=target), e2e=0.5 * target)
    start = loop.replicas
    ds = loop.run(600, rate=30.0, e2e=miss * target)
    assert {d.limited_reason for d in ds} == {R.TARGET_INFEASIBLE}
    corrections = [d.explanation.need.correction for d in ds if d.explanation]
    if grows:
        assert R.SLO_VIOLATED in {d.reason for d in ds}
        assert ds[-1].replicas > start and max(corrections) > 1.0
    else:
        assert {d.replicas for d in ds} == {start} and max(corrections) <= 1.0


def test_ready_pods_without_series_hold_a_scale_in() -> None:
    # One of three Ready pods is not scraped (its series are gone): the load reads a third
    # low, so the replicas are not taken away on it; once it reports again, they are.
    loop = settled(3, rate=60.0)
    assert loop.replicas == 3
    ds = loop.run(900, rate=10.0, pods=2)
    assert {(d.replicas, d.reason) for d in ds[-10:]} == {(3, R.PODS_UNREPORTED)}
    ds = loop.run(900, rate=10.0, pods=3)
    assert ds[-1].replicas < 3
    # Pods still warming up may not be scraped yet: they do not count as unreported.
    warm = settled(3, rate=60.0)
    ds = warm.run(900, rate=10.0, pods=2, warming=1)
    assert ds[-1].replicas < 3


def test_the_correction_waits_while_asked_for_replicas_start() -> None:
    loop = settled(1, rate=10.0)
    first = loop.step(rate=40.0)
    assert first.replicas > 1 and first.explanation is not None
    ds = [loop.step(rate=40.0, e2e=15_000.0, ready=1, starting=loop.replicas - 1)
          for _ in range(5)]
    assert {d.explanation.need.correction for d in ds if d.explanation} == {
        first.explanation.need.correction}
    assert {(d.replicas, d.reason) for d in ds} == {(first.replicas, R.WAITING_FOR_REPLICAS)}
    assert loop.step(rate=40.0).reason != R.WAITING_FOR_REPLICAS  # all Ready: done waiting


def test_a_rolling_updates_surge_successors_are_no_capacity_arriving() -> None:
    # Every replica asked for is Ready and a successor starts beside one (an engine-argument
    # roll): it replaces a Ready pod, it adds nothing, so an end-to-end miss teaches the
    # correction as it does without a roll.
    def missed(starting: int) -> Decision:
        loop = settled(2, rate=10.0)
        return loop.step(rate=10.0, e2e=30_000.0, starting=starting)

    calm, rolling = missed(0), missed(1)
    assert rolling.reason == calm.reason != R.WAITING_FOR_REPLICAS
    assert rolling.explanation is not None and calm.explanation is not None
    assert rolling.explanation.need.correction == calm.explanation.need.correction > 1.0


@pytest.mark.parametrize(("ttft", "ttft_target", "waited"), [
    (3_000.0, 1_000.0, True), (300.0, 1_000.0, False),
    # First tokens over an objective the mean prompt's prefill alone takes: no queue.
    (3_000.0, 1.0, False)])
def test_a_miss_within_its_reach_of_a_queued_shortfall_does_not_grow_the_correction(
        ttft: float, ttft_target: float, waited: bool) -> None:
    # Requests finishing now with an end-to-end latency E arrived E ago: a miss read within
    # max(window, E) of the last decision that found replicas starting while first tokens
    # queued (over an objective replicas can reach) is that queue's, not the model's error.
    # Past the reach the same miss grows it; a shortfall without a queue holds nothing.
    loop = settled(1, policy=make_policy(ttft_target_ms=ttft_target), rate=10.0)
    loop.step(rate=40.0)
    assert loop.replicas > 1
    short = loop.step(rate=40.0, ttft=ttft, ready=1, starting=loop.replicas - 1)
    short_at = loop.now - loop.cycle
    assert short.explanation is not None
    assert short.state.short_time == (short_at if waited else None)
    e2e = 3.0 * loop.policy.e2e_target_ms
    reach = law.shortfall_reach(make_signals(e2e=e2e), loop.policy)
    within, beyond = [], []
    for _ in range(round(2 * reach / loop.cycle)):
        at = loop.now
        d = loop.step(rate=40.0, e2e=e2e)
        assert d.explanation is not None
        (within if at - short_at <= reach else beyond).append(d.explanation.need.correction)
    base = short.explanation.need.correction
    assert within and beyond and beyond[0] > base
    assert (set(within) == {base}) is waited


@pytest.mark.parametrize(("e2e", "reach"), [(None, 60.0), (30_000.0, 60.0),
                                            (240_000.0, 240.0), (float("inf"), 60.0)])
def test_the_shortfall_reach_is_the_window_or_the_measured_end_to_end_latency(
        e2e: float | None, reach: float) -> None:
    policy = make_policy(window_s=60.0)
    assert law.shortfall_reach(make_signals(e2e=e2e), policy) == reach


# --- protections ------------------------------------------------------------------------------


def test_a_scale_in_soon_after_a_scale_out_is_a_blocked_reversal() -> None:
    loop = settled(1, rate=10.0)
    loop.policy = replace(loop.policy, min_replicas=3)
    up = loop.step(rate=10.0)
    assert (up.replicas, up.limited_reason) == (3, R.TOO_FEW_REPLICAS)
    loop.policy = replace(loop.policy, min_replicas=1)  # lowered again at once
    ds = loop.run(400, rate=10.0, ttft=30.0)  # no queueing to hold the scale-in
    blocked = [d for d in ds if d.reason == R.REVERSAL_BLOCKED]
    assert blocked and all(d.replicas == 3 for d in blocked)
    # Blocked for the scale-down window after the scale-out, then it goes.
    assert (len(blocked) + 1) * CYCLE >= loop.policy.scale_down_stabilization_s
    assert ds[-1].replicas == 1


def test_pending_pods_stop_further_scale_out() -> None:
    loop = settled(2, rate=10.0)
    asked = loop.step(rate=60.0).replicas
    ds = [loop.step(rate=200.0, ready=2, pending=asked - 2, ttft=3_000.0, waiting=50.0)
          for _ in range(5)]
    assert {(d.replicas, d.reason, d.limited_reason) for d in ds} == {(asked, R.PENDING, R.PENDING)}
    assert all(d.need is not None and d.need > asked for d in ds)


def test_a_surge_is_added_in_steps_up_to_the_maximum() -> None:
    loop = settled(2, rate=10.0)
    start, step = loop.replicas, loop.policy.max_scale_up_step
    ds = loop.run(100, rate=300.0)
    assert [d.replicas for d in ds] == [start + step] + [loop.policy.max_replicas] * (len(ds) - 1)
    assert ds[0].limited_reason == R.SCALE_UP_LIMIT
    assert {d.limited_reason for d in ds[1:]} == {R.TOO_MANY_REPLICAS}


def test_the_gpu_budget_caps_replicas_of_several_gpus() -> None:
    loop = Loop(replicas=2, policy=make_policy(gpu_budget=6))
    ds = loop.run(200, rate=100.0, gpus_per_replica=2)
    assert max(d.replicas for d in ds) == 3  # 6 GPUs / 2 per replica
    assert ds[-1].limited_reason == R.GPU_BUDGET and (ds[-1].need or 0) > 3


def test_min_replicas_above_the_need_is_reported() -> None:
    ds = Loop(replicas=3, policy=make_policy(min_replicas=3)).run(400, rate=10.0)
    assert {(d.replicas, d.limited_reason) for d in ds} == {(3, R.TOO_FEW_REPLICAS)}


def test_an_inter_token_target_below_one_step_is_reported_and_not_chased() -> None:
    loop = Loop(replicas=2, policy=make_policy(itl_target_ms=3.0))  # a step takes over 5 ms
    ds = loop.run(300, rate=30.0, itl=6.0)
    assert {d.limited_reason for d in ds} == {R.TARGET_INFEASIBLE}
    # Sized on throughput: the ITL miss neither cuts the limit nor counts as an SLO error.
    assert {(d.replicas, d.batch_limit, d.limit_reason) for d in ds} == {(2, 64, None)}
    # The error is the worst of TTFT (0.3) and end to end (0.4, a target within reach).
    assert all(d.slo_error == pytest.approx(0.4) for d in ds)
    assert max(d.explanation.need.correction for d in ds if d.explanation) <= 1.0


# --- missing data -----------------------------------------------------------------------------


@pytest.mark.parametrize(("signals", "reason"), [
    ({"state": MetricsState.UNAVAILABLE, "rate": None}, R.METRICS_UNAVAILABLE),
    ({"state": MetricsState.STALE}, R.METRICS_STALE),
    ({"state": MetricsState.EMPTY, "rate": None}, R.METRICS_EMPTY),
    ({"state": MetricsState.PARTIAL, "rate": None}, R.METRICS_PARTIAL),
    ({"rate": math.nan}, R.METRICS_PARTIAL),
    ({"rate": math.inf}, R.METRICS_PARTIAL),
], ids=["unavailable", "stale", "empty", "partial", "nan-rate", "infinite-rate"])
def test_missing_data_holds_the_last_good_decision(signals: dict[str, Any], reason: str) -> None:
    loop = settled(3, rate=60.0)
    loop.run(40, rate=60.0, kv=0.99)  # the limit came down: 64 -> 48 -> 36
    good = loop.decisions[-1]
    assert good.batch_limit == 36
    # The Deployment drifts meanwhile (someone scaled it): the hold keeps the law's last word.
    ds = loop.run(600, desired=5, batch_limit=64, **signals)
    assert {(d.valid, d.replicas, d.batch_limit, d.reason) for d in ds} == {
        (False, good.replicas, 36, reason)}
    assert all(d.state == good.state and d.explanation is None and d.limited_reason is None
               for d in ds)
    assert loop.step(rate=60.0).valid


@pytest.mark.parametrize("state",
                         [MetricsState.STALE, MetricsState.UNAVAILABLE, MetricsState.EMPTY])
def test_missing_data_never_scales_running_replicas_to_zero(state: MetricsState) -> None:
    # Status written while the service was at zero; replicas run again.
    loop = Loop(replicas=3, policy=make_policy(min_replicas=0),
                state=make_state(last_good_replicas=0))
    ds = loop.run(300, state=state, rate=None)
    assert {(d.valid, d.replicas) for d in ds} == {(False, 3)}


def test_a_new_service_runs_its_minimum_until_metrics_arrive() -> None:
    loop = Loop(replicas=0, policy=make_policy(min_replicas=2))
    empty: dict[str, Any] = {"state": MetricsState.EMPTY, "rate": None}
    d = loop.step(ready=0, **empty)
    assert (d.valid, d.replicas, d.reason) == (True, 2, R.WAITING_FOR_REPLICAS)
    d = loop.step(ready=0, starting=2, **empty)
    assert (d.valid, d.replicas, d.reason) == (True, 2, R.WAITING_FOR_REPLICAS)
    d = loop.step(**empty)  # Ready, not scraped yet
    assert (d.valid, d.replicas, d.reason) == (False, 2, R.METRICS_EMPTY)
    d = loop.step(rate=5.0)
    assert (d.valid, d.replicas) == (True, 2)


# --- the live batch limit ---------------------------------------------------------------------


def lowered() -> Loop:
    """Two replicas whose inter-token latency went over its 30 ms target for a minute."""
    loop = settled(2, policy=ITL_POLICY, rate=30.0, itl=20.0)
    ds = loop.run(60, rate=30.0, itl=40.0)
    assert [d.batch_limit for d in ds] == [48, 36, 27]  # x LIMIT_DOWN_FACTOR each cycle
    return loop


def test_an_inter_token_miss_lowers_the_limit_and_the_replicas_follow() -> None:
    loop = lowered()
    ds = loop.decisions[-3:]
    assert {d.limit_reason for d in ds} == {R.LIMIT_LOWERED}
    assert ds[0].reason == R.LIMIT_LOWERED  # the replicas stayed: the limit move is the news
    # The replicas are planned at the batch they run now, so fewer per replica: more of them.
    assert all(d.explanation is not None and d.explanation.need.batch == d.batch_limit
               for d in ds)
    assert ds[-1].replicas > 2


def test_each_decision_keeps_the_measured_inter_token_latency_against_its_objective() -> None:
    """What the ITL lever reads (``reconcile.chunking``): over 1 while the percentile
    misses, under 1 once inside, unknown without samples or without an objective."""
    loop = settled(2, policy=ITL_POLICY, rate=30.0, itl=20.0)
    assert loop.state.itl_over == pytest.approx(20.0 / 30.0)
    loop.run(20, rate=30.0, itl=45.0)
    assert loop.state.itl_over == pytest.approx(1.5)
    loop.run(20, rate=30.0, itl=None)
    assert loop.state.itl_over is None
    assert settled(2, rate=30.0, itl=45.0).state.itl_over is None  # no ITL objective


def test_each_decision_keeps_the_measured_jitter_against_its_bound() -> None:
    """What the jitter lever reads (``reconcile.chunking``): the window's jitter over
    ``throughputCVMax``, unknown without a bound, without samples, or from a window of too
    few requests to read a spread from (the policy's window is 60 s)."""
    bounded = make_policy(jitter_max=0.5)
    loop = settled(2, policy=bounded, rate=10.0, jitter=0.2)
    assert loop.state.jitter_over == pytest.approx(0.4)
    loop.run(20, rate=10.0, jitter=0.9)
    assert loop.state.jitter_over == pytest.approx(1.8)
    loop.run(20, rate=10.0, jitter=None)
    assert loop.state.jitter_over is None
    loop.run(20, rate=0.2, jitter=0.9)  # 12 requests in the window
    assert loop.state.jitter_over is None
    assert settled(2, rate=10.0, jitter=0.9).state.jitter_over is None  # no bound


def test_the_limit_comes_back_toward_the_model_once_latency_is_inside() -> None:
    loop = lowered()
    ds = loop.run(600, rate=30.0, itl=15.0)
    restored = [d for d in ds if d.limit_reason == R.LIMIT_RESTORED]
    assert restored and restored[0].batch_limit > 27
    assert ds[-1].state.limit_bias == 1.0
    assert ds[-1].batch_limit >= (1 - law.LIMIT_MODEL_CHANGE) * 64
    # A way back moves at most once a window, the last cut included.
    changes = [t for t, _ in ds[-1].state.limits][2:]
    assert len(changes) >= 2
    assert all(b - a >= loop.policy.window_s for a, b in itertools.pairwise(changes))


def test_a_queue_while_replicas_start_raises_the_limit() -> None:
    loop = settled(2, policy=ITL_POLICY, rate=30.0, itl=20.0)
    loop.run(40, rate=30.0, itl=40.0)
    assert loop.limit == 36
    asked = loop.step(rate=60.0, itl=15.0).replicas
    assert asked > 2
    d = loop.step(rate=60.0, itl=15.0, ttft=2_500.0, waiting=30.0, ready=2, starting=asked - 2)
    assert (d.batch_limit, d.limit_reason) == (math.ceil(36 * law.LIMIT_UP_FACTOR),
                                               R.LIMIT_RAISED)
    assert d.reason == R.LIMIT_RAISED  # the action taken outranks why replicas stayed


def test_the_limit_follows_the_model_batch_as_prompts_grow() -> None:
    loop = settled(2, policy=make_policy(itl_target_ms=12.0), rate=10.0, itl=8.0)
    assert loop.limit == 64
    ds = loop.run(600, rate=10.0, itl=8.0, prompt=2_000.0)
    resized = [d.batch_limit for d in ds if d.limit_reason == R.LIMIT_RESIZED]
    assert resized and resized == sorted(resized, reverse=True) and resized[-1] < 0.75 * 64
    assert ds[-1].explanation is not None and ds[-1].explanation.limit_to == ds[-1].batch_limit


@pytest.mark.parametrize(("kv", "preemptions"), [(0.99, None), (0.92, 1.0)])
def test_a_full_kv_cache_lowers_the_limit(kv: float, preemptions: float | None) -> None:
    loop = settled(2, rate=30.0)
    d = loop.step(rate=30.0, kv=kv, preemptions=preemptions)
    assert (d.batch_limit, d.limit_reason) == (48, R.LIMIT_LOWERED)


def test_a_nearly_full_kv_cache_holds_the_limit_where_it_is() -> None:
    loop = lowered()
    ds = loop.run(400, rate=30.0, itl=15.0, kv=0.92)  # no preemption: no cut, and no way up
    assert {(d.batch_limit, d.limit_reason) for d in ds} == {(27, None)}


@pytest.mark.parametrize("mode", ["off", "restart"])
def test_off_and_restart_modes_leave_the_limit_on_small_latency_moves(mode: str) -> None:
    loop = settled(2, policy=replace(ITL_POLICY, batching_mode=mode), rate=30.0, itl=20.0)
    ds = loop.run(200, rate=30.0, itl=40.0)
    assert {(d.batch_limit, d.limit_reason) for d in ds} == {(64, None)}


# --- demand -----------------------------------------------------------------------------------


def test_demand_is_what_arrives_at_the_gateway_not_what_a_saturated_service_finishes() -> None:
    loop = settled(1, rate=10.0, arrivals=10.0)
    d = loop.step(rate=20.0, arrivals=40.0, waiting=100.0, ttft=3_000.0)
    assert d.explanation is not None
    assert (d.explanation.demand.source, d.explanation.demand.arrivals) == ("gateway", 40.0)
    assert d.explanation.demand.total >= 40.0 and d.replicas > 1


def test_a_step_up_is_met_half_a_window_sooner_and_never_above_its_level() -> None:
    """The gateway's last half window reaches a step's new level after half a window, the
    whole window's mean after a window: demand is the higher of the two, so the replicas
    come a cycle sooner and are planned for the new level, not beyond it. A falling load
    (the last half below the mean) is read from the whole window."""
    first: dict[str, int] = {}
    for name, half in (("window mean", False), ("last half", True)):
        loop = settled(2, rate=40.0, arrivals=40.0)
        for i in range(1, 7):  # 40 -> 70 req/s at 0 s; a cycle every 20 s, a 60 s window
            t = i * CYCLE
            mean = 40.0 + 30.0 * min(1.0, t / 60.0)
            recent = 40.0 + 30.0 * min(1.0, t / 30.0) if half else None
            d = loop.step(rate=mean, arrivals=mean, recent=recent)
            assert d.explanation is not None
            assert d.explanation.demand.arrivals == max(mean, recent or 0.0) <= 70.0
            if d.replicas > 2:
                first.setdefault(name, i)
    assert first["last half"] < first["window mean"]
    loop = settled(4, rate=60.0, arrivals=60.0)
    d = loop.step(rate=60.0, arrivals=60.0, recent=40.0)
    assert d.explanation is not None and d.explanation.demand.arrivals == 60.0


def test_without_a_gateway_demand_is_completions_plus_the_queue_growth() -> None:
    loop = settled(1, rate=10.0)
    ds = [loop.step(rate=20.0, waiting=w, ttft=3_000.0) for w in (400.0, 800.0, 1_200.0)]
    for d in ds:  # 400 more waiting every 20 s: 20 req/s beyond the 20 finishing
        assert d.explanation is not None
        assert d.explanation.demand.source == "completions"
        assert d.explanation.demand.arrivals == pytest.approx(40.0)
        assert d.explanation.demand.backlog > 0
    d = loop.step(rate=20.0, waiting=0.0)  # the queue drained: never negative arrivals
    assert d.explanation is not None and d.explanation.demand.arrivals == 0.0


def burst_replicas(peak: float, mean: float, batch: int, ttft_ms: float) -> float:
    """Replicas that clear a short window's prompts arriving at ``peak`` req/s on top of
    the decode work of ``mean`` req/s within the TTFT objective (margin applied), at most
    BURST_UTILIZATION busy (law.estimate_need's docstring)."""
    prefill = SEED.prefill_request_ms(PROMPT)
    decode = OUTPUT * SEED.step_ms(batch, context=decode_context(PROMPT, OUTPUT)) / batch
    work = (peak * prefill + mean * decode) / 1000.0
    window = law.SHORT_WINDOW_S
    return work * window / (window + LATENCY_MARGIN * ttft_ms / 1000.0) / law.BURST_UTILIZATION


def test_a_short_burst_sizes_its_own_window_and_a_load_that_dropped_holds_nothing() -> None:
    """A short-window peak sizes replicas for its prompts while its window shows it; once
    the windows show the mean again (a step up or a drop looks like a one-window burst),
    nothing is held for it."""
    loop = settled(2, rate=20.0, arrivals=20.0, peak=20.0)
    during = loop.run(60, rate=20.0, arrivals=20.0, peak=120.0)
    after = loop.run(120, rate=20.0, arrivals=20.0, peak=20.0)
    for d in during:
        e = d.explanation
        assert e is not None and e.demand.excess == pytest.approx(100.0)
        assert e.need.burst_replicas == pytest.approx(burst_replicas(120.0, 20.0, e.need.batch,
                                                                     1_000.0))
    for d in after:
        e = d.explanation
        assert e is not None and e.demand.excess == 0.0
        assert e.need.burst_replicas == pytest.approx(burst_replicas(20.0, 20.0, e.need.batch,
                                                                     1_000.0))


def test_a_tighter_ttft_objective_needs_more_replicas_for_a_burst() -> None:
    got = {}
    for ttft in (500.0, 2_000.0):
        loop = settled(2, policy=make_policy(ttft_target_ms=ttft), rate=20.0, arrivals=20.0)
        e = loop.step(rate=20.0, arrivals=20.0, peak=120.0).explanation
        assert e is not None
        want = burst_replicas(120.0, 20.0, e.need.batch, ttft)
        assert e.need.burst_replicas == pytest.approx(want)
        got[ttft] = e.need.burst_replicas
    assert got[500.0] > got[2_000.0]


def test_a_short_burst_is_sized_for_its_prompts_not_as_sustained_load() -> None:
    loop = settled(1, rate=20.0, arrivals=20.0, peak=20.0)
    d = loop.step(rate=20.0, arrivals=20.0, peak=120.0)
    assert d.explanation is not None
    n = d.explanation.need
    assert n.driver == "burst"
    assert n.replicas == pytest.approx(burst_replicas(120.0, 20.0, n.batch, 1_000.0))
    assert d.replicas == math.ceil(n.replicas) < math.ceil(120.0 / n.per_replica)


def test_a_smooth_falling_ramp_is_not_held_up_as_a_burst() -> None:
    loop = settled(4, rate=80.0, arrivals=80.0, peak=80.0)
    ds = [loop.step(rate=r, arrivals=r, peak=r) for r in (80.0 - 2.0 * i for i in range(1, 31))]
    for d in ds:  # -6 req/s a minute, from 80 to 20
        assert d.explanation is not None
        demand = d.explanation.demand
        assert demand.burst_kind in ("none", "noise") and demand.excess == 0.0
        assert demand.total <= 1.1 * demand.arrivals
    assert ds[-1].explanation is not None and ds[-1].explanation.demand.shape == "falling"
    assert ds[-1].replicas < 4


# --- the model ----------------------------------------------------------------------------------

SLOWER = 1.3  # the replicas' true step times over the seed's


def test_speed_is_learnt_at_low_load_from_the_mean_decode_time() -> None:
    rate, replicas = 10.0, 2
    m, batch = decode_time(SEED.scaled(1 / SLOWER), rate / replicas, 64)
    assert batch < 64 / 2  # far from saturation
    ds = Loop(replicas=replicas).run(12 * CYCLE, rate=rate, decode_ms=m)
    models = [d.explanation.model for d in ds if d.explanation]
    speeds = [x.speed for x in models]
    assert speeds == sorted(speeds, reverse=True)
    assert speeds[9] == pytest.approx(1 / SLOWER, abs=0.01)  # within 10 cycles
    assert [x.speed_samples for x in models] == list(range(1, 13))
    # The first error is the measured over the seed's prediction at the observed batch.
    share = rate / replicas * SEED.prefill_request_ms(PROMPT) / 1000.0
    predicted = SEED.step_ms(batch, context=decode_context(PROMPT, OUTPUT)) / (1.0 - share)
    assert models[0].error == pytest.approx(m / predicted)
    assert models[-1].error == pytest.approx(1.0, abs=0.01)
    # A slower replica serves fewer requests: the plan follows.
    first, last = ds[0].explanation, ds[-1].explanation
    assert first is not None and last is not None
    assert last.need.per_replica < first.need.per_replica * 0.85


@pytest.mark.parametrize("obs", [
    {"warming": 1}, {"starting": 1}, {"ready": 0}, {"rate": 0.2},
], ids=["warming", "starting", "none-ready", "too-few-requests"])
def test_cold_replicas_and_thin_windows_do_not_teach_the_speed(obs: dict[str, Any]) -> None:
    m, _ = decode_time(SEED.scaled(1 / SLOWER), 5.0, 64)
    p = 3 * prefill_time(SEED, 5.0, m)
    ds = Loop(replicas=2).run(200, **{"rate": 10.0, "decode_ms": m, "prefill_ms": p, **obs})
    assert {(d.explanation.model.speed, d.explanation.model.speed_samples,
             d.explanation.model.error, d.explanation.model.prefill_error)
            for d in ds if d.explanation} == {(1.0, 0, None, None)}


@pytest.mark.parametrize("slower", [2.0, 0.6], ids=["dearer-prompts", "cheaper-prompts"])
def test_the_prefill_error_is_reported_and_moves_no_replica(slower: float,
                                                            golden: Any) -> None:
    """Prompts take ``slower`` times the model's prefill work: each decision reports that
    much error on the mean prefill time, in the explanation and in the state, and decides
    as a loop that measures no prefill time does."""
    rate, replicas = 10.0, 2
    m, _ = decode_time(SEED, rate / replicas, 64)
    dearer = replace(SEED, prefill_ms_per_token=SEED.prefill_ms_per_token * slower,
                     attn_ms_per_token2=SEED.attn_ms_per_token2 * slower)
    p = prefill_time(dearer, rate / replicas, m)
    measured = Loop(replicas=replicas).run(10 * CYCLE, rate=rate, decode_ms=m, prefill_ms=p)
    unmeasured = Loop(replicas=replicas).run(10 * CYCLE, rate=rate, decode_ms=m)
    want = p / prefill_time(SEED, rate / replicas, m)
    assert (want > 1.2) == (slower > 1)  # the spread this test tells apart
    errors = [d.explanation.model.prefill_error for d in measured if d.explanation]
    assert errors == pytest.approx([want] * len(measured), rel=1e-6)
    assert measured[-1].state.prefill_error == pytest.approx(want, rel=1e-6)
    assert {d.explanation.model.prefill_error for d in unmeasured if d.explanation} == {None}
    assert [(d.replicas, d.batch_limit) for d in measured] == [
        (d.replicas, d.batch_limit) for d in unmeasured]
    if slower > 1:
        golden.check("control", "law.decision.prefill-error", measured[-1].message)


def test_a_new_gpu_type_starts_from_the_seed_speed() -> None:
    m, _ = decode_time(SEED.scaled(1 / SLOWER), 5.0, 64)
    loop = settled(2, seconds=200, rate=10.0, decode_ms=m)
    assert loop.state.speed < 0.9
    e = loop.step(rate=10.0, hardware="H100-SXM5-80GB").explanation
    assert e is not None
    assert (e.model.speed, e.model.speed_samples, e.model.speed_key) == (
        1.0, 0, "H100-SXM5-80GB/bf16")


def test_a_window_of_one_request_barely_moves_the_request_shape() -> None:
    loop = settled(2, rate=10.0)
    e = loop.step(rate=1.0 / 60.0, prompt=5_000.0).explanation
    assert e is not None
    assert PROMPT < e.model.prompt <= PROMPT + law.SHAPE_ALPHA_MIN * (5_000.0 - PROMPT) + 1e-6


def test_prefix_cache_hits_raise_what_a_replica_serves() -> None:
    cold = Loop(replicas=2).run(300, rate=60.0)[-1]
    warm = Loop(replicas=2).run(300, rate=60.0, hit=0.8)[-1]
    assert cold.explanation is not None and warm.explanation is not None
    assert cold.explanation.model.cached == 0.0
    assert warm.explanation.model.cached == pytest.approx(0.8)
    assert warm.explanation.need.per_replica > 1.3 * cold.explanation.need.per_replica
    assert warm.replicas < cold.replicas


def test_long_prompts_lower_what_a_replica_serves_and_its_batch() -> None:
    short = Loop(replicas=2).run(300, rate=20.0)[-1].explanation
    long = Loop(replicas=2).run(300, rate=20.0, prompt=4_000.0)[-1].explanation
    assert short is not None and long is not None
    assert long.model.prompt == pytest.approx(4_000.0)
    # Prefill and longer contexts both cost: a step holds fewer sequences within the budget.
    assert long.need.per_replica < short.need.per_replica / 3
    assert long.need.batch < short.need.batch
    assert long.replicas_to > short.replicas_to


def test_a_measured_tail_of_long_answers_shrinks_the_batch_and_adds_replicas(
        golden: Any) -> None:
    """Answers of 200 tokens on average: the model assumes a tail answer of 480 tokens. A
    window of 2,400 requests whose answers at the end-to-end percentile are over 1,000
    tokens leaves each of that answer's tokens half the time per token."""
    assumed = Loop(replicas=2).run(300, rate=40.0)[-1]
    measured = Loop(replicas=2).run(300, rate=40.0, answer_tail=1_000.0)[-1]
    a, m = assumed.explanation, measured.explanation
    assert a is not None and m is not None
    assert a.model.answer_tail is None
    assert m.model.answer_tail == pytest.approx(1_000.0)
    assert m.need.batch < a.need.batch
    assert m.need.per_replica < a.need.per_replica
    assert measured.replicas > assumed.replicas
    golden.check("control", "law.decision.answer-tail", measured.message)


@pytest.mark.parametrize(("rate", "answer_tail"), [
    pytest.param(10.0, 300.0, id="a-tail-shorter-than-the-assumed-one"),
    pytest.param(1.0, 1_000.0, id="a-window-of-60-requests"),
])
def test_an_answer_tail_inside_the_assumed_one_or_from_a_thin_window_changes_nothing(
        rate: float, answer_tail: float) -> None:
    assumed = Loop(replicas=2).run(300, rate=rate)[-1]
    measured = Loop(replicas=2).run(300, rate=rate, answer_tail=answer_tail)[-1]
    assert assumed.explanation is not None and measured.explanation is not None
    assert measured.explanation.need == assumed.explanation.need
    assert measured.replicas == assumed.replicas


@pytest.mark.parametrize("prompt", [500.0, 2_000.0])
def test_the_kv_cache_caps_the_planned_batch(prompt: float) -> None:
    kv_tokens = 40_000.0
    policy = make_policy(step_times=replace(SEED, kv_tokens=kv_tokens))
    e = Loop(replicas=2, policy=policy).run(200, rate=10.0, prompt=prompt)[-1].explanation
    roomy = Loop(replicas=2).run(200, rate=10.0, prompt=prompt)[-1].explanation
    assert e is not None and roomy is not None
    fits = int(KV_PLAN_SHARE * kv_tokens // (prompt + OUTPUT))
    assert e.need.batch == fits < roomy.need.batch


# --- scale-in from the error budget -------------------------------------------------------------

MID = 0.5


@pytest.mark.parametrize(("budget", "share"), [
    (None, 1.0),  # nothing judged yet
    (0.1, 1.0),
    (law.BUDGET_THIN, 1.0),
    (MID, 1 - (1 - law.SCALE_IN_FAST) * (MID - law.BUDGET_THIN)
     / (law.BUDGET_RICH - law.BUDGET_THIN)),  # linear between thin and rich
    (law.BUDGET_RICH, law.SCALE_IN_FAST),
    (0.95, law.SCALE_IN_FAST),
])
def test_the_error_budget_left_sets_how_long_a_scale_in_waits(budget: float | None,
                                                              share: float) -> None:
    loop = settled(3, rate=60.0, arrivals=60.0, budget=budget)
    assert loop.replicas == 3
    ds = loop.run(400, rate=10.0, arrivals=10.0, budget=budget)
    assert ds[0].explanation is not None
    window = ds[0].explanation.scale_in.window_s
    assert window == pytest.approx(share * loop.policy.scale_down_stabilization_s)
    first = next(i for i, d in enumerate(ds) if d.replicas < 3)
    assert {d.reason for d in ds[:first]} == {R.STABILIZING}
    # The last wish for 3 was a cycle before the drop: the first decision more than
    # `window` after it scales in.
    assert first * CYCLE == math.floor(window / CYCLE) * CYCLE


def test_a_rising_load_is_not_scaled_in_until_it_stops_rising(golden: Any) -> None:
    # Three replicas meet a load that climbs 20% every four windows from a level one
    # replica serves: for the next 15 minutes it needs fewer than two, yet none is given
    # up while it climbs (a stabilization window passes in the meantime); once it holds,
    # the scale-in comes.
    loop = Loop(replicas=3)
    span = 4 * loop.policy.window_s
    ds = []
    for i in range(45):
        a = 8.0 * math.exp(0.2 * i * CYCLE / span)
        ds.append(loop.step(rate=a, arrivals=a, budget=0.95, ttft=30.0))
    assert {d.replicas for d in ds} == {3}
    assert all(d.explanation is not None and d.explanation.need.replicas < 2 for d in ds)
    rising = [d for d in ds if d.reason == R.LOAD_RISING]
    assert rising and all(d.explanation is not None and d.explanation.scale_in.rising
                          for d in rising)
    assert ds[-1].reason == R.LOAD_RISING
    golden.check("control", "law.decision.load-rising", ds[-1].message)
    ds = loop.run(900, rate=a, arrivals=a, budget=0.95, ttft=30.0)
    assert ds[-1].replicas < 3
    assert R.LOAD_RISING not in {d.reason for d in ds[-10:]}


@pytest.mark.parametrize("shrinks", [True, False])
def test_a_rising_request_rate_whose_prompt_work_falls_is_scaled_in(shrinks: bool,
                                                                   golden: Any) -> None:
    # Eight replicas meet a request rate that climbs 20% every four windows from 4 req/s
    # of 12,000-token prompts. Where the prompts shrink by 40% every four windows (more of
    # each conversation cached, shorter turns), the prompt work arriving falls while the
    # requests rise: the need that reads lower is the requests' real cost, and the scale-in
    # comes within fifteen minutes. With prompts that stay as they are, the climb holds the
    # eight replicas (LoadRising).
    loop = Loop(replicas=8, policy=make_policy(max_replicas=50))
    span = 4 * loop.policy.window_s
    ds = []
    for i in range(45):
        x = i * CYCLE / span
        a = 4.0 * math.exp(0.2 * x)
        prompt = 12_000.0 * math.exp(-0.5 * x) if shrinks else 12_000.0
        ds.append(loop.step(rate=a, arrivals=a, budget=0.95, ttft=300.0, prompt=prompt))
    assert all(d.explanation is not None and d.explanation.need.replicas < 7 for d in ds)
    assert any(d.explanation is not None and d.explanation.demand.shape == "rising"
               for d in ds)
    if shrinks:
        assert ds[-1].replicas < 8
        assert R.LOAD_RISING not in {d.reason for d in ds[15:]}
        first = next(d for d in ds if d.replicas < 8)
        e = first.explanation
        assert e is not None and e.demand.shape == "rising" and not e.scale_in.rising
        golden.check("control", "law.decision.rising-requests-falling-work", first.message)
    else:
        assert {d.replicas for d in ds} == {8}
        assert R.LOAD_RISING in {d.reason for d in ds}


@pytest.mark.parametrize("grows", [True, False])
def test_prompt_work_rising_at_a_steady_request_rate_is_not_scaled_in(grows: bool,
                                                                golden: Any) -> None:
    # Four replicas serve 4 req/s of 4,000-token prompts, which two replicas would serve.
    # Where the prompts grow by 40% of their first length every four windows at the same
    # request rate (the prompt work arriving rises: the learnt shape trails it by minutes), none
    # is given up for ten minutes although the need stays under three; with prompts that
    # stay as they are, the same ten minutes scale in.
    loop = Loop(replicas=4)
    span = 4 * loop.policy.window_s
    ds = []
    for i in range(30):
        prompt = 4_000.0 * (1.0 + (0.4 * i * CYCLE / span if grows else 0.0))
        ds.append(loop.step(rate=4.0, arrivals=4.0, budget=0.95, ttft=300.0, prompt=prompt))
    assert all(d.explanation is not None and d.explanation.need.replicas < 3 for d in ds)
    if not grows:
        assert ds[-1].replicas < 4
        assert R.LOAD_RISING not in {d.reason for d in ds}
        return
    assert {d.replicas for d in ds} == {4}
    assert {d.reason for d in ds[5:]} == {R.LOAD_RISING}
    e = ds[-1].explanation
    assert e is not None and e.scale_in.rising and e.demand.shape == "steady"
    golden.check("control", "law.decision.prompt-work-rising", ds[-1].message)
    ds = loop.run(900, rate=4.0, arrivals=4.0, budget=0.95, ttft=300.0, prompt=prompt)
    assert ds[-1].replicas < 4


def test_rising_prompt_work_is_planned_for_the_prompts_new_replicas_will_meet(golden: Any
                                                                            ) -> None:
    # At a steady 10 req/s the prompts grow from 4,000 to 12,000 tokens over twelve
    # minutes. The learnt shape trails them by minutes, and a replica asked for now serves a
    # cold start later: the need is planned for the prompt work per request the trend
    # projects, so by the time the prompts reach 12,000 tokens the service runs the
    # replicas a service settled at 12,000 runs.
    policy = make_policy(max_replicas=50)
    final = settled(2, policy=policy, rate=10.0, arrivals=10.0, prompt=12_000.0).replicas
    loop = settled(2, policy=policy, rate=10.0, arrivals=10.0, prompt=4_000.0)
    assert final > loop.replicas + 2
    ds = [loop.step(rate=10.0, arrivals=10.0, prompt=4_000.0 + 8_000.0 * (i + 1) / 36)
          for i in range(36)]
    assert ds[-1].replicas >= final
    growing = [d for d in ds if d.explanation is not None and d.explanation.need.growth > 1.0]
    assert growing and all(d.explanation is not None and d.explanation.demand.shape == "steady"
                           for d in growing)
    golden.check("control", "law.decision.prompt-work-ahead", growing[0].message)


@pytest.mark.parametrize("offset", [0, 1])
def test_rising_prompt_work_is_planned_after_a_status_that_kept_no_prompt_work(
        offset: int) -> None:
    # A status written before prompt work was kept (an operator upgrade) holds rate samples
    # only. With decisions every 10 s (samples kept every other one), whichever decision
    # the upgrade lands on, rising prompts are planned ahead once the prompt work's samples
    # have built up beside the rates'.
    loop = Loop(replicas=2, policy=make_policy(max_replicas=50), cycle=10.0)
    loop.run(600 + 10 * offset, rate=10.0, arrivals=10.0, prompt=4_000.0)
    loop.state = replace(loop.state, loads=())
    ds = [loop.step(rate=10.0, arrivals=10.0, prompt=4_000.0 + 8_000.0 * (i + 1) / 72)
          for i in range(72)]
    assert any(d.explanation is not None and d.explanation.need.growth > 1.0 for d in ds)


def test_prompt_work_is_planned_ahead_only_after_it_has_risen_over_three_windows() -> None:
    # The prompt work per request is read from the smoothed request shape, so a step in
    # the request mix (4,000- to 8,000-token prompts within a minute) reaches it as a rise
    # of a few windows: the growth waits until the third window back has risen too.
    loop = settled(2, policy=make_policy(max_replicas=50), rate=10.0, arrivals=10.0,
                   prompt=4_000.0)
    ds = [loop.step(rate=10.0, arrivals=10.0, prompt=4_000.0 + 4_000.0 * min(1.0, (i + 1) / 3))
          for i in range(30)]
    growing = [i for i, d in enumerate(ds)
               if d.explanation is not None and d.explanation.need.growth > 1.0]
    assert growing
    assert growing[0] * CYCLE >= 2 * loop.policy.window_s


def test_a_rising_request_rate_at_a_steady_prompt_plans_no_prompt_growth() -> None:
    # The request rate's own trend carries a rise in requests; the prompt work per request
    # stays as measured.
    loop = settled(2, policy=make_policy(max_replicas=50), rate=5.0, arrivals=5.0)
    ds = [loop.step(rate=5.0 + 0.5 * i, arrivals=5.0 + 0.5 * i) for i in range(30)]
    assert any(d.explanation is not None and d.explanation.demand.burst_kind == "trend"
               for d in ds)
    assert all(d.explanation is not None and d.explanation.need.growth == 1.0 for d in ds)


@pytest.mark.parametrize(("ttft", "grows"), [(700.0, False), (900.0, True), (3_000.0, True)])
def test_first_tokens_queueing_past_its_margin_asks_for_the_replicas_that_keep_them(
        ttft: float, grows: bool, golden: Any) -> None:
    # The load model is content with three replicas for 60 req/s; first tokens that wait
    # past 80% of their objective (800 of 1000 ms), a miss or not yet, ask for the
    # replicas whose queueing keeps them there (the wait shrinks as rho / (1 - rho)), the
    # more the longer they wait. Inside the margin nothing moves.
    loop = settled(3, rate=60.0, arrivals=60.0)
    assert loop.replicas == 3
    d = loop.step(rate=60.0, arrivals=60.0, ttft=ttft)
    e = d.explanation
    assert e is not None
    if not grows:
        assert (d.replicas, e.need.driver) == (3, "load")
        return
    assert e.need.driver == "queue" and d.replicas == e.need.queue_replicas > 3
    if ttft < loop.policy.ttft_target_ms:
        golden.check("control", "law.decision.first-tokens-queue", d.message)
    assert d.reason == (R.SLO_VIOLATED if ttft > loop.policy.ttft_target_ms
                        else R.LOAD_INCREASED)
    # While the replicas asked for start, the same latency asks for nothing more.
    ds = [loop.step(rate=60.0, arrivals=60.0, ttft=ttft, ready=3,
                    starting=loop.replicas - 3) for _ in range(3)]
    assert {x.replicas for x in ds} == {d.replicas}
    assert all(x.explanation is not None and x.explanation.need.driver != "queue" for x in ds)


def test_first_tokens_queueing_past_its_margin_add_a_replica_inside_the_dead_band() -> None:
    # Eleven replicas carry 220 req/s. First tokens just past 80% of their objective ask
    # for a twelfth replica: a need inside the model's 10% dead band (12 <= 11 x 1.1), but
    # measured, not modelled, so the band that keeps the model's noise from moving the
    # replicas does not hold it.
    loop = settled(11, policy=make_policy(max_replicas=50), rate=220.0, arrivals=220.0)
    assert loop.replicas == 11
    d = loop.step(rate=220.0, arrivals=220.0, ttft=820.0)
    e = d.explanation
    assert e is not None and e.need.driver == "queue"
    assert e.need.queue_replicas <= 11 * (1.0 + loop.policy.tolerance)
    assert d.replicas == e.need.queue_replicas == 12
    assert d.reason == R.LOAD_INCREASED


def test_first_tokens_of_a_draining_backlog_ask_for_no_queue_replicas() -> None:
    # A backlog the replicas already there are clearing (fewer waiting at each look)
    # still shows in first tokens: the requests served now waited behind it. That wait
    # says nothing of the replicas the arrivals need, so it asks for none; once the queue
    # stops shrinking, the same first tokens do.
    loop = settled(3, rate=60.0, arrivals=60.0, waiting=400.0)
    assert loop.replicas == 3
    ds = [loop.step(rate=60.0, arrivals=60.0, waiting=w, ttft=3_000.0)
          for w in (300.0, 200.0, 100.0, 50.0)]
    assert {d.replicas for d in ds} == {3}
    assert all(d.explanation is not None and d.explanation.need.driver != "queue" for d in ds)
    d = loop.step(rate=60.0, arrivals=60.0, waiting=50.0, ttft=3_000.0)
    assert d.explanation is not None and d.explanation.need.driver == "queue"
    assert d.replicas > 3


def test_first_tokens_that_do_not_answer_to_replicas_ask_for_at_most_the_largest_correction(
) -> None:
    # A first-token latency far over target at low load (a slow prefix store, say) would
    # ask for many replicas by queueing alone; it asks for at most CORRECTION_MAX times
    # the load model's need, as the correction is bounded.
    loop = settled(3, policy=make_policy(max_replicas=50), rate=60.0, arrivals=60.0)
    base = loop.decisions[-1].explanation
    assert base is not None
    ds = loop.run(900, rate=60.0, arrivals=60.0, ttft=60_000.0)
    assert 3 < max(d.replicas for d in ds) <= math.ceil(law.CORRECTION_MAX * base.need.replicas)


def _after_a_drop(ttft: float) -> list[Decision]:
    """Six replicas settled on 150 req/s, then the load falls to 30 req/s (about two
    replicas' worth by the model) with the first-token latency at ``ttft`` ms: the
    decisions of the next 10 minutes."""
    loop = settled(6, rate=150.0, arrivals=150.0, budget=0.95)
    return loop.run(600, rate=30.0, arrivals=30.0, ttft=ttft, budget=0.95)


def test_a_scale_in_stops_where_queueing_would_take_first_tokens_past_target(
        golden: Any) -> None:
    # Latency near its floor: the scale-in goes where the load says. First tokens that
    # already wait: fewer replicas queue them longer (the wait grows as rho / (1 - rho)),
    # so the scale-in stops higher (LatencyHeadroom), the more so the longer they wait now;
    # a wait that would pass the objective with one replica fewer holds the count.
    free = _after_a_drop(20.0)
    tol = make_policy().tolerance
    assert free[-1].replicas == math.ceil(free[-1].need * (1 + tol) - 1e-9) < 6
    waiting = _after_a_drop(500.0)
    assert free[-1].replicas < waiting[-1].replicas < 6
    assert all(d.need == pytest.approx(f.need) for d, f in zip(waiting, free, strict=True))
    assert waiting[-1].reason == R.LATENCY_HEADROOM
    e = waiting[-1].explanation
    assert e is not None and e.queue_floor == waiting[-1].replicas
    assert free[-1].explanation is not None and free[-1].explanation.queue_floor == 0
    long_wait = _after_a_drop(700.0)
    assert {d.replicas for d in long_wait} == {6}  # held, never scaled out
    assert long_wait[-1].reason == R.LATENCY_HEADROOM
    golden.check("control", "law.decision.latency-headroom", long_wait[-1].message)


def test_a_first_token_objective_below_the_prefill_floor_does_not_pin_the_replicas() -> None:
    # A first-token objective no replica count can keep (its own prefill takes longer):
    # queueing gives no floor, and the scale-in goes where the load says.
    loop = settled(6, rate=150.0, arrivals=150.0, budget=0.95,
                   policy=make_policy(ttft_target_ms=5.0))
    ds = loop.run(600, rate=30.0, arrivals=30.0, ttft=700.0, budget=0.95)
    assert ds[-1].replicas < 6
    assert R.LATENCY_HEADROOM not in {d.reason for d in ds}


def test_bursty_load_waits_the_whole_window_whatever_the_budget() -> None:
    loop = Loop(replicas=3)
    ds = [loop.step(rate=a, arrivals=a, budget=0.95)
          for a in itertools.islice(itertools.cycle([10.0, 30.0]), 30)]
    e = ds[-1].explanation
    assert e is not None and e.demand.shape == "bursty"
    assert e.scale_in.window_s == loop.policy.scale_down_stabilization_s


# --- absurd inputs ------------------------------------------------------------------------------


def test_a_nan_error_budget_counts_as_unknown() -> None:
    d = Loop(replicas=2).step(rate=10.0, budget=math.nan)
    assert d.explanation is not None
    assert d.explanation.scale_in.window_s == make_policy().scale_down_stabilization_s


def test_a_nan_prefix_hit_share_counts_as_unknown() -> None:
    e = Loop(replicas=2).step(rate=10.0, hit=math.nan).explanation
    assert e is not None and e.model.cached == 0.0


anything = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=0, max_value=1e6)
)
counts = st.integers(min_value=0, max_value=20)


@st.composite
def observations(draw: st.DrawFn, now: float = T0) -> Observation:
    floats: dict[str, Any] = {name: draw(anything) for name in (
        "e2e_ms", "ttft_ms", "itl_ms", "jitter", "request_rate", "prompt_tokens_rate",
        "generation_tokens_rate", "waiting", "running", "preemptions_rate", "arrival_rate",
        "arrival_peak_rate", "prefix_hit_share", "decode_mean_ms", "prefill_mean_ms")}
    sig = Signals(state=draw(st.sampled_from(list(MetricsState))),
                  kv_usage=draw(st.one_of(st.none(), st.floats(min_value=0, max_value=1))),
                  **floats)
    ready = draw(counts)
    return Observation(
        key=KEY, now=now, signals=sig,
        replicas=ReplicaCounts(desired=draw(counts), ready=ready,
                               warming=draw(st.integers(0, ready)), starting=draw(counts),
                               pending=draw(counts)),
        batch_limit=draw(st.integers(0, 512)), max_batch=draw(st.integers(1, 512)),
        hardware=draw(st.sampled_from(["", "H100-SXM5-80GB", "NVIDIA H200", "weird"])),
        precision=draw(st.sampled_from(["bf16", "fp16", "fp8"])),
        model_size_b=draw(st.one_of(st.none(), st.floats(min_value=0.5, max_value=500))),
        gpus_per_replica=draw(st.integers(1, 8)),
        # NaN has its own test above.
        error_budget_left=draw(st.one_of(st.none(), st.floats(allow_nan=False))),
    )


policies = st.builds(
    lambda mode, lo, span, itl, budget: make_policy(
        min_replicas=lo, max_replicas=max(1, lo + span), batching_mode=mode,
        itl_target_ms=itl, gpu_budget=budget),
    st.sampled_from(["live", "restart", "off"]), st.integers(0, 3), st.integers(0, 10),
    st.one_of(st.none(), st.floats(min_value=5, max_value=500)),
    st.one_of(st.none(), st.integers(0, 40)),
)


def check_bounds(d: Decision, obs: Observation, pol: ControlPolicy) -> None:
    assert pol.min_replicas <= d.replicas <= pol.max_replicas or d.valid
    if d.explanation is not None:  # normalized: the GPU budget caps even the minimum
        most = pol.max_replicas if pol.gpu_budget is None else min(
            pol.max_replicas, pol.gpu_budget // obs.gpus_per_replica)
        assert min(pol.min_replicas, most) <= d.replicas <= most
    assert d.reason and d.message
    assert d.need is None or not math.isnan(d.need)
    if pol.batching_mode == "off":
        assert d.batch_limit == obs.batch_limit
    elif d.valid and d.batch_limit != obs.batch_limit:
        ceiling = min(pol.max_batch, obs.max_batch)
        assert min(pol.min_batch, ceiling) <= d.batch_limit <= ceiling
    if not d.valid and obs.replicas.desired > 0:
        assert d.replicas > 0  # never to zero for lack of data
    # The new state survives status (strict JSON: no NaN or Infinity for the API server).
    wire = json.loads(json.dumps(d.state.to_dict(), allow_nan=False))
    assert ControlState.from_dict(wire).to_dict() == d.state.to_dict()


@given(obs=observations(), pol=policies)
@settings(max_examples=300, deadline=None)
def test_decisions_stay_inside_the_users_bounds(obs: Observation, pol: ControlPolicy) -> None:
    check_bounds(decide(obs, pol, ControlState(), T0), obs, pol)


@given(data=st.data(), pol=policies, gaps=st.lists(st.floats(0, 900), min_size=2, max_size=6))
@settings(max_examples=100, deadline=None)
def test_a_run_of_absurd_observations_stays_inside_the_bounds(
        data: st.DataObject, pol: ControlPolicy, gaps: list[float]) -> None:
    state, now = ControlState(), T0
    for gap in gaps:
        now += gap
        obs = data.draw(observations(now))
        d = decide(obs, pol, state, now)
        check_bounds(d, obs, pol)
        state = d.state


def test_an_arrival_rate_near_the_largest_float_keeps_the_state_finite() -> None:
    # Found by the property test above: the prompt work arriving (rate x prefill time) of
    # 1.5e307 requests a second overflowed to infinity in status.
    pol = make_policy(min_replicas=0, max_replicas=1)
    first = decide(make_obs(desired=0, rate=None), pol, ControlState(), T0)
    d = decide(make_obs(desired=0, rate=0.0, arrivals=1.484202787617627e307), pol,
               first.state, T0)
    check_bounds(d, make_obs(desired=0), pol)


# --- closed loop around a toy plant -------------------------------------------------------------

COLD_START = 60.0
WARM_UP = 30.0
TRUE_SPEED = 0.8  # the plant's replicas are 20% slower than the seed says


@dataclass
class Plant:
    """Replicas TRUE_SPEED times the seed's speed behind a gateway queue; a replica is Ready
    COLD_START after it is asked for and warming for WARM_UP more."""

    ready_at: list[float] = field(default_factory=list)
    queue: float = 0.0

    def set_replicas(self, n: int, now: float) -> None:
        while len(self.ready_at) < n:
            self.ready_at.append(now + COLD_START)
        while len(self.ready_at) > n:
            self.ready_at.remove(max(self.ready_at))  # the newest (least ready) goes first

    def observe(self, now: float, lam: float, limit: int) -> Observation:
        steps = SEED.scaled(TRUE_SPEED)
        ready = sum(1 for t in self.ready_at if t <= now)
        warming = sum(1 for t in self.ready_at if now - WARM_UP < t <= now)
        cap = ready * rate_at_batch(steps, limit, PROMPT, OUTPUT, utilization=1.0)
        served = min(lam + self.queue / CYCLE, cap)
        self.queue = max(0.0, self.queue + (lam - served) * CYCLE)
        m, batch = decode_time(steps, served / ready if ready else 0.0, limit)
        u = min(0.99, served / cap) if cap else 0.99
        first = steps.prefill_request_ms(PROMPT) + m
        wait = (self.queue / cap * 1000.0 if cap else 60_000.0) + first * u / (2 * (1 - u))
        sig = Signals(
            state=MetricsState.OK, e2e_ms=first + wait + 2 * OUTPUT * m, ttft_ms=first + wait,
            itl_ms=m, request_rate=served, prompt_tokens_rate=served * PROMPT,
            generation_tokens_rate=served * OUTPUT, waiting=self.queue,
            running=ready * batch if served else 0.0, sample_time=now, arrival_rate=lam,
            arrival_peak_rate=lam, decode_mean_ms=m if served else None)
        n = len(self.ready_at)
        return Observation(
            key=KEY, now=now, signals=sig,
            replicas=ReplicaCounts(desired=n, ready=ready, warming=warming, starting=n - ready),
            batch_limit=limit, max_batch=64, hardware="H200", precision="bf16")


def plant_load(t: float) -> float:
    """10 req/s for 10 min, 60 req/s for 20 min, 10 req/s for 30 min."""
    return 60.0 if 600 <= t < 1800 else 10.0


@dataclass
class Trace:
    t: float
    replicas: int
    good: bool
    reason: str
    speed: float


@pytest.fixture(scope="module")
def plant_trace() -> list[Trace]:
    policy, plant, state, limit = make_policy(), Plant(), ControlState(), 64
    plant.set_replicas(1, T0 - 600)
    out = []
    for i in range(int(3600 / CYCLE)):
        t = i * CYCLE
        obs = plant.observe(T0 + t, plant_load(t), limit)
        good = (obs.signals.e2e_ms or 0) <= policy.e2e_target_ms \
            and (obs.signals.ttft_ms or 0) <= policy.ttft_target_ms
        d = decide(obs, policy, state, T0 + t)
        state, limit = d.state, d.batch_limit
        plant.set_replicas(d.replicas, T0 + t)
        out.append(Trace(t, d.replicas, good, d.reason, state.speed))
    return out


def test_the_loop_learns_the_plants_speed(plant_trace: list[Trace]) -> None:
    assert plant_trace[-1].speed == pytest.approx(TRUE_SPEED, abs=0.03)


def test_the_loop_meets_the_slo_soon_after_a_load_step(plant_trace: list[Trace]) -> None:
    # Within 3 minutes of the step the SLO holds for the rest of the high phase.
    assert all(x.good for x in plant_trace if 780 <= x.t < 1800), [
        (x.t, x.replicas, x.reason) for x in plant_trace if 780 <= x.t < 1800 and not x.good]
    # Replicas settle: no change in the last 10 minutes of the high phase.
    assert len({x.replicas for x in plant_trace if 1200 <= x.t < 1800}) == 1


def test_the_loop_does_not_flap(plant_trace: list[Trace]) -> None:
    counts = [x.replicas for x in plant_trace]
    steps = [b - a for a, b in itertools.pairwise(counts) if b != a]
    assert sum(1 for a, b in itertools.pairwise(steps) if (a > 0) != (b > 0)) <= 1, steps


def test_the_loop_does_not_overshoot_a_load_step(plant_trace: list[Trace]) -> None:
    counts = [x.replicas for x in plant_trace]
    mu = rate_at_batch(SEED.scaled(TRUE_SPEED), 64, PROMPT, OUTPUT)
    assert max(counts) <= math.ceil(60.0 / mu) + 2, counts  # no several-fold overshoot


def test_the_loop_scales_in_after_the_window_and_not_before(plant_trace: list[Trace]) -> None:
    level = next(x.replicas for x in plant_trace if x.t == 1800 - CYCLE)  # before the drop
    assert all(x.replicas == level for x in plant_trace if 1800 <= x.t < 1800 + 300)
    assert plant_trace[-1].replicas < level and plant_trace[-1].replicas <= 2


# --- messages -----------------------------------------------------------------------------------


def test_messages_read_as_pinned(golden: Any) -> None:
    loop = settled(1, rate=10.0)
    golden.check("control", "law.decision.steady", loop.decisions[-1].message)
    golden.check("control", "law.limited.scale-up-limit", loop.step(rate=300.0).limited_message)
    golden.check("control", "law.hold.unavailable",
                 loop.step(state=MetricsState.UNAVAILABLE, rate=None).message)
    golden.check("control", "law.limit.lowered", loop.step(rate=60.0, kv=0.99).limit_message)
    infeasible = Loop(policy=make_policy(itl_target_ms=3.0)).step(rate=30.0)
    golden.check("control", "law.limited.target-infeasible", infeasible.limited_message)
    near = settled(3, rate=60.0, policy=make_policy(e2e_target_ms=4_000.0), e2e=3_000.0)
    near.run(600, rate=10.0, e2e=3_600.0)
    golden.check("control", "law.decision.e2e-headroom", near.decisions[-1].message)


# --- arbitration over arbitrary fleets ------------------------------------------------------------


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[GpuRequest], dict[str, int], dict[str, int | None]]:
    pools, tenants = ["H100", "A100"], ["t1", "t2", "t3"]
    reqs = [
        GpuRequest(ServiceKey("ns", f"s{i}"), draw(st.integers(0, 12)), draw(st.integers(0, 8)),
                   draw(st.integers(1, 4)), draw(st.integers(0, 3)), draw(st.sampled_from(tenants)),
                   draw(st.sampled_from(pools)), draw(st.integers(0, 2)))
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
            used = sum(grants[r.key].replicas * r.gpus_per_replica for r in reqs
                       if r.tenant == tenant)
            assert used <= budget
    for r in reqs:
        g = grants[r.key]
        assert 0 <= g.replicas <= max(r.wanted, 0)
        assert (g.reason is None) == (g.replicas >= r.wanted)


# --- scale to zero (scaling.scaleToZero with an activator) -------------------------------------
# The service keeps a replica while it sees requests, goes to zero after a window without
# requests plus its idle period, stays there while nothing arrives, and comes back when the
# activator records a wake newer than the one it went to zero with.

AT_ZERO: dict[str, Any] = {"state": MetricsState.EMPTY, "rate": None, "e2e": None,
                           "ttft": None, "running": None, "waiting": None, "ready": 0}
IDLE_S = 300.0  # the scale-to-zero tests' idle period


def zero_policy(**overrides: Any) -> Any:
    return make_policy(scale_to_zero=True, idle_before_zero_s=IDLE_S, min_replicas=1,
                       **overrides)


def idle_to_zero(wake: Wake | None = None) -> Loop:
    """A one-replica service that served traffic, then idled until it went to zero."""
    loop = Loop(replicas=1, policy=zero_policy())
    loop.run(300, rate=5.0, running=2.0)
    for _ in range(100):
        if loop.step(wake=wake, **IDLE).replicas == 0:
            return loop
    raise AssertionError("never went to zero")


def test_an_idle_service_goes_to_zero_after_its_idle_period_and_not_before() -> None:
    loop = Loop(replicas=1, policy=zero_policy())
    loop.run(300, rate=5.0, running=2.0)
    ds = loop.run(600, **IDLE)
    zero = next(i for i, d in enumerate(ds) if d.replicas == 0)
    assert {d.replicas for d in ds[:zero]} == {1}
    assert zero * CYCLE == IDLE_S  # idle since its first quiet cycle, zero once it has lasted
    assert ds[zero].reason == R.SCALED_TO_ZERO_REASON
    assert ds[zero].state.zero_since is not None and ds[zero].state.idle_since is None


def test_a_request_in_the_idle_period_starts_it_again() -> None:
    loop = Loop(replicas=1, policy=zero_policy())
    loop.run(300, rate=5.0, running=2.0)
    loop.run(IDLE_S - 2 * CYCLE, **IDLE)
    loop.step(rate=0.1, running=1.0)  # one request: no longer idle
    ds = loop.run(IDLE_S, **IDLE)  # idle again from its first quiet cycle
    assert all(d.replicas == 1 for d in ds)
    assert loop.step(**IDLE).replicas == 0


def test_a_starting_replica_holds_the_service_above_zero() -> None:
    loop = Loop(replicas=2, policy=zero_policy())
    loop.run(300, rate=5.0, running=2.0)
    ds = loop.run(IDLE_S + 200, ready=1, starting=1, **IDLE)
    assert all(d.replicas > 0 for d in ds)


def test_at_zero_the_service_stays_until_a_newer_wake() -> None:
    old = Wake(requested_at=T0 - 3600.0, held=1, served_at=T0 - 3590.0, waited_s=10.0)
    loop = idle_to_zero(wake=old)
    assert loop.state.wake_seen == old.requested_at
    ds = loop.run(600, wake=old, **AT_ZERO)  # the old wake is no new demand
    assert {(d.replicas, d.reason) for d in ds} == {(0, R.SCALED_TO_ZERO_REASON)}
    d = loop.step(wake=Wake(requested_at=loop.now - 1.0, held=1), **AT_ZERO)
    assert (d.replicas, d.reason) == (1, R.WOKEN)
    assert d.state.wake_seen == loop.now - CYCLE - 1.0 and d.state.zero_since is None


def test_a_wake_asks_for_a_replica_per_batch_of_held_requests_within_the_maximum() -> None:
    for held, limit, want in ((1, 64, 1), (200, 64, 4), (10_000, 64, 8)):
        loop = idle_to_zero()
        d = loop.step(wake=Wake(requested_at=loop.now, held=held), batch_limit=limit,
                      **AT_ZERO)
        assert (d.replicas, d.reason) == (want, R.WOKEN), held


def test_after_a_wake_the_service_is_held_up_while_its_first_replica_starts() -> None:
    loop = idle_to_zero()
    wake = Wake(requested_at=loop.now, held=2)
    assert loop.step(wake=wake, **AT_ZERO).replicas == 1
    ds = loop.run(200, wake=wake, **{**AT_ZERO, "starting": 1})
    assert all(d.replicas == 1 for d in ds)
    # Served: the normal law again, and the idle clock starts afresh.
    served = Wake(requested_at=wake.requested_at, held=2, served_at=loop.now, waited_s=40.0)
    ds = loop.run(200, wake=served, rate=1.0, running=1.0)
    assert all(d.replicas >= 1 for d in ds) and ds[-1].state.idle_since is None


def test_without_an_activator_scale_to_zero_keeps_one_replica() -> None:
    spec = SLOPolicySpec.model_validate({"scaling": {"minReplicas": 0, "scaleToZero": True}})
    policy = policy_for(spec, can_wake=False)
    assert (policy.scale_to_zero, policy.min_replicas) == (False, 1)
    loop = Loop(replicas=1, policy=policy)
    ds = loop.run(1800, **IDLE)
    assert {d.replicas for d in ds} == {1}
    # A service found at zero (an operator that had an activator) is brought back up.
    loop.replicas = 0
    assert loop.step(**AT_ZERO).replicas == 1


def test_the_idle_period_defaults_to_the_longer_of_window_and_scale_down_stabilization(
) -> None:
    def idle_of(doc: dict[str, Any]) -> float:
        return policy_for(SLOPolicySpec.model_validate(doc)).idle_before_zero_s

    assert idle_of({"window": "60s", "scaling": {"scaleToZero": True}}) == 300.0
    assert idle_of({"window": "10m", "scaling": {"scaleToZero": True}}) == 600.0
    assert idle_of({"scaling": {"scaleToZero": True, "idleBeforeZero": "15m"}}) == 900.0
    with_activator = policy_for(SLOPolicySpec.model_validate(
        {"scaling": {"minReplicas": 0, "scaleToZero": True}}))
    assert (with_activator.scale_to_zero, with_activator.min_replicas) == (True, 1)


def test_messages_of_scale_to_zero_read_as_pinned(golden: Any) -> None:
    loop = idle_to_zero()
    golden.check("control", "law.zero.scaled", loop.decisions[-1].message)
    golden.check("control", "law.zero.stay", loop.step(**AT_ZERO).message)
    woken = loop.step(wake=Wake(requested_at=loop.now, held=3), **AT_ZERO)
    golden.check("control", "law.zero.woken", woken.message)


def test_a_woken_service_keeps_its_idle_clock_stopped_until_a_window_after_the_wake() -> None:
    """The first replica starts with an empty window and the requests it was woken for
    reach its series only once forwarded: neither starts the idle clock."""
    loop = Loop(replicas=1, policy=replace(zero_policy(), idle_before_zero_s=2 * CYCLE))
    loop.run(300, rate=5.0, running=2.0)
    loop.run(600, **IDLE)
    assert loop.replicas == 0
    wake = Wake(requested_at=loop.now, held=1)
    assert loop.step(wake=wake, **AT_ZERO).replicas == 1
    starting = loop.run(120, wake=wake, starting=1, ready=0, **IDLE)
    assert all(d.replicas == 1 and d.state.idle_since is None for d in starting)
    served = Wake(requested_at=wake.requested_at, held=1, served_at=loop.now, waited_s=60.0)
    fresh = loop.run(loop.policy.window_s, wake=served, **IDLE)
    assert all(d.replicas == 1 and d.state.idle_since is None for d in fresh)
    later = loop.run(4 * CYCLE, wake=served, **IDLE)
    assert later[-1].replicas == 0  # then the idle period as usual


def test_a_wake_dated_ahead_of_the_operators_clock_does_not_block_later_wakes() -> None:
    ahead = Wake(requested_at=T0 + 86_400.0, held=1)  # an activator's clock a day ahead
    loop = idle_to_zero()
    assert loop.step(wake=ahead, **AT_ZERO).replicas == 1
    loop.run(1200, wake=Wake(requested_at=ahead.requested_at, held=1, served_at=ahead.
                              requested_at + 60, waited_s=60.0), **IDLE)
    assert loop.replicas == 0  # idle again: the wake's times do not keep it up
    later = Wake(requested_at=loop.now, held=1)
    assert loop.step(wake=later, **AT_ZERO).replicas == 1


def test_a_wake_left_open_by_a_restarted_activator_does_not_keep_the_service_up() -> None:
    loop = idle_to_zero()
    open_wake = Wake(requested_at=loop.now, held=1)  # no servedAt ever written
    assert loop.step(wake=open_wake, **AT_ZERO).replicas == 1
    ds = loop.run(3600, wake=open_wake, **IDLE)
    assert ds[-1].replicas == 0
