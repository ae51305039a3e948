"""plan_reconcile as a table: snapshot, body and ``now`` in, the planned writes out.

No API client anywhere: the planner is pure, so each row states the writes a reconcile
*would* make (``describe`` of each action, in order) for one situation.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.cluster import Snapshot
from slo_operator.api.conditions import CHUNK_BUDGET_CHANGED, Cond, rfc3339
from slo_operator.api.models import InferenceServiceStatus, ObservedStatus
from slo_operator.api.observe import ServiceKey
from slo_operator.control import ControlState
from slo_operator.control import reasons as R
from slo_operator.reconcile import planner
from slo_operator.reconcile.actions import Apply, PatchStatus, PostEvent, describe
from slo_operator.reconcile.chunking import MEMORY_KEY, jitter_budget
from slo_operator.reconcile.loop import (
    LawMemory,
    fill,
    law_decided,
    observe_and_decide,
    same_memory,
    unwritten_passes,
)
from slo_operator.reconcile.planner import ReconcilePlan, Settings, plan_reconcile
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.status import HEARTBEAT_S, SLOUpdate
from slo_operator.slo.evaluate import SLOHistory
from tests.operator.control.control_support import make_policy as control_policy
from tests.operator.reconcile.prom_fake import FakeMetrics, Load
from tests.operator.reconcile.test_loop import planned
from tests.operator.reconcile.test_service import (
    NOW,
    NS,
    READY_DEP,
    RUNNING,
    VARIANT,
    make_isvc,
    make_policy,
    make_snapshot,
)

DEPLOYMENT = f"Deployment/chat-vllm-{VARIANT}"
TWO = make_policy(scaling={"minReplicas": 2, "maxReplicas": 2})
SETTLED = make_snapshot(policies=(TWO,), dep=READY_DEP, pods=RUNNING)
LATER = NOW + timedelta(seconds=20)


def applied_after(plan: ReconcilePlan) -> AppliedCache:
    """The cache as the executor leaves it once every planned apply succeeded."""
    cache = AppliedCache()
    for action in plan.actions:
        if isinstance(action, Apply):
            cache.remember(action.obj, plan.now.timestamp())
    return cache


# The first reconcile of a service running two Ready replicas; rows start from its result.
FIRST = plan_reconcile(make_isvc(), SETTLED, NOW, Settings())


def settled(**spec: Any) -> dict[str, Any]:
    """The service as the cache holds it after FIRST was written (``spec`` edits bump the
    generation)."""
    body = make_isvc(status=dict(FIRST.status), **spec)
    if spec:
        body["metadata"]["generation"] = 2
    return body


def refused_lately(message: str) -> AppliedCache:
    cache = applied_after(FIRST)
    service = next(a.obj for a in FIRST.actions if isinstance(a, Apply)
                   and a.kind == "Service")
    cache.forget("Service", NS, "chat")
    cache.reject(service, LATER.timestamp() - 5, message)
    return cache


# A Deployment from a release without variants sits next to the Ready H100 variant.
LEGACY = replace(READY_DEP, name="chat-vllm", variant="")
WITH_LEGACY = replace(
    SETTLED,
    variant_deployments={(NS, "chat"): {VARIANT: replace(READY_DEP, variant=VARIANT,
                                                         name=f"chat-vllm-{VARIANT}"),
                                        "": LEGACY}})


def slo_pass(at: datetime, **changes: Any) -> SLOUpdate:
    """What an SLO pass at ``at`` decides for the settled service when nothing changed: the
    same decision, conditions, signals and memory; only the pass's own times move."""
    base = SLOUpdate(
        replicas=2, batch_limit=256, reason="Steady", message="load 5.00 req/s",
        conds=(Cond(C.METRICS_AVAILABLE, True, C.METRICS_OK, "latency from gateway"),
               Cond(C.SLO_COMPLIANT, True, C.SLO_MET, "all objectives met"),
               Cond(C.SCALING_LIMITED, False, C.WITHIN_BOUNDS, "The decision was not clipped")),
        observed=ObservedStatus.model_validate({"e2eMs": 400.0, "ttftMs": 80.0,
                                                "requestRate": 5.0, "state": "OK",
                                                "time": rfc3339(at)}),
        control={"state": {"v": 1, "lastTime": at.timestamp(), "correction": 1.0},
                 "slo": {"windowSeconds": 60, "runs": "g1",
                         "lastIndex": int(at.timestamp() // 60)}},
        slo_compliant=True, attainment=1.0, error_budget_remaining=1.0, memory_changed=False)
    return replace(base, **changes)


# The settled service after its first SLO pass (at LATER) was written.
DECIDED = plan_reconcile(settled(), SETTLED, LATER, Settings(), applied_after(FIRST),
                         slo_pass(LATER, memory_changed=True))


def decided() -> dict[str, Any]:
    return make_isvc(status=dict(DECIDED.status))


PASS = LATER + timedelta(seconds=20)
BEAT = LATER + timedelta(seconds=HEARTBEAT_S)


@dataclass(frozen=True)
class Row:
    body: dict[str, Any]
    snap: Snapshot
    applied: AppliedCache | None = None
    update: SLOUpdate | None = None
    now: datetime = LATER


@pytest.mark.parametrize(
    ("row", "want_actions", "want_events", "want_retry"),
    [
        pytest.param(
            Row(make_isvc(), SETTLED, now=NOW),
            ["status InferenceService/chat", f"apply {DEPLOYMENT}", "apply Service/chat",
             "apply PodDisruptionBudget/chat-vllm"],
            [("Normal", C.AVAILABLE), ("Normal", C.HARDWARE_FOUND),
             ("Normal", C.AWAITING_METRICS)], None,
            id="a-new-service-writes-status-then-applies-its-three-objects-and-announces-it"),
        pytest.param(
            Row(settled(engine={"gpuMemoryUtilization": 0.85}), SETTLED, applied_after(FIRST)),
            ["status InferenceService/chat", f"apply {DEPLOYMENT}"], [], None,
            id="a-spec-change-applies-only-the-deployment-whose-rendering-changed"),
        pytest.param(
            Row(settled(), SETTLED, applied_after(FIRST)), [], [], None,
            id="an-unchanged-service-plans-no-write-at-all-not-even-status"),
        pytest.param(
            Row(settled(), replace(SETTLED, deployments={}, variant_deployments={}),
                applied_after(FIRST)),
            ["status InferenceService/chat", f"apply {DEPLOYMENT}"], None, None,
            id="a-deployment-gone-from-the-cache-is-applied-again-though-applied-lately"),
        pytest.param(
            Row(settled(), WITH_LEGACY, applied_after(FIRST)),
            ["delete Deployment/chat-vllm"], [("Normal", C.PLACED)], None,
            id="a-variant-no-pool-offers-is-deleted-once-the-others-are-ready-and-said-so"),
        pytest.param(
            Row(settled(), SETTLED, applied_after(FIRST),
                SLOUpdate(replicas=2, batch_limit=48, reason="LoadFell", message="m")),
            ["status InferenceService/chat", "patch Pod/p-1 limit=48", "patch Pod/p-2 limit=48"],
            [("Normal", C.BATCH_LIMIT_CHANGED)], None,
            id="a-lower-batch-limit-patches-the-pods-and-never-the-deployment"),
        pytest.param(
            Row(settled(), SETTLED, applied_after(FIRST),
                SLOUpdate(replicas=2, batch_limit=256, reason="Steady", message="m")),
            ["status InferenceService/chat"], [], None,
            id="a-first-decision-that-changes-nothing-records-itself-in-status-only"),
        pytest.param(
            Row(settled(), SETTLED, refused_lately("spec.ports[0].port: Invalid value: 0")),
            ["status InferenceService/chat"], [("Warning", C.APPLY_FAILED)], 30,
            id="an-object-refused-lately-is-not-sent-again-and-the-status-says-why"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST), slo_pass(PASS), now=PASS),
            [], [], None,
            id="an-slo-pass-over-an-unchanged-service-plans-no-status-patch"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST),
                slo_pass(PASS, observed=ObservedStatus.model_validate(
                    {"e2eMs": 420.0, "ttftMs": 77.0, "requestRate": 5.2, "state": "OK",
                     "time": rfc3339(PASS)})), now=PASS),
            [], [], None, id="signals-jittering-around-their-written-values-plan-no-patch"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST),
                slo_pass(BEAT - timedelta(seconds=1)), now=BEAT - timedelta(seconds=1)),
            [], [], None, id="no-heartbeat-before-its-period"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST), slo_pass(BEAT), now=BEAT),
            ["status InferenceService/chat"], [], None,
            id="the-heartbeat-writes-the-unchanged-status-after-its-period"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST), slo_pass(PASS, memory_changed=True),
                now=PASS),
            ["status InferenceService/chat"], [], None,
            id="a-memory-the-law-reads-differently-is-written-at-once"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST),
                slo_pass(PASS, batch_limit=48, reason=R.LIMIT_LOWERED), now=PASS),
            ["status InferenceService/chat", "patch Pod/p-1 limit=48", "patch Pod/p-2 limit=48"],
            [("Normal", C.BATCH_LIMIT_CHANGED)], None,
            id="a-changed-decision-writes-at-once"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST),
                slo_pass(PASS, conds=(Cond(C.SLO_COMPLIANT, False, C.SLO_MISSED,
                                           "e2e 900ms > 800ms"),)), now=PASS),
            ["status InferenceService/chat"], [("Warning", C.SLO_MISSED)], None,
            id="a-missed-objective-writes-at-once-and-warns"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST),
                slo_pass(PASS, conds=(Cond(C.SCALING_LIMITED, True, R.TOO_FEW_REPLICAS,
                                           "the load needs 0; minReplicas is 2"),)), now=PASS),
            ["status InferenceService/chat"], [("Normal", R.TOO_FEW_REPLICAS)], None,
            id="resting-at-min-replicas-posts-no-warning"),
        pytest.param(
            Row(decided(), SETTLED, applied_after(FIRST),
                slo_pass(PASS, conds=(Cond(C.SCALING_LIMITED, True, R.TOO_MANY_REPLICAS,
                                           "the load needs 5; maxReplicas is 2"),)), now=PASS),
            ["status InferenceService/chat"], [("Warning", R.TOO_MANY_REPLICAS)], None,
            id="max-replicas-while-the-load-needs-more-warns"),
        pytest.param(
            Row(make_isvc(policy="absent"), SETTLED, now=NOW),
            ["status InferenceService/chat"],
            [("Warning", C.POLICY_NOT_FOUND), ("Warning", C.POLICY_NOT_FOUND)], 30,
            id="a-missing-policy-applies-nothing-and-waits"),
    ],
)
def test_plan_reconcile_lists_the_writes_in_order(
        row: Row, want_actions: list[str], want_events: list[tuple[str, str]] | None,
        want_retry: float | None) -> None:
    plan = plan_reconcile(row.body, row.snap, row.now, Settings(), row.applied, row.update)
    events = [a for a in plan.actions if isinstance(a, PostEvent)]
    assert [describe(a) for a in plan.actions if not isinstance(a, PostEvent)] == want_actions
    if want_events is not None:
        assert sorted((e.type, e.reason) for e in events) == sorted(want_events)
    assert plan.retry_after == want_retry


