"""The refresh step the handlers share: a policy edit decides for its bound services at
once, a pass threads the free GPUs and writes for a bounded number of services at once,
refreshes that owned objects ask for run in batches, and decisions are labelled for the
metrics."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from slo_operator.api.cluster import NodeInfo, Snapshot
from slo_operator.api.observe import ServiceKey
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.refresh import (
    OwnerRefresher,
    PassResult,
    Reconciler,
    decision_direction,
    policy_changed,
    policy_removed,
    refresh_services,
)
from slo_operator.reconcile.service import Settings
from tests.operator.reconcile.fake import FakeKube
from tests.operator.reconcile.prom_fake import FakeMetrics
from tests.operator.reconcile.test_loop import QUIET, planned
from tests.operator.reconcile.test_placing import AV, HV
from tests.operator.reconcile.test_placing import NODES as MIXED
from tests.operator.reconcile.test_service import H100, NOW, make_isvc, make_policy

LATER = NOW + timedelta(seconds=30)
CHAT, OTHER = ServiceKey("team-a", "chat"), ServiceKey("team-b", "other")
EIGHT = (NodeInfo("h100-a", H100, {"nvidia.com/gpu": "8"}),)


@dataclass
class Memory:
    """The written-status memory, without the revision bookkeeping."""

    written: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def latest(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return body

    def remember(self, body: Mapping[str, Any], status: dict[str, Any],
                 between: Sequence[Mapping[str, Any]] = ()) -> None:
        self.written[(body["metadata"]["namespace"], body["metadata"]["name"])] = status


def reconciler(kube: FakeKube, metrics: FakeMetrics | None) -> Reconciler:
    return Reconciler(kube, Settings(), AppliedCache(), Memory(),
                      lambda namespace, name: asyncio.Lock(), metrics, clock=lambda: LATER)


def two_tenants() -> Snapshot:
    """team-a/chat bound to team-a/gold, team-b/other bound to team-b/gold; both planned
    with two replicas on one eight-GPU node."""
    _, a, _ = planned(ns="team-a", name="chat", nodes=EIGHT)
    _, b, _ = planned(ns="team-b", name="other", nodes=EIGHT)
    return Snapshot(services={**a.services, **b.services}, policies={**a.policies, **b.policies},
                    deployments={**a.deployments, **b.deployments},
                    variant_deployments={**a.variant_deployments, **b.variant_deployments},
                    pods={**a.pods, **b.pods}, nodes=EIGHT)


def edited_gold() -> dict[str, Any]:
    pol = make_policy(scaling={"minReplicas": 3, "maxReplicas": 8})
    pol["metadata"]["namespace"] = "team-a"
    return pol


def test_a_policy_edit_decides_for_its_bound_services_at_once() -> None:
    snap = two_tenants()
    kube = FakeKube()
    metrics = FakeMetrics({CHAT: QUIET, OTHER: QUIET})
    done = asyncio.run(policy_changed(reconciler(kube, metrics), edited_gold(), snap))
    # One pass of the fixed queries, deciding for the bound service only.
    assert len(metrics.calls) == 1
    assert set(done.updates) == {CHAT}
    assert set(done.outcomes) == {CHAT}
    # The decision ran on the edited policy and was applied and recorded.
    dep = kube.objects[("Deployment", "team-a", "chat-vllm-h100-sxm-80gb")]
    assert dep["spec"]["replicas"] >= 3
    status = done.outcomes[CHAT].status
    assert status["desiredReplicas"] == dep["spec"]["replicas"]
    assert status["observed"]["state"] == "OK"
    assert status["lastDecisions"][-1]["reason"] == done.updates[CHAT].reason
    assert status["control"]["state"]
    # The other tenant's service is neither decided for nor written.
    assert not [k for k in kube.objects if k[1] == "team-b"]


def _status_writes() -> dict[str, float]:
    return {s.labels["reason"]: s.value for m in REGISTRY.collect()
            if m.name == "slo_operator_status_writes" for s in m.samples
            if s.name.endswith("_total")}


def test_status_writes_are_counted_by_what_moved() -> None:
    snap = two_tenants()
    before = _status_writes()
    asyncio.run(policy_changed(reconciler(FakeKube(), FakeMetrics({CHAT: QUIET})),
                               edited_gold(), snap))
    after = _status_writes()
    moved = {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k)}
    # One write for the service the edit decided for: its replicas moved to the new minimum.
    assert moved == {"desiredReplicas": 1.0}


def test_a_resumed_policy_refreshes_its_services_without_querying_prometheus() -> None:
    kube = FakeKube()
    metrics = FakeMetrics({CHAT: QUIET})
    done = asyncio.run(policy_changed(reconciler(kube, metrics), edited_gold(), two_tenants(),
                                      decide=False))
    assert metrics.calls == []
    assert done.updates == {} and set(done.outcomes) == {CHAT}
    assert done.outcomes[CHAT].status["desiredReplicas"] == 3  # the new minimum still holds
    assert not done.outcomes[CHAT].status.get("observed")


def test_a_deleted_policy_leaves_its_services_running_and_saying_so() -> None:
    kube = FakeKube()
    done = asyncio.run(policy_removed(reconciler(kube, FakeMetrics()), "team-a", "gold",
                                      two_tenants()))
    assert set(done.outcomes) == {CHAT} and done.updates == {}
    assert kube.applies == [] and done.pending == 1
    ready = next(c for c in done.outcomes[CHAT].status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "PolicyNotFound"


def test_a_pass_hands_the_free_gpus_from_one_service_to_the_next() -> None:
    pol = make_policy(scaling={"minReplicas": 2, "maxReplicas": 2})
    snap = Snapshot(services={("team-a", n): make_isvc(n, hardware={}) for n in ("a", "b")},
                    policies={("team-a", "gold"): pol}, nodes=MIXED)
    kube = FakeKube()
    done: PassResult = asyncio.run(refresh_services(reconciler(kube, None), snap))
    deployed = sorted(name for kind, name in kube.applies if kind == "Deployment")
    assert deployed == [f"a-vllm-{HV}", f"b-vllm-{AV}"]
    assert done.writes == 6 and done.pending == 0


def test_one_failing_service_does_not_stop_the_pass() -> None:
    snap = two_tenants()
    broken = {**snap.services}
    broken[("team-a", "chat")] = {**broken[("team-a", "chat")], "spec": None, "metadata": None}
    kube = FakeKube()
    done = asyncio.run(refresh_services(reconciler(kube, None), replace(snap, services=broken)))
    assert done.pending == 1 and set(done.outcomes) == {OTHER}


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param({"desiredReplicas": 2}, {"desiredReplicas": 3}, "scale_up", id="up"),
        pytest.param({"desiredReplicas": 3}, {"desiredReplicas": 1}, "scale_down", id="down"),
        pytest.param({"desiredReplicas": 2, "batchLimit": 64},
                     {"desiredReplicas": 2, "batchLimit": 32}, "batch_down", id="limit-down"),
        pytest.param({"batchLimit": 32}, {"batchLimit": 48}, "batch_up", id="limit-up"),
        pytest.param({"desiredReplicas": 2, "batchLimit": 64},
                     {"desiredReplicas": 2, "batchLimit": 64}, "hold", id="hold"),
        pytest.param({}, {"desiredReplicas": 2}, "hold", id="first-decision"),
    ],
)
def test_decision_direction(old: dict[str, Any], new: dict[str, Any], want: str) -> None:
    assert decision_direction(old, new) == want


@dataclass
class PairedKube(FakeKube):
    """Deployment applies meet in pairs: each waits for a second one in flight (so
    writes made one at a time fail); records the most writes in flight at once."""

    barrier: threading.Barrier = field(default_factory=lambda: threading.Barrier(2, timeout=5))
    guard: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    most: int = 0

    def apply(self, obj: Mapping[str, Any]) -> None:
        with self.guard:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if obj["kind"] == "Deployment":
                self.barrier.wait()
            super().apply(obj)
        finally:
            with self.guard:
                self.in_flight -= 1


def test_a_pass_writes_for_several_services_at_once_and_no_more_than_its_bound() -> None:
    names = ("a", "b", "c", "d")
    pol = make_policy(scaling={"minReplicas": 1, "maxReplicas": 1})
    snap = Snapshot(services={("team-a", n): make_isvc(n, hardware={}) for n in names},
                    policies={("team-a", "gold"): pol}, nodes=MIXED)
    kube = PairedKube()
    r = replace(reconciler(kube, None), write_concurrency=2)
    done = asyncio.run(refresh_services(r, snap))
    assert done.pending == 0 and set(done.outcomes) == {ServiceKey("team-a", n) for n in names}
    assert kube.most == 2


def test_one_service_at_a_time_when_the_bound_is_one() -> None:
    snap = Snapshot(services={("team-a", n): make_isvc(n, hardware={}) for n in ("a", "b")},
                    policies={("team-a", "gold"): make_policy()}, nodes=MIXED)
    kube = PairedKube(barrier=threading.Barrier(2, timeout=0.5))
    done = asyncio.run(refresh_services(replace(reconciler(kube, None), write_concurrency=1),
                                        snap))
    # Alone in flight, each Deployment apply waits for a partner that never comes.
    assert kube.most == 1 and done.pending == 2


def test_a_cancelled_pass_leaves_no_service_locked() -> None:
    snap = two_tenants()
    locks: dict[tuple[str, str], asyncio.Lock] = {}
    started = threading.Event()

    @dataclass
    class Stuck(FakeKube):
        def patch_status(self, kind: str, namespace: str, name: str,
                         status: Mapping[str, Any]) -> None:
            started.set()
            raise asyncio.CancelledError  # the pass is stopped mid-write

    r = replace(reconciler(Stuck(), FakeMetrics({CHAT: QUIET, OTHER: QUIET})),
                lock=lambda ns, name: locks.setdefault((ns, name), asyncio.Lock()))

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await refresh_services(r, snap)
        assert started.is_set() and locks and not any(lk.locked() for lk in locks.values())

    asyncio.run(main())


def test_services_asked_for_while_a_batch_runs_are_refreshed_together_next() -> None:
    a, b, c = (ServiceKey("ns", n) for n in "abc")
    batches: list[list[ServiceKey]] = []
    go = asyncio.Event()

    async def run(keys: list[ServiceKey]) -> None:
        batches.append(keys)
        await go.wait()

    async def main() -> None:
        owners = OwnerRefresher()
        owners.ask(a, run)  # returns at once: the batch runs in the background
        while not batches:
            await asyncio.sleep(0)
        for k in (c, b, a, b):
            owners.ask(k, run)
        go.set()
        await owners.idle()

    asyncio.run(main())
    assert batches == [[a], [a, b, c]]


def test_a_failed_batch_does_not_stop_the_next() -> None:
    a, b = ServiceKey("ns", "a"), ServiceKey("ns", "b")
    batches: list[list[ServiceKey]] = []

    async def run(keys: list[ServiceKey]) -> None:
        batches.append(keys)
        if len(batches) == 1:
            await asyncio.sleep(0)  # b is asked for meanwhile
            raise RuntimeError("the API server went away")

    async def main() -> None:
        owners = OwnerRefresher()
        owners.ask(a, run)
        while not batches:
            await asyncio.sleep(0)
        owners.ask(b, run)
        await owners.idle()

    asyncio.run(main())
    assert batches == [[a], [b]]


def test_a_pass_writes_nothing_for_services_deleted_or_edited_since_its_snapshot() -> None:
    """The pass observed and decided from a snapshot; meanwhile team-a's policy was edited
    and team-b's service deleted. Neither gets a write from this pass (the edit's own
    reconcile decides with the new policy); an untouched service still does."""
    from slo_operator.reconcile.caches import live_view, superseded
    from tests.operator.handlers.test_handlers import index_kwargs

    snap = two_tenants()
    _, third, _ = planned(ns="team-c", name="third", nodes=EIGHT)
    snap = replace(snap, services={**snap.services, **third.services},
                   policies={**snap.policies, **third.policies},
                   deployments={**snap.deployments, **third.deployments},
                   variant_deployments={**snap.variant_deployments,
                                        **third.variant_deployments},
                   pods={**snap.pods, **third.pods})
    edited = edited_gold()
    edited["metadata"]["generation"] = 2
    live = replace(snap, policies={**snap.policies, ("team-a", "gold"): edited},
                   services={k: v for k, v in snap.services.items() if k != ("team-b", "other")})
    indexes = index_kwargs(live)

    def stale(key: ServiceKey) -> bool:
        k = (key.namespace, key.name)
        return superseded(snap, *live_view(indexes, k), k)

    kube = FakeKube()
    metrics = FakeMetrics({CHAT: QUIET, OTHER: QUIET, ServiceKey("team-c", "third"): QUIET})
    done = asyncio.run(refresh_services(reconciler(kube, metrics), snap, stale=stale))
    assert done.superseded == 2
    assert set(done.outcomes) == {ServiceKey("team-c", "third")}
    assert not [k for k in kube.objects if k[1] in ("team-a", "team-b")]
    assert kube.statuses  # the untouched service was reconciled
    # Without the check the same pass writes to all three.
    every = asyncio.run(refresh_services(reconciler(FakeKube(), metrics), snap))
    assert len(every.outcomes) == 3 and every.superseded == 0


class WriteDuringQueries(FakeMetrics):
    """Prometheus that, while a pass waits for it, lets another trigger's status write of
    ``body`` land in ``statuses``."""

    def __init__(self, statuses: Any, body: Mapping[str, Any], status: dict[str, Any],
                 loads: Mapping[ServiceKey, Any]) -> None:
        super().__init__(dict(loads))
        self.statuses, self.body, self.status = statuses, body, status

    async def run(self, queries: Mapping[str, str], at: float) -> dict[str, Any]:
        self.statuses.remember(self.body, self.status)
        return await super().run(queries, at)


def test_a_service_whose_status_another_trigger_wrote_during_the_pass_is_left_to_it() -> None:
    """A wake's handler decides and writes while the pass queries Prometheus: the pass's
    decision came from the status before that write and would undo it."""
    from slo_operator.handlers.setup import StatusMemory

    snap = two_tenants()
    chat = snap.services[("team-a", "chat")]
    loads = {CHAT: QUIET, OTHER: QUIET}

    def pass_with(write: dict[str, Any], kube: FakeKube) -> tuple[Reconciler, PassResult]:
        statuses = StatusMemory()
        r = replace(reconciler(kube, WriteDuringQueries(statuses, chat, write, loads)),
                    statuses=statuses)
        return r, asyncio.run(refresh_services(r, snap))

    kube = FakeKube()
    r, done = pass_with({**chat["status"], "desiredReplicas": 5}, kube)
    assert done.superseded == 1 and set(done.outcomes) == {OTHER}
    assert not [k for k in kube.objects if k[1] == "team-a"]
    # The next pass decides from the handler's status.
    again = asyncio.run(refresh_services(replace(r, metrics=FakeMetrics({CHAT: QUIET})), snap,
                                         [CHAT]))
    assert again.superseded == 0 and set(again.outcomes) == {CHAT}
    # A write that only reported (no decision moved) leaves the pass's decision standing.
    _, reported = pass_with({**chat["status"], "readyReplicas": 99}, FakeKube())
    assert reported.superseded == 0


@pytest.mark.parametrize(("change", "stale"), [
    pytest.param("nothing", False, id="unchanged"),
    pytest.param("status", False, id="a-status-write-is-no-new-revision"),
    pytest.param("spec", True, id="spec-edited"),
    pytest.param("recreated", True, id="deleted-and-recreated"),
    pytest.param("policy", True, id="policy-edited"),
    pytest.param("policy-gone", True, id="policy-deleted"),
])
def test_which_changes_supersede_a_snapshot(change: str, stale: bool) -> None:
    from slo_operator.reconcile.caches import superseded

    snap = two_tenants()
    svc = snap.services[("team-a", "chat")]
    svc = {**svc, "metadata": {**svc["metadata"], "uid": "u1", "generation": 1}}
    pol = snap.policies[("team-a", "gold")]
    pol = {**pol, "metadata": {**pol["metadata"], "uid": "p1", "generation": 1}}
    snap = replace(snap, services={**snap.services, ("team-a", "chat"): svc},
                   policies={**snap.policies, ("team-a", "gold"): pol})
    live_svc: dict[str, Any] = {**svc, "metadata": dict(svc["metadata"])}
    live_pol: dict[str, Any] | None = {**pol, "metadata": dict(pol["metadata"])}
    if change == "status":
        live_svc["status"] = {"desiredReplicas": 5}
    elif change == "spec":
        live_svc["metadata"]["generation"] = 2
    elif change == "recreated":
        live_svc["metadata"]["uid"] = "u2"
    elif change == "policy":
        assert live_pol is not None
        live_pol["metadata"]["generation"] = 2
    elif change == "policy-gone":
        live_pol = None
    live_svc["spec"] = {**live_svc["spec"], "sloPolicyRef": {"name": "gold"}}
    assert superseded(snap, live_svc, live_pol, ("team-a", "chat")) is stale


@pytest.mark.parametrize("kopf", [
    pytest.param(None, id="status-ours-alone"),
    pytest.param({"progress": {"on_change": {"retries": 1}}}, id="with-kopfs-bookkeeping"),
])
def test_a_refusal_is_reported_once_while_the_cache_serves_the_decision_written_before_it(
        kopf: dict[str, Any] | None) -> None:
    """A reconcile writes its decision, the API server refuses an apply, the refusal is
    written over the decision: a refresh whose cache still serves the decision (another
    trigger's, a moment later) reports nothing again, whatever kopf keeps beside it."""
    from slo_operator.handlers.setup import StatusMemory
    from slo_operator.reconcile.refresh import refresh
    from tests.operator.reconcile.test_planner import SETTLED

    kube = FakeKube(refuse={"Service": "Services named chat are refused"})
    r = replace(reconciler(kube, None), statuses=StatusMemory())
    extra = {"kopf": kopf} if kopf else {}
    first = asyncio.run(refresh(r, make_isvc(status=dict(extra)), SETTLED))
    decision, refused = kube.statuses
    assert refused == first.status and refused["conditions"] != decision["conditions"]
    warnings = [e for e in kube.events if e[0] == "Warning"]
    assert len(warnings) == 1
    # The watch cache serves the decision as the API server stored it (kopf's field kept).
    cached = {k: v for k, v in decision.items() if v is not None}
    asyncio.run(refresh(r, make_isvc(status={**cached, **extra}), SETTLED))
    assert [e for e in kube.events if e[0] == "Warning"] == warnings
    # Once the cache serves the refusal, it is the status the next reconcile starts from.
    assert r.statuses.latest(make_isvc(status={**first.status, **extra}))["status"] == {
        **first.status, **extra}
