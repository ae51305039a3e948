"""The pass's free GPUs travel as a value from one service's plan to the next."""

from __future__ import annotations

from slo_operator.api.cluster import Snapshot
from slo_operator.reconcile.actions import Apply
from slo_operator.reconcile.gpu_inventory import GpuLedger, survey
from slo_operator.reconcile.planner import ReconcilePlan, Settings, plan_reconcile
from tests.operator.reconcile.test_placing import AV, HV, NODES
from tests.operator.reconcile.test_service import NOW, NS, make_isvc, make_policy

SNAP = Snapshot(policies={(NS, "gold"): make_policy(scaling={"minReplicas": 2,
                                                             "maxReplicas": 2})},
                nodes=NODES)
H100_GPUS = ("h100-a", "nvidia.com/gpu")


def deployments(plan: ReconcilePlan) -> list[str]:
    return [a.name for a in plan.actions if isinstance(a, Apply) and a.kind == "Deployment"]


def test_a_second_service_planned_with_the_first_ones_fleet_spills_to_the_next_pool() -> None:
    first = plan_reconcile(make_isvc("a", hardware={}), SNAP, NOW, Settings())
    assert deployments(first) == [f"a-vllm-{HV}"]  # both H100 GPUs
    assert survey(SNAP).gpus.free[H100_GPUS] == 2
    assert first.fleet.gpus.free[H100_GPUS] == 0

    second = plan_reconcile(make_isvc("b", hardware={}), SNAP, NOW, Settings(),
                            fleet=first.fleet)
    assert deployments(second) == [f"b-vllm-{AV}"]
    # Planned alone from the same snapshot, it would have claimed the same H100 GPUs.
    alone = plan_reconcile(make_isvc("b", hardware={}), SNAP, NOW, Settings())
    assert deployments(alone) == [f"b-vllm-{HV}"]


def test_a_service_that_plans_nothing_hands_the_fleet_on_unchanged() -> None:
    fleet = survey(SNAP)
    plan = plan_reconcile(make_isvc("a", policy="absent"), SNAP, NOW, Settings(), fleet=fleet)
    assert plan.fleet == fleet


def test_claiming_returns_a_new_ledger_and_leaves_the_old_one_as_it_was() -> None:
    fleet = survey(SNAP)
    pool = next(p for p in fleet.pools if p.nodes == ("h100-a",))
    taken = fleet.gpus.claim(pool, SNAP.nodes, {}, gpus=1, replicas=3)  # room for two only
    assert fleet.gpus.free[H100_GPUS] == 2
    assert taken.free[H100_GPUS] == 0
    assert fleet.gpus.room(pool, SNAP.nodes, {}, gpus=1) == 2
    assert taken.room(pool, SNAP.nodes, {}, gpus=1) == 0
    assert GpuLedger().by_product(fleet.pools) == {"A100-SXM4-80GB": 0, "H100-SXM-80GB": 0}