def test_planning_reads_the_applied_cache_and_never_changes_it() -> None:
    cache = refused_lately("refused")
    before = (dict(cache.entries), dict(cache.rejected))
    plan_reconcile(settled(), WITH_LEGACY, LATER, Settings(), cache)
    assert (cache.entries, cache.rejected) == before


def test_an_invalid_spec_plans_only_its_status_and_is_permanent() -> None:
    body = make_isvc()
    body["spec"]["model"]["sizeBillions"] = -1
    plan = plan_reconcile(body, SETTLED, NOW, Settings())
    assert plan.permanent_error and "spec.model.sizeBillions" in plan.permanent_error
    assert [describe(a) for a in plan.actions if not isinstance(a, PostEvent)] == [
        "status InferenceService/chat"]
    assert plan.refusal is None  # nothing to apply, nothing to refuse


def test_the_writes_come_in_the_order_the_executor_must_keep() -> None:
    """The status (the decision) first, so an operator killed after it finishes the action
    when it starts again; then applies (a refusal stops everything after it), deletes,
    pod patches and the Events."""
    update = SLOUpdate(replicas=2, batch_limit=48, reason="LoadFell", message="m")
    plan = plan_reconcile(settled(), WITH_LEGACY, LATER, Settings(), AppliedCache(), update)
    kinds = [type(a).__name__ for a in plan.actions]
    order = ["PatchStatus", "Apply", "Delete", "PatchPodLimit", "PostEvent"]
    assert kinds == sorted(kinds, key=order.index)
    assert set(kinds) == set(order)


