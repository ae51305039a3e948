"""Reconcile one InferenceService: observe, decide, apply, report.

Every trigger (create, resume, spec change, owned-object change, the periodic pass) runs
this same function. It reads only a :class:`Snapshot` built from watch caches, decides
with pure code (``plan``, ``status``) and writes through the small ``KubeWriter``
protocol: server-side applies only for objects whose rendering changed, the live limit
only on pods that differ, status only when it changed, Events only on transitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slo_operator.api import conditions as C
from slo_operator.api.cluster import ApiRejected, Snapshot
from slo_operator.api.conditions import Cond, merge_conditions, rfc3339, transitions
from slo_operator.api.errors import field_problems, summarize
from slo_operator.api.models import (
    DecisionRecord,
    InferenceServiceSpec,
    InferenceServiceStatus,
    dump,
)
from slo_operator.engine.profiles import NodeProfile
from slo_operator.reconcile.actuate import apply_live_limit
from slo_operator.reconcile.desired import (
    DEFAULT_RUNTIME_IMAGE,
    Problem,
    ServicePlan,
    initial_replicas,
    live_limit,
    plan_service,
    snapshot_pools,
    snapshot_prices,
)
from slo_operator.reconcile.placing import (
    place_variants,
    placement_event,
    retire_variants,
    variant_status,
)
from slo_operator.reconcile.ports import AppliedCache, KubeWriter
from slo_operator.reconcile.status import (
    EventSpec,
    SLOUpdate,
    action_events,
    append_decision,
    choose_events,
    hardware_condition,
    policy_condition,
    problem_conditions,
    rollout_conditions,
)
from slo_operator.render.objects import LABEL_VARIANT, build_all

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What the handler should do after a reconcile."""

    status: dict[str, Any]
    retry_after: float | None = None
    permanent_error: str | None = None
    applied: list[str] = field(default_factory=list)
    events: list[EventSpec] = field(default_factory=list)  # Events posted by this reconcile


@dataclass(frozen=True)
class Settings:
    """Operator-wide settings the reconciler needs."""

    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    profiles: tuple[NodeProfile, ...] = ()


def desired_replicas(status: InferenceServiceStatus, lo: int, hi: int) -> int:
    """The controller's last replica count clamped into the bounds; the minimum at first
    (at least one replica unless the bounds allow zero only)."""
    current = status.desired_replicas
    if current is None:
        return lo if lo > 0 else 1 if hi > 0 else 0
    return min(max(current, lo), hi)


