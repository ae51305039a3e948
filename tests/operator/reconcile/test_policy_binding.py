"""Which services a policy binds: same namespace, named by spec.sloPolicyRef (pure)."""

from __future__ import annotations

from typing import Any

from slo_operator.reconcile.policy_binding import bound_to


def svc(name: str, namespace: str, ref: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"name": "m", "sizeBillions": 8}}
    if ref:
        spec["sloPolicyRef"] = {"name": ref}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_binds_only_same_namespace_references_sorted_by_name() -> None:
    services = [
        svc("zeta", "team-a", "gold"),
        svc("alpha", "team-a", "gold"),
        svc("other-ns", "team-b", "gold"),  # a tenant's policy never reaches another namespace
        svc("silver", "team-a", "silver"),
        svc("unbound", "team-a", None),
    ]
    got = [s["metadata"]["name"] for s in bound_to("team-a", "gold", services)]
    assert got == ["alpha", "zeta"]


def test_policy_attainment_is_the_worst_bound_service() -> None:
    from slo_operator.reconcile.policy_binding import aggregate_slo

    a = {**svc("a", "team-a", "gold"), "status": {"attainment": 0.999,
                                                  "errorBudgetRemaining": 0.8}}
    b = {**svc("b", "team-a", "gold"), "status": {"attainment": 0.95,
                                                  "errorBudgetRemaining": -0.2}}
    fresh = svc("c", "team-a", "gold")  # no verdict yet: does not count
    assert aggregate_slo([a, b, fresh]) == (0.95, -0.2)
    assert aggregate_slo([fresh]) == (None, None)
