"""Reconcile one SLOPolicy: validate it and record which services are bound to it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slo_operator.api import conditions as C
from slo_operator.api.conditions import Cond, merge_conditions, transitions
from slo_operator.api.errors import field_problems, summarize
from slo_operator.api.models import SLOPolicySpec, SLOPolicyStatus, dump
from slo_operator.api.numbers import finite_number
from slo_operator.reconcile.ports import KubeWriter
from slo_operator.reconcile.tenancy import Tenancy


def bound_to(
    namespace: str, policy_name: str, services: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """InferenceServices in ``namespace`` whose spec.sloPolicyRef.name is this policy,
    sorted by name (pure)."""
    out = [
        svc
        for svc in services
        if svc["metadata"].get("namespace") == namespace
        and ((svc.get("spec") or {}).get("sloPolicyRef") or {}).get("name") == policy_name
    ]
    return sorted(out, key=lambda svc: str(svc["metadata"]["name"]))


def aggregate_slo(services: Iterable[Mapping[str, Any]]) -> tuple[float | None, float | None]:
    """The policy's attainment and error budget left: the worst bound service's (pure),
    so a policy never looks healthier than any service it governs."""
    att, budget = [], []
    for svc in services:
        st = svc.get("status") or {}
        if (a := finite_number(st.get("attainment"))) is not None:
            att.append(a)
        if (b := finite_number(st.get("errorBudgetRemaining"))) is not None:
            budget.append(b)
    return (min(att) if att else None, min(budget) if budget else None)


def reconcile_policy_sync(
    kube: KubeWriter,
    body: Mapping[str, Any],
    now: datetime,
    services: Iterable[Mapping[str, Any]],
    tenancy: Tenancy | None = None,
) -> list[Mapping[str, Any]]:
    """Returns the bound services, so the caller can re-reconcile them.

    ``services``: every InferenceService the caller holds (the watch cache); ``tenancy``:
    the Tenant objects (None: none), which decide the ``TenantBound`` condition.
    """
    meta = body["metadata"]
    old = SLOPolicyStatus.model_validate(body.get("status") or {})
    new = old.model_copy(deep=True)
    new.observed_generation = meta.get("generation")
    try:
        spec = SLOPolicySpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        msg = summarize(field_problems(err))
        conds = [Cond(C.READY, False, C.INVALID_SPEC, msg)]
    else:
        claim = (tenancy or Tenancy()).claim(meta["namespace"], spec.tenant)
        conds = [Cond(C.TENANT_BOUND, not claim.refused, claim.reason, claim.message),
                 Cond(C.READY, True, C.VALID, "Policy is valid") if not claim.refused else
                 Cond(C.READY, False, claim.reason, claim.message)]
    bound = bound_to(meta["namespace"], meta["name"], services)
    new.bound_services = [svc["metadata"]["name"] for svc in bound]
    new.bound_count = len(new.bound_services)
    new.attainment, new.error_budget_remaining = aggregate_slo(bound)
    new.conditions = merge_conditions(old.conditions, conds, now, meta.get("generation"))
    if dump(new) != dump(old):
        kube.patch_status("SLOPolicy", meta["namespace"], meta["name"], dump(new))
    for c in transitions(old.conditions, new.conditions):
        if c.type == C.TENANT_BOUND and c.reason == C.TENANT_UNMANAGED:
            continue  # every policy without Tenant objects: no news
        kube.event(body, "Warning" if c.status == "False" else "Normal", c.reason, c.message, now)
    return bound


async def reconcile_policy(
    kube: KubeWriter,
    body: Mapping[str, Any],
    now: datetime,
    services: Iterable[Mapping[str, Any]],
    tenancy: Tenancy | None = None,
) -> list[Mapping[str, Any]]:
    """``reconcile_policy_sync`` in a worker thread (the client blocks)."""
    return await asyncio.to_thread(reconcile_policy_sync, kube, body, now, services, tenancy)
