"""Reconcile one InferenceService: observe, decide, apply, report.

Every trigger (create, resume, spec change, timer, owned-object change) runs this same
function. Decisions come from pure code (``plan``, ``status``); this module only moves
data between those functions and the Kubernetes adapter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slo_operator.adapters.kube import Kube
from slo_operator.api import conditions as C
from slo_operator.api.conditions import Cond, merge_conditions, transitions
from slo_operator.api.errors import field_problems, summarize
from slo_operator.api.models import (
    Condition,
    InferenceServiceSpec,
    InferenceServiceStatus,
    SLOPolicySpec,
    dump,
)
from slo_operator.engine.profiles import NodeProfile
from slo_operator.reconcile.actuate import apply_live_limit
from slo_operator.reconcile.plan import (
    DEFAULT_RUNTIME_IMAGE,
    NodeInfo,
    Problem,
    ServicePlan,
    discover_pools,
    initial_replicas,
    live_limit,
    plan_service,
)
from slo_operator.reconcile.status import rollout_conditions
from slo_operator.render.objects import build_all, selector_labels

log = logging.getLogger(__name__)

# Conditions whose transition to these (type, status) pairs deserve a Warning Event.
_WARN_ON_FALSE = {C.READY, C.SPEC_VALID, C.POLICY_BOUND, C.HARDWARE_RESOLVED, C.SLO_COMPLIANT}


@dataclass
class Outcome:
    """What the handler should do after a reconcile."""

    status: dict[str, Any]
    retry_after: float | None = None
    permanent_error: str | None = None
    applied: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Settings:
    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    profiles: tuple[NodeProfile, ...] = ()


def _policy_spec(
    kube: Kube, namespace: str, spec: InferenceServiceSpec
) -> tuple[SLOPolicySpec | None, str, Cond]:
    if spec.slo_policy_ref is None:
        return (
            SLOPolicySpec(),
            "",
            Cond(C.POLICY_BOUND, True, C.DEFAULT_POLICY, "No spec.sloPolicyRef; using defaults"),
        )
    name = spec.slo_policy_ref.name
    obj = kube.get_custom("SLOPolicy", namespace, name)
    if obj is None:
        return (
            None,
            name,
            Cond(
                C.POLICY_BOUND,
                False,
                C.POLICY_NOT_FOUND,
                f"SLOPolicy {namespace}/{name} named in spec.sloPolicyRef.name does not exist",
            ),
        )
    try:
        policy = SLOPolicySpec.model_validate(obj.get("spec") or {})
    except ValidationError as err:
        return (
            None,
            name,
            Cond(
                C.POLICY_BOUND,
                False,
                C.POLICY_INVALID,
                f"SLOPolicy {namespace}/{name} is invalid: {summarize(field_problems(err))}",
            ),
        )
    return policy, name, Cond(C.POLICY_BOUND, True, C.POLICY_RESOLVED, f"Bound to SLOPolicy {name}")


def _replicas(status: InferenceServiceStatus, lo: int, hi: int) -> int:
    current = status.desired_replicas
    if current is None:
        return lo if lo > 0 else 1 if hi > 0 else 0
    return min(max(current, lo), hi)


def reconcile_service_sync(
    kube: Kube,
    body: Mapping[str, Any],
    now: datetime,
    settings: Settings,
    nodes: Sequence[NodeInfo] | None = None,
) -> Outcome:
    """``nodes``: pass one listing to a whole pass over many services (one LIST, not N)."""
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    generation = meta.get("generation")
    old_status = InferenceServiceStatus.model_validate(body.get("status") or {})
    new = old_status.model_copy(deep=True)
    new.observed_generation = generation
    conds: list[Cond] = []
    outcome = Outcome(status={})

    try:
        spec = InferenceServiceSpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        msg = summarize(field_problems(err))
        conds += [
            Cond(C.SPEC_VALID, False, C.INVALID_SPEC, msg),
            Cond(C.READY, False, C.INVALID_SPEC, msg),
        ]
        outcome.permanent_error = msg
        return _report(kube, body, old_status, new, conds, now, outcome)
    conds.append(Cond(C.SPEC_VALID, True, C.VALID, "Spec is valid"))

    policy, policy_name, bound = _policy_spec(kube, namespace, spec)
    conds.append(bound)
    if policy is None:
        conds.append(Cond(C.READY, False, bound.reason, bound.message))
        outcome.retry_after = 30
        return _report(kube, body, old_status, new, conds, now, outcome)

    lo, hi = initial_replicas(spec, policy)
    replicas = _replicas(old_status, lo, hi)
    if nodes is None:
        nodes = kube.list_nodes()
    pools = discover_pools(nodes)
    result = plan_service(
        name=name,
        namespace=namespace,
        uid=meta.get("uid", ""),
        spec=spec,
        policy=policy,
        policy_name=policy_name,
        pools=pools,
        nodes=nodes,
        replicas=replicas,
        restart_limit=old_status.batch_limit,
        runtime_image=settings.runtime_image,
        profiles=settings.profiles,
    )
    if isinstance(result, Problem):
        hw_ok = result.reason == C.ENGINE_INFEASIBLE
        msg = f"{result.field}: {result.message}"
        conds.append(
            Cond(C.HARDWARE_RESOLVED, hw_ok, result.reason if not hw_ok else C.HARDWARE_FOUND,
                 msg if not hw_ok else "GPU pools found")
        )
        conds.append(Cond(C.READY, False, result.reason, msg))
        # Nothing is torn down: existing replicas keep serving while the spec is fixed.
        outcome.retry_after = 60
        return _report(kube, body, old_status, new, conds, now, outcome)

    plan: ServicePlan = result
    eng = plan.engine
    known = plan.pool.resolution.hardware is not None and plan.pool.resolution.hardware.known
    conds.append(
        Cond(
            C.HARDWARE_RESOLVED,
            True,
            C.HARDWARE_FOUND if known else C.UNKNOWN_GPU,
            ("" if known else f"{plan.pool.resolution.message}; conservative settings: ") +
            f"{plan.pool.product} pool ({len(plan.pool.nodes)} nodes, "
            f"{plan.pool.gpus_per_node} GPUs each): dtype {eng.dtype}, "
            f"quantization {eng.quantization or 'none'}, KV cache {eng.kv_cache_dtype}, "
            f"tensor parallel {eng.tensor_parallel_size}",
        )
    )
    # The SLO loop (Prometheus) sets this; until it runs, say so rather than stay silent.
    if not any(c.type == C.SLO_COMPLIANT for c in old_status.conditions):
        conds.append(Cond(C.SLO_COMPLIANT, None, C.AWAITING_METRICS,
                          "No latency observations yet"))
    for obj in build_all(plan.render):
        kube.apply(obj)
        outcome.applied.append(f"{obj['kind']}/{obj['metadata']['name']}")

    dep = kube.get_deployment(namespace, f"{name}-vllm")
    pods = kube.list_pods(namespace, selector_labels(plan.render))
    conds += rollout_conditions(replicas, dep, pods, plan.render.gpu_resource)
    limit = live_limit(policy, plan.engine.max_num_seqs, old_status.batch_limit)
    patched = apply_live_limit(kube, namespace, pods, limit)
    outcome.applied += [f"Pod/{p} limit={limit}" for p in patched]

    new.desired_replicas = replicas
    new.replicas = dep.replicas if dep else 0
    new.ready_replicas = dep.ready_replicas if dep else 0
    new.hardware = plan.hardware_status
    new.engine_args = list(plan.engine.args)
    new.engine_notes = list(plan.notes)
    new.batch_limit = limit
    return _report(kube, body, old_status, new, conds, now, outcome)


def _report(
    kube: Kube,
    body: Mapping[str, Any],
    old: InferenceServiceStatus,
    new: InferenceServiceStatus,
    conds: list[Cond],
    now: datetime,
    outcome: Outcome,
) -> Outcome:
    """Write status only when it changed; post Events on condition transitions only."""
    generation = body["metadata"].get("generation")
    new.conditions = merge_conditions(old.conditions, conds, now, generation)
    status = dump(new)
    outcome.status = status
    if status != dump(old):
        meta = body["metadata"]
        kube.patch_status("InferenceService", meta["namespace"], meta["name"], status)
    for c in transitions(old.conditions, new.conditions):
        _event_for(kube, body, c, now)
    return outcome


def _event_for(kube: Kube, body: Mapping[str, Any], c: Condition, now: datetime) -> None:
    warn = (c.type in _WARN_ON_FALSE and c.status == "False") or c.reason == C.UNKNOWN_GPU
    if not warn and c.type not in (C.READY, C.HARDWARE_RESOLVED, C.SLO_COMPLIANT):
        return
    kube.event(body, "Warning" if warn else "Normal", c.reason, c.message, now)


async def reconcile_service(
    kube: Kube,
    body: Mapping[str, Any],
    now: datetime,
    settings: Settings,
    nodes: Sequence[NodeInfo] | None = None,
) -> Outcome:
    # The kubernetes client is synchronous; keep the event loop free for other objects.
    return await asyncio.to_thread(reconcile_service_sync, kube, body, now, settings, nodes)
