"""Reconcile one SLOPolicy: validate it and record which services are bound to it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slo_operator.adapters.kube import Kube
from slo_operator.api import conditions as C
from slo_operator.api.conditions import Cond, merge_conditions, transitions
from slo_operator.api.errors import field_problems, summarize
from slo_operator.api.models import SLOPolicySpec, SLOPolicyStatus, dump


def bound_services(policy_name: str, services: list[dict[str, Any]]) -> list[str]:
    """Names of InferenceServices whose spec.sloPolicyRef.name is this policy (pure)."""
    out = []
    for svc in services:
        ref = ((svc.get("spec") or {}).get("sloPolicyRef") or {}).get("name")
        if ref == policy_name:
            out.append(svc["metadata"]["name"])
    return sorted(out)


def reconcile_policy_sync(kube: Kube, body: Mapping[str, Any], now: datetime) -> list[str]:
    """Returns the bound services, so the caller can re-reconcile them."""
    meta = body["metadata"]
    old = SLOPolicyStatus.model_validate(body.get("status") or {})
    new = old.model_copy(deep=True)
    new.observed_generation = meta.get("generation")
    try:
        SLOPolicySpec.model_validate(body.get("spec") or {})
        conds = [Cond(C.READY, True, C.VALID, "Policy is valid")]
    except ValidationError as err:
        msg = summarize(field_problems(err))
        conds = [Cond(C.READY, False, C.INVALID_SPEC, msg)]
    services = kube.list_custom("InferenceService", meta["namespace"])
    new.bound_services = bound_services(meta["name"], services)
    new.bound_count = len(new.bound_services)
    new.conditions = merge_conditions(old.conditions, conds, now, meta.get("generation"))
    if dump(new) != dump(old):
        kube.patch_status("SLOPolicy", meta["namespace"], meta["name"], dump(new))
    for c in transitions(old.conditions, new.conditions):
        kube.event(body, "Warning" if c.status == "False" else "Normal", c.reason, c.message, now)
    return new.bound_services


async def reconcile_policy(kube: Kube, body: Mapping[str, Any], now: datetime) -> list[str]:
    return await asyncio.to_thread(reconcile_policy_sync, kube, body, now)
