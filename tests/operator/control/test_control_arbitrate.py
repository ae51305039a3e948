"""arbitrate(): scarce GPUs go by priority, budgets cap tenants, every loser says why."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from slo_operator.api.observe import ServiceKey
from slo_operator.control import GpuRequest, arbitrate
from slo_operator.control import reasons as R


def req(name: str, wanted: int, held: int, *, prio: int = 0, tenant: str = "t",
        pool: str = "H100", gpr: int = 1, min_replicas: int = 0) -> GpuRequest:
    ns, _, svc = name.partition("/")
    return GpuRequest(ServiceKey(ns, svc), wanted, held, gpr, prio, tenant, pool, min_replicas)


@dataclass
class Case:
    id: str
    requests: list[GpuRequest]
    free: dict[str, int]
    want: dict[str, tuple[int, str | None]]
    budgets: dict[str, int | None] = field(default_factory=dict)


CASES = [
    Case("enough-gpus-everyone-served",
         [req("a/hi", 4, 2, prio=10), req("b/lo", 3, 1)], {"H100": 8},
         {"a/hi": (4, None), "b/lo": (3, None)}),
    Case("scarce-gpus-go-to-higher-priority-first",
         [req("b/lo", 3, 1), req("a/hi", 4, 2, prio=10)], {"H100": 2},
         {"a/hi": (4, None), "b/lo": (1, R.NO_GPUS)}),
    Case("higher-priority-reclaims-from-lower-down-to-its-minimum",
         [req("a/hi", 5, 2, prio=10), req("b/lo", 4, 4, min_replicas=2)], {"H100": 0},
         {"a/hi": (4, R.NO_GPUS), "b/lo": (2, R.GPUS_RECLAIMED)}),
    Case("lower-priority-never-reclaims-from-higher",
         [req("a/hi", 4, 4, prio=10), req("b/lo", 4, 1)], {"H100": 0},
         {"a/hi": (4, None), "b/lo": (1, R.NO_GPUS)}),
    Case("tenant-budget-caps-all-its-services-by-priority",
         [req("a/x", 3, 1, prio=5, tenant="acme", gpr=2), req("a/y", 3, 1, tenant="acme", gpr=2)],
         {"H100": 100}, {"a/x": (3, None), "a/y": (1, R.GPU_BUDGET)}, budgets={"acme": 8}),
    Case("lowered-budget-scales-in-the-lowest-priority",
         [req("a/x", 2, 2, prio=5, tenant="acme"), req("a/y", 2, 2, tenant="acme")],
         {"H100": 0}, {"a/x": (2, None), "a/y": (1, R.GPU_BUDGET)}, budgets={"acme": 3}),
    Case("scale-in-frees-gpus-for-others-in-the-same-pass",
         [req("a/shrink", 1, 3), req("b/grow", 4, 2)], {"H100": 0},
         {"a/shrink": (1, None), "b/grow": (4, None)}),
    Case("pools-do-not-mix",
         [req("a/h100", 3, 1, pool="H100"), req("b/a100", 3, 1, pool="A100")],
         {"H100": 0, "A100": 5}, {"a/h100": (1, R.NO_GPUS), "b/a100": (3, None)}),
    Case("multi-gpu-replicas-need-whole-replicas-of-gpus",
         [req("a/big", 3, 1, gpr=4)], {"H100": 7},
         {"a/big": (2, R.NO_GPUS)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_arbitrate(case: Case) -> None:
    grants = arbitrate(case.requests, case.free, case.budgets)
    got = {str(k): (g.replicas, g.reason) for k, g in grants.items()}
    assert got == case.want
    for g in grants.values():
        assert (g.reason is None) == (g.message == "")


def test_grants_never_exceed_free_plus_held_gpus() -> None:
    reqs = [req(f"n/s{i}", 5, 1, prio=i % 3, gpr=1 + i % 2) for i in range(12)]
    grants = arbitrate(reqs, {"H100": 10}, {})
    used = sum(grants[r.key].replicas * r.gpus_per_replica for r in reqs)
    held = sum(r.held * r.gpus_per_replica for r in reqs)
    assert used <= held + 10