def test_an_unwritten_pass_leaves_the_written_status_as_it_was() -> None:
    """The next pass starts from what the API server holds: the plan's status is the
    written one, per-pass times included, not the one computed and not written."""
    body = decided()
    plan = plan_reconcile(body, SETTLED, PASS, Settings(), applied_after(FIRST), slo_pass(PASS))
    assert plan.actions == ()
    assert plan.status == body["status"]
    assert plan.status["observed"]["time"] == rfc3339(LATER)


def test_what_a_status_no_longer_has_is_deleted_not_left_behind() -> None:
    """A merge patch keeps what it does not name: a verdict gone unknown and a signal gone
    missing are sent as null, so the API server drops them (else every later pass would
    find them again and write again)."""
    gone = slo_pass(PASS, slo_compliant=None, attainment=None, observed=ObservedStatus.
                    model_validate({"e2eMs": 400.0, "requestRate": 5.0, "state": "OK",
                                    "time": rfc3339(PASS)}))
    plan = plan_reconcile(decided(), SETTLED, PASS, Settings(), applied_after(FIRST), gone)
    (patch,) = [a.status for a in plan.actions if isinstance(a, PatchStatus)]
    assert patch["sloCompliant"] is None and patch["attainment"] is None
    assert patch["observed"]["ttftMs"] is None and patch["observed"]["e2eMs"] == 400.0
    assert "sloCompliant" not in plan.status and "ttftMs" not in plan.status["observed"]
    assert {k for k, v in patch.items() if v is None} == {"sloCompliant", "attainment"}


