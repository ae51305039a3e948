"""arbitrate() edges: whole replicas, exact budgets, reclaim arithmetic, the messages."""

from __future__ import annotations

import dataclasses

import pytest

from slo_operator.api.observe import ServiceKey
from slo_operator.control import GpuRequest, Grant, arbitrate
from slo_operator.control import reasons as R

HI, MID, LO, LO2 = (ServiceKey("a", n) for n in ("hi", "mid", "lo", "lo2"))


def req(key: ServiceKey, wanted: int, held: int, *, prio: int = 0, gpr: int = 1,
        tenant: str = "t", pool: str = "H100", min_replicas: int = 0) -> GpuRequest:
    return GpuRequest(key, wanted, held, gpr, prio, tenant, pool, min_replicas)


def grants(requests: list[GpuRequest], free: dict[str, int],
           budgets: dict[str, int | None] | None = None) -> dict[ServiceKey, int]:
    out = arbitrate(requests, free, budgets or {})
    for g in out.values():
        assert type(g.replicas) is int
    return {k: g.replicas for k, g in out.items()}


def test_request_defaults() -> None:
    assert GpuRequest(HI, 1, 0) == GpuRequest(HI, 1, 0, 1, 0, "", "", 0)
    assert Grant(HI, 1) == Grant(HI, 1, None, "")


def test_requests_and_grants_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        GpuRequest(HI, 1, 0).wanted = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Grant(HI, 1).replicas = 2  # type: ignore[misc]


def test_budget_allows_whole_replicas_and_says_so() -> None:
    out = arbitrate([req(HI, 4, 0, gpr=2, tenant="acme")], {"H100": 100}, {"acme": 7})
    assert out[HI] == Grant(HI, 3, R.GPU_BUDGET, (
        "wanted 4, granted 3: tenant 'acme' gpuBudget 7 GPUs leaves room for 3 replica(s) "
        "of 2 GPU(s) after higher-priority services"))


def test_a_budget_that_fits_the_wish_leaves_the_pool_to_explain_a_shortfall() -> None:
    out = arbitrate([req(HI, 4, 0, tenant="acme")], {"H100": 2}, {"acme": 4})
    assert out[HI] == Grant(HI, 2, R.NO_GPUS, (
        "wanted 4, granted 2: pool 'H100' has no free GPUs for 2 more replica(s) of 1 GPU(s); "
        "higher-priority services were served first"))


def test_a_pool_missing_from_the_free_map_has_no_free_gpus() -> None:
    assert grants([req(HI, 1, 0)], {}) == {HI: 0}


def test_scale_in_of_multi_gpu_replicas_releases_all_their_gpus() -> None:
    got = grants([req(LO, 1, 3, gpr=2), req(HI, 3, 1, gpr=2, prio=1)], {"H100": 0})
    assert got == {LO: 1, HI: 3}


def test_reclaim_of_a_single_replica_with_its_message() -> None:
    out = arbitrate([req(HI, 3, 2, prio=10), req(LO, 1, 1)], {"H100": 0}, {})
    assert out[HI] == Grant(HI, 3)
    assert out[LO] == Grant(LO, 0, R.GPUS_RECLAIMED, (
        "wanted 1, granted 0: 1 replica(s) given up to higher-priority a/hi "
        "(priority 10 > 0) in pool 'H100'"))


def test_every_short_service_reclaims_not_only_the_first() -> None:
    got = grants([req(HI, 1, 1, prio=10), req(MID, 2, 1, prio=5), req(LO, 1, 1)],
                 {"H100": 0})
    assert got == {HI: 1, MID: 2, LO: 0}


def test_reclaim_counts_free_gpus_and_multi_gpu_shortfalls() -> None:
    """hi needs 2 more 2-GPU replicas (4 GPUs); 2 are free, so 2 come from lo."""
    got = grants([req(HI, 3, 1, gpr=2, prio=10), req(LO, 4, 4)], {"H100": 2})
    assert got == {HI: 3, LO: 2}


def test_reclaim_rounds_up_to_whole_victim_replicas() -> None:
    """hi needs 3 GPUs; lo's replicas hold 2 each: two of them go."""
    got = grants([req(HI, 4, 1, prio=10), req(LO, 3, 3, gpr=2)], {"H100": 0})
    assert got == {HI: 4, LO: 1}


def test_reclaim_walks_victims_from_the_lowest_priority_up() -> None:
    """lo is at its minimum; lo2 (next up) gives 1, mid gives the remaining 2."""
    got = grants([req(HI, 4, 1, prio=10), req(MID, 2, 2, prio=5),
                  req(LO2, 1, 1, prio=1), req(LO, 2, 2, min_replicas=2)], {"H100": 0})
    assert got == {HI: 4, MID: 0, LO2: 0, LO: 2}


def test_reclaim_counts_free_gpus_too_few_for_a_whole_replica() -> None:
    """One GPU is free but hi's replicas need two: hi takes 3 more GPUs from lo, not 5."""
    got = grants([req(HI, 3, 1, gpr=2, prio=10), req(LO, 5, 5)], {"H100": 1})
    assert got == {HI: 3, LO: 2}


def test_reclaim_stops_once_the_need_is_covered() -> None:
    """lo's one 2-GPU replica covers hi's one missing GPU; lo2 keeps all of its own."""
    got = grants([req(HI, 2, 1, prio=10), req(LO, 1, 1, gpr=2), req(LO2, 5, 5, prio=1)],
                 {"H100": 0})
    assert got == {HI: 2, LO: 0, LO2: 5}
