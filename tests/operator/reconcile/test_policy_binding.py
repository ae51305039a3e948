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
    # A hand-edited status neither counts nor fails the policy's pass.
    edited = {**svc("d", "team-a", "gold"), "status": {"attainment": 10**400,
                                                       "errorBudgetRemaining": "0.5"}}
    assert aggregate_slo([a, edited]) == (0.999, 0.8)


def test_a_policy_claiming_a_tenant_not_bound_to_its_namespace_says_so_once() -> None:
    from datetime import UTC, datetime

    from slo_operator.api.cluster import Snapshot
    from slo_operator.reconcile.policy_binding import reconcile_policy_sync
    from slo_operator.reconcile.tenancy import Tenancy
    from tests.operator.reconcile.fake import FakeKube

    now = datetime(2026, 1, 1, tzinfo=UTC)
    policy = {"metadata": {"name": "gold", "namespace": "team-b", "generation": 1},
              "spec": {"tenant": "acme"}}
    tenants = Tenancy.of(Snapshot(tenants={"acme": {"spec": {"namespaces": ["team-a"]}}}))
    kube = FakeKube()
    reconcile_policy_sync(kube, policy, now, [], tenants)
    status = kube.statuses[-1]
    got = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert got == {"TenantBound": ("False", "NamespaceNotBound"),
                   "Ready": ("False", "NamespaceNotBound")}
    assert [(t, r) for t, r, _ in kube.events] == [("Warning", "NamespaceNotBound")] * 2
    # Written once: the next pass over the same state writes and posts nothing.
    again = FakeKube()
    reconcile_policy_sync(again, {**policy, "status": status}, now, [], tenants)
    assert again.statuses == [] and again.events == []
    # Bound once the Tenant binds the namespace.
    fixed = Tenancy.of(Snapshot(tenants={"acme": {"spec": {"namespaces": ["team-b"]}}}))
    ok = FakeKube()
    reconcile_policy_sync(ok, {**policy, "status": status}, now, [], fixed)
    got = {c["type"]: (c["status"], c["reason"]) for c in ok.statuses[-1]["conditions"]}
    assert got == {"TenantBound": ("True", "BoundByTenant"), "Ready": ("True", "Valid")}