KEY = ServiceKey("team-a", "chat")
IDLE = Load(rate=0.0, waiting=0.0, running=0.0, kv=0.0)
BUSY = Load(rate=80.0, e2e_s=1.0, ttft_s=0.08, waiting=5.0, running=60.0)  # misses e2e
STEADY = Load(rate=50.0, e2e_s=0.4, ttft_s=0.08, running=30.0)
LOW = Load(rate=4.0, e2e_s=0.3, ttft_s=0.06, running=2.0)
# Idle for 13 minutes, a burst of load, a long steady load (its memory settles, then
# passes go unwritten), less load (a scale-down waits out its stabilization), idle again.
SCRIPT = [IDLE] * 40 + [BUSY] * 20 + [STEADY] * 45 + [LOW] * 25 + [IDLE] * 30


def run_passes(every_pass: bool, monkeypatch: pytest.MonkeyPatch, window: str = "120s",
               scaling: dict[str, Any] | None = None, memory: LawMemory | None = None,
               restart_at: int | None = None,
               ) -> tuple[list[tuple[Any, ...]], list[int]]:
    """Periodic passes (20 s apart) of the SLO loop and the planner over SCRIPT: the
    decisions (replicas, limit, reason), SLO verdicts and reports (attainment, error
    budget) and the status writes. Each pass reads back only
    what the API server holds (the last written status, through JSON): nothing else
    carries over, which is also all an operator restarted between two passes would read.
    ``every_pass``: write the status on every pass, as before status writes waited for a
    change. ``memory``: the law's memory kept between writes, as the operator keeps it;
    ``restart_at``: the pass before which it is lost (an operator restart).
    Returns the decisions and the passes (indexes into SCRIPT) that wrote."""
    if every_pass:
        monkeypatch.setattr(planner, "status_write", lambda *_, **__: "every pass")
    else:
        monkeypatch.undo()
    body, snap, applied = planned(replicas=1, window=window)
    if scaling is not None:
        snap.policies[(KEY.namespace, "gold")]["spec"]["scaling"] = scaling
    settings = Settings(pass_interval=20.0)
    decisions, writes = [], []
    for k, load in enumerate(SCRIPT):
        now = NOW + timedelta(seconds=20 * (k + 1))
        snap = replace(snap, services={(KEY.namespace, KEY.name): body})
        if memory is not None and k == restart_at:
            memory.clear()
        update = asyncio.run(observe_and_decide(FakeMetrics({KEY: load}, window=window), snap,
                                                now, settings, memory=memory))[KEY]
        plan = plan_reconcile(body, snap, now, settings, applied, update)
        if any(isinstance(a, PatchStatus) for a in plan.actions):
            writes.append(k)
        body = {**body, "status": json.loads(json.dumps(plan.status))}
        decisions.append((update.replicas, update.batch_limit, update.reason,
                          update.slo_compliant, update.attainment,
                          update.error_budget_remaining))
    return decisions, writes


