"""arbitrate() at its edges: victims that give nothing are not named, a need met exactly
stops the reclaim, GPUs left over by a reclaim serve the next service, negative inputs."""

from __future__ import annotations

import dataclasses
import typing

from slo_operator.api.observe import ServiceKey
from slo_operator.control import GpuRequest, Grant, arbitrate
from slo_operator.control import reasons as R

HI, MID, LO, LO2 = (ServiceKey("a", n) for n in ("hi", "mid", "lo", "lo2"))


def req(key: ServiceKey, wanted: int, held: int, *, prio: int = 0, gpr: int = 1,
        tenant: str = "t", pool: str = "H100", min_replicas: int = 0) -> GpuRequest:
    return GpuRequest(key, wanted, held, gpr, prio, tenant, pool, min_replicas)


def no_gpus(key: ServiceKey, wanted: int, n: int, more: int, gpr: int = 1) -> Grant:
    return Grant(key, n, R.NO_GPUS, (
        f"wanted {wanted}, granted {n}: pool 'H100' has no free GPUs for {more} more "
        f"replica(s) of {gpr} GPU(s); higher-priority services were served first"))


def test_a_victim_at_its_minimum_gives_nothing_and_keeps_its_own_reason() -> None:
    out = arbitrate([req(HI, 2, 1, prio=10), req(LO, 3, 1, min_replicas=1)], {"H100": 0}, {})
    assert out[HI] == no_gpus(HI, 2, 1, 1)
    assert out[LO] == no_gpus(LO, 3, 1, 2)


def test_a_need_met_exactly_leaves_the_next_victim_alone() -> None:
    """lo gives hi its one missing GPU; lo2 (short on its own) is not named a victim."""
    out = arbitrate([req(HI, 2, 1, prio=10), req(LO2, 3, 1, prio=1), req(LO, 1, 1)],
                    {"H100": 0}, {})
    assert out[HI] == Grant(HI, 2)
    assert out[LO].replicas == 0 and out[LO].reason == R.GPUS_RECLAIMED
    assert out[LO2] == no_gpus(LO2, 3, 1, 2)


def test_gpus_left_by_a_reclaim_serve_the_next_short_service_without_a_victim() -> None:
    """hi takes a 2-GPU replica of lo for its one missing GPU: the GPU left over covers mid's
    need (zero left to reclaim), so lo2 keeps its replica and its own reason."""
    out = arbitrate([req(HI, 2, 1, prio=10), req(MID, 2, 1, prio=5),
                     req(LO2, 2, 1, prio=1), req(LO, 1, 1, gpr=2)], {"H100": 0}, {})
    assert out[HI] == Grant(HI, 2) and out[MID] == Grant(MID, 2)
    assert out[LO].replicas == 0 and out[LO].reason == R.GPUS_RECLAIMED
    assert out[LO2] == no_gpus(LO2, 2, 1, 1)


def test_a_service_already_served_reclaims_nothing() -> None:
    out = arbitrate([req(HI, 1, 1, prio=10), req(LO, 2, 1)], {"H100": 0}, {})
    assert out[HI] == Grant(HI, 1)
    assert out[LO] == no_gpus(LO, 2, 1, 1)


def test_reclaim_message_names_the_count_pool_and_priorities() -> None:
    out = arbitrate([req(HI, 3, 1, prio=10, gpr=2), req(LO, 4, 4, prio=2, gpr=2)],
                    {"H100": 0}, {})
    assert out[HI] == Grant(HI, 3)
    assert out[LO] == Grant(LO, 2, R.GPUS_RECLAIMED, (
        "wanted 4, granted 2: 2 replica(s) given up to higher-priority a/hi "
        "(priority 10 > 2) in pool 'H100'"))


def test_negative_inputs_count_as_zero() -> None:
    out = arbitrate([req(HI, -1, -2)], {"H100": -4}, {})
    assert out[HI] == Grant(HI, 0)
    out = arbitrate([req(HI, 2, -1, tenant="acme")], {"H100": 5}, {"acme": -3})
    assert out[HI].replicas == 0 and out[HI].reason == R.GPU_BUDGET
    assert "gpuBudget -3 GPUs leaves room for 0 replica(s)" in out[HI].message


def test_no_gpus_per_replica_counts_as_one() -> None:
    out = arbitrate([req(HI, 3, 0, gpr=0)], {"H100": 2}, {})
    assert out[HI] == no_gpus(HI, 3, 2, 1)


def test_a_tenant_without_a_budget_is_not_capped() -> None:
    out = arbitrate([req(HI, 3, 0, tenant="acme")], {"H100": 8}, {"acme": None, "other": 0})
    assert out[HI] == Grant(HI, 3)


def test_a_budget_counts_the_gpus_of_held_replicas_of_higher_priority_services() -> None:
    out = arbitrate([req(HI, 2, 2, prio=10, tenant="acme", gpr=2),
                     req(LO, 2, 0, tenant="acme", gpr=2)], {"H100": 8}, {"acme": 6})
    assert out[HI] == Grant(HI, 2)
    assert out[LO].replicas == 1 and out[LO].reason == R.GPU_BUDGET


def test_equal_priorities_go_by_namespace_then_name() -> None:
    a, b, c = ServiceKey("a", "z"), ServiceKey("b", "a"), ServiceKey("b", "b")
    out = arbitrate([req(c, 1, 0), req(b, 1, 0), req(a, 1, 0)], {"H100": 2}, {})
    assert {k: g.replicas for k, g in out.items()} == {a: 1, b: 1, c: 0}
    assert list(out) == [a, b, c]


def test_requests_and_grants_have_declared_types() -> None:
    for cls in (GpuRequest, Grant):
        hints = typing.get_type_hints(cls)
        assert set(hints) == {f.name for f in dataclasses.fields(cls)}
    out = arbitrate([req(HI, 2, 0)], {"H100": 1}, {})
    assert isinstance(out[HI].reason, str) and isinstance(out[HI].message, str)