def reconcile_service_sync(
    kube: KubeWriter,
    body: Mapping[str, Any],
    snap: Snapshot,
    now: datetime,
    settings: Settings,
    applied: AppliedCache | None = None,
    update: SLOUpdate | None = None,
) -> Outcome:
    """One reconcile of ``body`` against the cached ``snap``; blocking (run in a thread).

    ``update``: what the SLO loop decided this pass (replicas, batch limit, signals,
    conditions); without one, replicas and the limit hold their last decided values.
    """
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    old_status = InferenceServiceStatus.model_validate(body.get("status") or {})
    new = old_status.model_copy(deep=True)
    new.observed_generation = meta.get("generation")
    conds: list[Cond] = []
    outcome = Outcome(status={})
    applied = applied if applied is not None else AppliedCache()

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

    ref = spec.slo_policy_ref.name if spec.slo_policy_ref else None
    policy, bound = policy_condition(namespace, ref, snap.policy(namespace, ref) if ref else None)
    conds.append(bound)
    if policy is None:
        conds.append(Cond(C.READY, False, bound.reason, bound.message))
        outcome.retry_after = 30
        return _report(kube, body, old_status, new, conds, now, outcome)

    prices = snapshot_prices(snap)
    lo, hi = initial_replicas(spec, policy)
    replicas = desired_replicas(old_status, lo, hi)
    wanted_limit = old_status.batch_limit
    if update is not None:
        replicas = min(max(update.replicas, lo), hi)
        wanted_limit = update.batch_limit
    result = plan_service(
        name=name,
        namespace=namespace,
        uid=meta.get("uid", ""),
        spec=spec,
        policy=policy,
        policy_name=ref or "",
        pools=snapshot_pools(snap),
        nodes=snap.nodes,
        replicas=replicas,
        restart_limit=wanted_limit,
        runtime_image=settings.runtime_image,
        profiles=settings.profiles,
        prices=prices,
    )
    if isinstance(result, Problem):
        conds += problem_conditions(result.reason, result.field, result.message)
        # Nothing is torn down: existing replicas keep serving while the spec is fixed.
        outcome.retry_after = 60
        return _report(kube, body, old_status, new, conds, now, outcome)

    plan: ServicePlan = result
    eng = plan.engine
    hw = plan.pool.resolution.hardware
    conds.append(hardware_condition(
        hw is not None and hw.known, plan.pool.resolution.message, plan.pool.product,
        len(plan.pool.nodes), plan.pool.gpus_per_node,
        f"dtype {eng.dtype}, quantization {eng.quantization or 'none'}, "
        f"KV cache {eng.kv_cache_dtype}, tensor parallel {eng.tensor_parallel_size}",
    ))
    # The SLO loop sets this; until it runs, say so rather than stay silent.
    if not any(c.type == C.SLO_COMPLIANT for c in old_status.conditions):
        conds.append(Cond(C.SLO_COMPLIANT, None, C.AWAITING_METRICS,
                          "No latency observations yet"))

    placed, renders, opts = place_variants(plan, snap, namespace, name, replicas)
    existing = snap.variants(namespace, name)
    new.hardware = plan.hardware_status
    new.engine_args = list(eng.args)
    new.engine_notes = list(plan.notes) + [f"GPU prices: {p}" for p in prices.problems]
    stamp = now.timestamp()
    for obj in build_all(plan.render, renders):
        if obj["kind"] == "Deployment":
            current = existing.get(obj["metadata"]["labels"].get(LABEL_VARIANT, ""))
            if current is None or current.spec_replicas != obj["spec"]["replicas"]:
                applied.forget("Deployment", namespace, obj["metadata"]["name"])
        if applied.fresh(obj, stamp):
            continue
        refused = applied.backoff(obj, stamp)
        if refused is None:
            try:
                kube.apply(obj)
            except ApiRejected as e:
                refused = str(e)
                outcome.retry_after = applied.reject(obj, stamp, refused)
        if refused is not None:
            # Nothing else is touched: the replicas that run keep serving, the status says
            # what the API server refused, and the same object is not re-sent until the
            # back-off ends or the rendering changes.
            conds.append(Cond(C.READY, False, C.APPLY_FAILED, refused))
            outcome.retry_after = outcome.retry_after or 30
            return _report(kube, body, old_status, new, conds, now, outcome)
        applied.remember(obj, stamp)
        outcome.applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
    outcome.applied += retire_variants(kube, snap, namespace, name, plan, placed)

    dep = snap.deployment(namespace, name)
    pods = snap.pods_of(namespace, name)
    conds += rollout_conditions(replicas, dep, pods, plan.render.gpu_resource)
    limit = live_limit(policy, eng.max_num_seqs, wanted_limit)
    patched = apply_live_limit(kube, namespace, pods, limit)
    outcome.applied += [f"Pod/{p} limit={limit}" for p in patched]
    new.variants = variant_status(plan, placed, opts, existing)
    new.placement = "; ".join(placed.reasons) or None
    placement_events = placement_event(placed, old_status.placement)
    new.desired_replicas = replicas
    new.replicas = dep.replicas if dep else 0
    new.ready_replicas = dep.ready_replicas if dep else 0
    new.batch_limit = limit
    events: list[EventSpec] = []
    if update is not None:
        why = f"{update.reason}: {update.message}"
        events = action_events(old_status.desired_replicas, replicas, old_status.batch_limit,
                               limit, why)
        conds += update.conds
        new.observed = update.observed
        new.control = dict(update.control) if update.control is not None else new.control
        new.slo_compliant = update.slo_compliant
        new.attainment = update.attainment
        new.error_budget_remaining = update.error_budget_remaining
        new.last_decisions = append_decision(old_status.last_decisions, DecisionRecord(
            time=rfc3339(now), replicas=replicas, batch_limit=limit, reason=update.reason,
            message=update.message[:1024]))
    return _report(kube, body, old_status, new, conds, now, outcome,
                   [*events, *placement_events])


def _report(
    kube: KubeWriter,
    body: Mapping[str, Any],
    old: InferenceServiceStatus,
    new: InferenceServiceStatus,
    conds: list[Cond],
    now: datetime,
    outcome: Outcome,
    actions: Sequence[EventSpec] = (),
) -> Outcome:
    """Write status only when it changed; post Events on condition transitions and on
    scale and batch-limit actions only."""
    generation = body["metadata"].get("generation")
    new.conditions = merge_conditions(old.conditions, conds, now, generation)
    status = dump(new)
    outcome.status = status
    if status != dump(old):
        meta = body["metadata"]
        kube.patch_status("InferenceService", meta["namespace"], meta["name"], status)
    for ev in [*actions, *choose_events(transitions(old.conditions, new.conditions))]:
        kube.event(body, ev.type, ev.reason, ev.message, now)
        outcome.events.append(ev)
    return outcome


async def reconcile_service(
    kube: KubeWriter,
    body: Mapping[str, Any],
    snap: Snapshot,
    now: datetime,
    settings: Settings,
    applied: AppliedCache | None = None,
    update: SLOUpdate | None = None,
) -> Outcome:
    """The kubernetes client is synchronous: run the reconcile in a worker thread."""
    return await asyncio.to_thread(
        reconcile_service_sync, kube, body, snap, now, settings, applied, update
    )