def test_a_status_written_only_on_change_decides_as_one_written_every_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The law's memory moves on unwritten passes only in what time moves (stamps, more
    zero rate samples while idle, the same window verdict): the loop replays those passes
    before deciding, so the burst after an idle stretch gets the same burst and trend
    headroom, and a scale-down the same stabilization, as with a write on every pass."""
    reference, every = run_passes(True, monkeypatch)
    lazy, writes = run_passes(False, monkeypatch)
    assert lazy == reference
    assert len(every) == len(SCRIPT)
    # The burst scales out (so the comparison covers the replayed idle stretch's effect).
    assert max(r for r, *_ in lazy) > 1
    # Idle at minReplicas: the first pass writes, the decision's reason changes once
    # (Stabilizing until the first scale-down window ends, then NoTraffic), then only the
    # heartbeat 300 s (15 passes) later. Busy, the law's memory moves (a new rate sample
    # every other pass with a 120 s window), and so does the status.
    assert [k for k in writes if k < 40] == [0, 14, 29], writes
    assert lazy[13][2] == R.STABILIZING and lazy[14][2] == R.NO_TRAFFIC


def test_without_stabilization_windows_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 60 s window (a rate sample every pass) and no stabilization at all: the law keeps
    only its newest wish, and an idle service still writes only at the heartbeat."""
    fast = {"minReplicas": 1, "maxReplicas": 8, "scaleDownStabilization": "0s"}
    reference, _ = run_passes(True, monkeypatch, "60s", fast)
    lazy, writes = run_passes(False, monkeypatch, "60s", fast)
    assert lazy == reference
    assert [k for k in writes if k < 40] == [0, 15, 30], writes


