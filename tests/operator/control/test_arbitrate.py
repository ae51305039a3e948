"""arbitrate(): scarce GPUs go by priority, budgets cap tenants, reclaims take whole
replicas from the lowest priority first, and every service short of its wish says why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from slo_operator.api.observe import ServiceKey
from slo_operator.control import GpuRequest, Grant, arbitrate
from slo_operator.control import reasons as R

HI, MID, LO, LO2 = (ServiceKey("a", n) for n in ("hi", "mid", "lo", "lo2"))


def req(key: ServiceKey | str, wanted: int, held: int, *, prio: int = 0, gpr: int = 1,
        tenant: str = "t", pool: str = "H100", min_replicas: int = 0) -> GpuRequest:
    if isinstance(key, str):
        ns, _, name = key.partition("/")
        key = ServiceKey(ns, name)
    return GpuRequest(key, wanted, held, gpr, prio, tenant, pool, min_replicas)


@dataclass
class Case:
    id: str
    requests: list[GpuRequest]
    free: dict[str, int]
    want: dict[str, tuple[int, str | None]]  # "ns/name" -> (replicas, reason)
    budgets: dict[str, int | None] = field(default_factory=dict)


CASES = [
    # --- priority and pools ---------------------------------------------------------------
    Case("enough-gpus-everyone-served",
         [req("a/hi", 4, 2, prio=10), req("b/lo", 3, 1)], {"H100": 8},
         {"a/hi": (4, None), "b/lo": (3, None)}),
    Case("scarce-gpus-go-to-higher-priority-first",
         [req("b/lo", 3, 1), req("a/hi", 4, 2, prio=10)], {"H100": 2},
         {"a/hi": (4, None), "b/lo": (1, R.NO_GPUS)}),
    Case("pools-do-not-mix",
         [req("a/h100", 3, 1, pool="H100"), req("b/a100", 3, 1, pool="A100")],
         {"H100": 0, "A100": 5}, {"a/h100": (1, R.NO_GPUS), "b/a100": (3, None)}),
    Case("a-pool-missing-from-the-free-map-has-no-free-gpus",
         [req(HI, 1, 0)], {}, {"a/hi": (0, R.NO_GPUS)}),
    Case("multi-gpu-replicas-need-whole-replicas-of-gpus",
         [req("a/big", 3, 1, gpr=4)], {"H100": 7}, {"a/big": (2, R.NO_GPUS)}),
    Case("no-gpus-per-replica-counts-as-one",
         [req(HI, 3, 0, gpr=0)], {"H100": 2}, {"a/hi": (2, R.NO_GPUS)}),
    Case("scale-in-frees-gpus-for-others-in-the-same-pass",
         [req("a/shrink", 1, 3), req("b/grow", 4, 2)], {"H100": 0},
         {"a/shrink": (1, None), "b/grow": (4, None)}),
    Case("scale-in-of-multi-gpu-replicas-releases-all-their-gpus",
         [req(LO, 1, 3, gpr=2), req(HI, 3, 1, gpr=2, prio=1)], {"H100": 0},
         {"a/lo": (1, None), "a/hi": (3, None)}),
    Case("negative-wish-held-and-free-count-as-zero",
         [req(HI, -1, -2)], {"H100": -4}, {"a/hi": (0, None)}),
    # --- tenant budgets -------------------------------------------------------------------
    Case("tenant-budget-caps-all-its-services-by-priority",
         [req("a/x", 3, 1, prio=5, tenant="acme", gpr=2),
          req("a/y", 3, 1, tenant="acme", gpr=2)],
         {"H100": 100}, {"a/x": (3, None), "a/y": (1, R.GPU_BUDGET)}, budgets={"acme": 8}),
    Case("lowered-budget-scales-in-the-lowest-priority",
         [req("a/x", 2, 2, prio=5, tenant="acme"), req("a/y", 2, 2, tenant="acme")],
         {"H100": 0}, {"a/x": (2, None), "a/y": (1, R.GPU_BUDGET)}, budgets={"acme": 3}),
    Case("budget-allows-whole-replicas-only",
         [req(HI, 4, 0, gpr=2, tenant="acme")], {"H100": 100},
         {"a/hi": (3, R.GPU_BUDGET)}, budgets={"acme": 7}),
    Case("budget-that-fits-the-wish-leaves-the-pool-to-explain-a-shortfall",
         [req(HI, 4, 0, tenant="acme")], {"H100": 2},
         {"a/hi": (2, R.NO_GPUS)}, budgets={"acme": 4}),
    Case("budget-counts-held-replicas-of-higher-priority-services",
         [req(HI, 2, 2, prio=10, tenant="acme", gpr=2), req(LO, 2, 0, tenant="acme", gpr=2)],
         {"H100": 8}, {"a/hi": (2, None), "a/lo": (1, R.GPU_BUDGET)}, budgets={"acme": 6}),
    Case("a-tenant-without-a-budget-is-not-capped",
         [req(HI, 3, 0, tenant="acme")], {"H100": 8}, {"a/hi": (3, None)},
         budgets={"acme": None, "other": 0}),
    Case("negative-budget-leaves-room-for-nothing",
         [req(HI, 2, -1, tenant="acme")], {"H100": 5}, {"a/hi": (0, R.GPU_BUDGET)},
         budgets={"acme": -3}),
    # --- reclaim from lower priorities -----------------------------------------------------
    Case("higher-priority-reclaims-from-lower-down-to-its-minimum",
         [req("a/hi", 5, 2, prio=10), req("b/lo", 4, 4, min_replicas=2)], {"H100": 0},
         {"a/hi": (4, R.NO_GPUS), "b/lo": (2, R.GPUS_RECLAIMED)}),
    Case("lower-priority-never-reclaims-from-higher",
         [req("a/hi", 4, 4, prio=10), req("b/lo", 4, 1)], {"H100": 0},
         {"a/hi": (4, None), "b/lo": (1, R.NO_GPUS)}),
    Case("reclaim-of-a-single-replica",
         [req(HI, 3, 2, prio=10), req(LO, 1, 1)], {"H100": 0},
         {"a/hi": (3, None), "a/lo": (0, R.GPUS_RECLAIMED)}),
    Case("reclaim-names-the-count-pool-and-priorities",
         [req(HI, 3, 1, prio=10, gpr=2), req(LO, 4, 4, prio=2, gpr=2)], {"H100": 0},
         {"a/hi": (3, None), "a/lo": (2, R.GPUS_RECLAIMED)}),
    Case("every-short-service-reclaims-not-only-the-first",
         [req(HI, 1, 1, prio=10), req(MID, 2, 1, prio=5), req(LO, 1, 1)], {"H100": 0},
         {"a/hi": (1, None), "a/mid": (2, None), "a/lo": (0, R.GPUS_RECLAIMED)}),
    Case("a-service-already-served-reclaims-nothing",
         [req(HI, 1, 1, prio=10), req(LO, 2, 1)], {"H100": 0},
         {"a/hi": (1, None), "a/lo": (1, R.NO_GPUS)}),
    Case("reclaim-counts-free-gpus-and-multi-gpu-shortfalls",  # 4 GPUs short, 2 free
         [req(HI, 3, 1, gpr=2, prio=10), req(LO, 4, 4)], {"H100": 2},
         {"a/hi": (3, None), "a/lo": (2, R.GPUS_RECLAIMED)}),
    Case("reclaim-counts-free-gpus-too-few-for-a-whole-replica",  # takes 3 GPUs, not 4
         [req(HI, 3, 1, gpr=2, prio=10), req(LO, 5, 5)], {"H100": 1},
         {"a/hi": (3, None), "a/lo": (2, R.GPUS_RECLAIMED)}),
    Case("reclaim-rounds-up-to-whole-victim-replicas",  # 3 GPUs short: two 2-GPU replicas
         [req(HI, 4, 1, prio=10), req(LO, 3, 3, gpr=2)], {"H100": 0},
         {"a/hi": (4, None), "a/lo": (1, R.GPUS_RECLAIMED)}),
    Case("reclaim-walks-victims-from-the-lowest-priority-up",  # lo at its minimum
         [req(HI, 4, 1, prio=10), req(MID, 2, 2, prio=5), req(LO2, 1, 1, prio=1),
          req(LO, 2, 2, min_replicas=2)], {"H100": 0},
         {"a/hi": (4, None), "a/mid": (0, R.GPUS_RECLAIMED), "a/lo2": (0, R.GPUS_RECLAIMED),
          "a/lo": (2, None)}),
    Case("reclaim-stops-once-the-need-is-covered",  # lo's 2-GPU replica covers hi's 1 GPU
         [req(HI, 2, 1, prio=10), req(LO, 1, 1, gpr=2), req(LO2, 5, 5, prio=1)],
         {"H100": 0}, {"a/hi": (2, None), "a/lo": (0, R.GPUS_RECLAIMED), "a/lo2": (5, None)}),
    Case("a-victim-at-its-minimum-gives-nothing-and-keeps-its-own-reason",
         [req(HI, 2, 1, prio=10), req(LO, 3, 1, min_replicas=1)], {"H100": 0},
         {"a/hi": (1, R.NO_GPUS), "a/lo": (1, R.NO_GPUS)}),
    Case("a-need-met-exactly-leaves-the-next-victim-alone",
         [req(HI, 2, 1, prio=10), req(LO2, 3, 1, prio=1), req(LO, 1, 1)], {"H100": 0},
         {"a/hi": (2, None), "a/lo2": (1, R.NO_GPUS), "a/lo": (0, R.GPUS_RECLAIMED)}),
    Case("gpus-left-by-a-reclaim-serve-the-next-short-service-without-a-victim",
         [req(HI, 2, 1, prio=10), req(MID, 2, 1, prio=5), req(LO2, 2, 1, prio=1),
          req(LO, 1, 1, gpr=2)], {"H100": 0},
         {"a/hi": (2, None), "a/mid": (2, None), "a/lo2": (1, R.NO_GPUS),
          "a/lo": (0, R.GPUS_RECLAIMED)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_arbitrate(case: Case, golden: Any) -> None:
    grants = arbitrate(case.requests, case.free, case.budgets)
    got = {str(k): (g.replicas, g.reason) for k, g in grants.items()}
    assert got == case.want
    for key, g in grants.items():
        assert type(g.replicas) is int
        assert (g.reason is None) == (g.message == "")
        if g.message:
            golden.check("control", f"arbitrate.{case.id}.{key}", g.message)


def test_equal_priorities_go_by_namespace_then_name() -> None:
    a, b, c = ServiceKey("a", "z"), ServiceKey("b", "a"), ServiceKey("b", "b")
    out = arbitrate([req(c, 1, 0), req(b, 1, 0), req(a, 1, 0)], {"H100": 2}, {})
    assert {k: g.replicas for k, g in out.items()} == {a: 1, b: 1, c: 0}
    assert list(out) == [a, b, c]


def test_a_service_granted_its_wish_carries_no_reason() -> None:
    assert arbitrate([req(HI, 2, 1)], {"H100": 1}, {})[HI] == Grant(HI, 2)


def test_grants_never_exceed_free_plus_held_gpus() -> None:
    reqs = [req(f"n/s{i}", 5, 1, prio=i % 3, gpr=1 + i % 2) for i in range(12)]
    grants = arbitrate(reqs, {"H100": 10}, {})
    used = sum(grants[r.key].replicas * r.gpus_per_replica for r in reqs)
    held = sum(r.held * r.gpus_per_replica for r in reqs)
    assert used <= held + 10