def test_a_memory_kept_between_writes_decides_as_one_written_every_pass_and_writes_less(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator keeps the law's memory between status writes (``LawMemory``): it
    decides exactly as an operator that writes every pass, and under steady load writes
    only when the decision, the SLO state or a signal moves, or at the heartbeat; without
    it every move of the memory (a new rate sample, a learnt speed) is a write."""
    reference, _ = run_passes(True, monkeypatch)
    _, lazy_writes = run_passes(False, monkeypatch)
    kept, kept_writes = run_passes(False, monkeypatch, memory=LawMemory())
    assert kept == reference
    steady = range(SCRIPT.index(STEADY) + 10, SCRIPT.index(LOW))  # after its scale-in
    assert len([k for k in lazy_writes if k in steady]) == len(steady)
    assert len([k for k in kept_writes if k in steady]) <= len(steady) // 4, kept_writes


def test_an_operator_restart_keeps_every_decision_although_it_loses_unwritten_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart (the kept memory lost) in the steady stretch, passes after the last
    write: the new operator starts from the written memory and still scales and limits
    as the uninterrupted one."""
    reference, _ = run_passes(True, monkeypatch)
    memory = LawMemory()
    _, writes = run_passes(False, monkeypatch, memory=LawMemory())
    restart = next(k for k in range(SCRIPT.index(STEADY) + 12, len(SCRIPT))
                   if k not in writes and k - 1 not in writes)
    restarted, _ = run_passes(False, monkeypatch, memory=memory, restart_at=restart)
    assert [d[:2] for d in restarted] == [d[:2] for d in reference]


def test_a_status_another_writer_wrote_wins_over_the_kept_memory() -> None:
    """A status with an ``observed.time`` this operator did not read or write (a peer
    took over meanwhile, or the object was recreated) is decided from as written."""
    body, snap, _ = planned(replicas=1)
    memory = LawMemory()
    metrics = FakeMetrics({KEY: STEADY})
    first = asyncio.run(observe_and_decide(metrics, snap, LATER, memory=memory))[KEY]
    written = {**first.control, "state": {**first.control["state"], "correction": 1.5}}

    def second(stamp: datetime) -> float:
        observed = {**first.observed.model_dump(by_alias=True, mode="json"),
                    "time": rfc3339(stamp)}
        peer = {**body, "status": {**body["status"], "observed": observed,
                                   "control": written}}
        snap2 = replace(snap, services={(KEY.namespace, KEY.name): peer})
        mem = LawMemory(dict(memory.entries))
        up = asyncio.run(observe_and_decide(metrics, snap2, LATER + timedelta(seconds=20),
                                            memory=mem))[KEY]
        return float(up.control["state"]["correction"])

    ours, peers = second(LATER), second(LATER + timedelta(seconds=5))
    assert ours == pytest.approx(first.control["state"]["correction"], abs=0.05)
    assert peers == pytest.approx(1.5, abs=0.05)


# ---------------------------------------------------------------- reading back what was not written

W0 = NOW.timestamp()  # the loop last wrote at W0 (observed.time)


def loop_status(state: str = "OK") -> InferenceServiceStatus:
    return InferenceServiceStatus.model_validate(
        {"observed": {"state": state, "time": rfc3339(NOW)}})


@pytest.mark.parametrize(
    ("last_time", "after", "want"),
    [
        pytest.param(W0 + 0.4, 20.0, (), id="the-previous-pass-wrote-nothing-to-replay"),
        pytest.param(W0 + 0.4, 80.0, (W0 + 20, W0 + 40, W0 + 60),
                     id="three-unwritten-passes-every-interval-back-from-now"),
        pytest.param(None, 80.0, (W0 + 20, W0 + 40, W0 + 60),
                     id="held-passes-count-from-observed-time"),
        pytest.param(W0 + 0.4, HEARTBEAT_S + 41.0, (),
                     id="longer-than-a-heartbeat-the-loop-did-not-run"),
    ],
)
def test_unwritten_passes(last_time: float | None, after: float,
                          want: tuple[float, ...]) -> None:
    state = ControlState(last_time=last_time)
    got = unwritten_passes(loop_status(), state, W0 + after + 0.4, 20.0)
    assert got == pytest.approx(tuple(t + 0.4 for t in want))
    assert law_decided(loop_status(), state) is (last_time is not None)


def test_windows_of_unwritten_passes_keep_the_written_verdict() -> None:
    """Unwritten passes judged as the newest written window (a new verdict is written at
    once); a window no pass saw stays unknown, as ``record`` leaves it."""
    written = SLOHistory(60, 100, "bg")
    passes = (101 * 60 + 5.0, 101 * 60 + 25.0, 103 * 60 + 5.0)  # none in window 102
    got = fill(written, passes, 60.0, 3600.0)
    assert (got.last_index, got.outcomes) == (103, "bggug")
    assert fill(written, passes, 120.0, 3600.0) == written  # re-windowed: starts over
    assert fill(written, (100 * 60 + 30.0,), 60.0, 3600.0) == written
    assert fill(written, passes, 60.0, 180.0).outcomes == "gug"  # the period's windows


def test_only_time_moved_in_an_idle_memory() -> None:
    policy = control_policy()  # scale-down stabilization 300 s
    written = ControlState(last_time=W0, last_good_replicas=1, last_good_time=W0,
                           recommendations=((W0 - 400, 3), (W0, 1)),
                           rates=((W0 - 30, 0.0), (W0, 0.0)), last_waiting=0.0)
    later = W0 + 60
    moved = written.evolve(last_time=later, last_good_time=later,
                           recommendations=((later, 1),),
                           rates=(*written.rates, (W0 + 20, 0.0), (later, 0.0)))
    assert same_memory(written, moved, policy, later, idle=True)
    # Busy, a repeated rate sample counts: the burst headroom counts samples.
    assert not same_memory(written, moved, policy, later, idle=False)
    # With no stabilization window the law keeps only the newest wish: still the same.
    instant = replace(policy, scale_up_stabilization_s=0.0, scale_down_stabilization_s=0.0)
    assert same_memory(written, moved, instant, later, idle=True)
    for changed in (moved.evolve(recommendations=((later, 2),)),
                    moved.evolve(rates=(*moved.rates, (later + 1, 4.0))),
                    moved.evolve(correction=0.95),
                    moved.evolve(last_waiting=3.0),
                    moved.evolve(last_good_replicas=2)):
        assert not same_memory(written, changed, policy, later, idle=True)


# ------------------------------------------------------------ the inter-token lever


def itl_snapshot(itl: int) -> Snapshot:
    policy = make_policy(scaling={"minReplicas": 2, "maxReplicas": 2},
                         objectives={"interTokenLatencyMs": itl})
    return make_snapshot(policies=(policy,), dep=READY_DEP, pods=RUNNING)


def chunk_events(plan: ReconcilePlan) -> list[str]:
    return [a.message for a in plan.actions
            if isinstance(a, PostEvent) and a.reason == CHUNK_BUDGET_CHANGED]


def test_an_objective_edit_rolls_the_deployment_and_says_so() -> None:
    # A running service whose policy gains an objective: its budget leaves vLLM's default.
    first = plan_reconcile(make_isvc(), itl_snapshot(50), NOW, Settings())
    kept = first.status["control"][MEMORY_KEY][VARIANT]
    assert kept["itlMs"] == 50 and kept["tokens"] < 8192
    assert chunk_events(first) == [
        f"Chunked-prefill budget of variant {VARIANT} changed from 8192 to {kept['tokens']} "
        "tokens (--max-num-batched-tokens; a rolling update): interTokenLatencyMs set to 50 ms"]
    # The policy is edited: the new budget at once, in the Deployment, status and an Event.
    body = make_isvc(status=dict(first.status))
    edited = plan_reconcile(body, itl_snapshot(25), LATER, Settings(), applied_after(first))
    now_kept = edited.status["control"][MEMORY_KEY][VARIANT]
    assert now_kept["tokens"] < kept["tokens"]
    assert DEPLOYMENT in [describe(a).split()[-1] for a in edited.actions
                          if isinstance(a, Apply)]
    (event,) = chunk_events(edited)
    assert event.endswith("interTokenLatencyMs changed from 50 to 25 ms")
    args = edited.status["engineArgs"]
    assert args[args.index("--max-num-batched-tokens") + 1] == str(now_kept["tokens"])
    # Nothing changed since: no write, no Event.
    cache = applied_after(first)
    for action in edited.actions:
        if isinstance(action, Apply):
            cache.remember(action.obj, LATER.timestamp())
    again = plan_reconcile(make_isvc(status=dict(edited.status)), itl_snapshot(25), PASS,
                           Settings(), cache)
    assert again.actions == ()


def test_the_slo_pass_keeps_the_budget_beside_the_laws_memory() -> None:
    first = plan_reconcile(make_isvc(), itl_snapshot(50), NOW, Settings())
    body = make_isvc(status=dict(first.status))
    update = slo_pass(LATER, memory_changed=True)
    plan = plan_reconcile(body, itl_snapshot(50), LATER, Settings(), applied_after(first), update)
    control = plan.status["control"]
    assert set(control) == {"state", "slo", MEMORY_KEY}
    assert control[MEMORY_KEY] == first.status["control"][MEMORY_KEY]
    assert chunk_events(plan) == []


def jitter_snapshot(cv: float) -> Snapshot:
    policy = make_policy(scaling={"minReplicas": 2, "maxReplicas": 2},
                         objectives={"throughputCVMax": cv})
    return make_snapshot(policies=(policy,), dep=READY_DEP, pods=RUNNING)


def test_a_jitter_reading_over_the_bound_rolls_a_lower_budget_and_says_so() -> None:
    """An SLO pass that reads jitter over ``throughputCVMax`` writes it in the law's state
    (``jitterOver``); the next plan lowers the budget: the Deployment, status and an Event.
    A reading inside the bound moves nothing, and no budget is kept before one."""
    first = plan_reconcile(make_isvc(), jitter_snapshot(0.4), NOW, Settings())
    assert MEMORY_KEY not in (first.status.get("control") or {})
    assert chunk_events(first) == []
    cache = applied_after(first)

    def after_pass(over: float) -> ReconcilePlan:
        update = slo_pass(LATER, memory_changed=True)
        state = {**update.control["state"], "jitterOver": over}
        written = plan_reconcile(make_isvc(status=dict(first.status)), jitter_snapshot(0.4),
                                 LATER, Settings(), cache,
                                 replace(update, control={**update.control, "state": state}))
        assert written.status["control"]["state"]["jitterOver"] == over
        return plan_reconcile(make_isvc(status=dict(written.status)), jitter_snapshot(0.4),
                              PASS, Settings(), cache)

    calm = after_pass(0.9)
    assert MEMORY_KEY not in calm.status["control"] and chunk_events(calm) == []
    plan = after_pass(2.0)
    kept = plan.status["control"][MEMORY_KEY][VARIANT]
    assert (kept["cvMax"], kept["jitterOver"]) == (0.4, 2.0)
    assert kept["jitterCap"] == jitter_budget(8192, 2.0, 512)
    args = plan.status["engineArgs"]
    assert args[args.index("--max-num-batched-tokens") + 1] == str(kept["jitterCap"])
    assert DEPLOYMENT in [describe(a).split()[-1] for a in plan.actions if isinstance(a, Apply)]
    (event,) = chunk_events(plan)
    assert f"changed from 8192 to {kept['jitterCap']} tokens" in event
    assert "jitter measured 0.80, over throughputCVMax 0.4" in event


def test_a_retired_variant_is_announced_naming_where_the_replicas_run(golden: Any) -> None:
    plan = plan_reconcile(settled(), WITH_LEGACY, LATER, Settings(), applied_after(FIRST))
    retired = [a for a in plan.actions if isinstance(a, PostEvent) and a.reason == C.PLACED]
    assert len(retired) == 1 and retired[0].type == "Normal"
    golden.check("placement", "variant-retired", retired[0].message)
