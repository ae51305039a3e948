"""The SLO loop's pass over services: observe -> decide -> arbitrate -> updates.

Pure apart from the one awaited call to the metrics source: the pass builds one fixed
set of PromQL queries for every service (``slo.promql.build_queries``: exactly 8, one per
signal in ``QUERY_NAMES``, whatever the number of services), hands the results to
``slo.signals``, runs ``control.decide`` per service and ``control.arbitrate`` across
services for scarce GPUs, and returns one :class:`SLOUpdate` per service. Each service's
engine facts (precision, batch ceiling, chunked-prefill budget, GPUs per replica) come
from its plan (``desired.plan_service`` on the pass's :class:`Fleet`), the same plan the
reconciler applies. ``reconcile_service_sync`` then applies each update: replicas through
the Deployment (server-side apply of a changed object only), the live limit through pod
annotations, status and Events only on change.

The periodic pass runs it for every service; an SLOPolicy edit runs it for the services
bound to that policy (``only``), so a new objective acts at once rather than a period later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slo_operator.adapters.prometheus import MetricsSource
from slo_operator.api.cluster import DeploymentObs, PodObs, Snapshot
from slo_operator.api.models import (
    InferenceServiceSpec,
    InferenceServiceStatus,
    SLOPolicySpec,
    parse_duration,
)
from slo_operator.api.observe import Observation, ReplicaCounts, ServiceKey
from slo_operator.control import (
    ControlState,
    Decision,
    GpuRequest,
    Grant,
    arbitrate,
    decide,
    policy_for,
)
from slo_operator.reconcile.desired import (
    Problem,
    ServicePlan,
    engine_precision,
    initial_replicas,
    plan_service,
)
from slo_operator.reconcile.gpu_inventory import Fleet, survey
from slo_operator.reconcile.planner import Settings
from slo_operator.reconcile.status import (
    SLOUpdate,
    metrics_condition,
    observed_status,
    scaling_condition,
    slo_condition,
)
from slo_operator.render.names import label_value, service_label
from slo_operator.slo.evaluate import SLOHistory, evaluate_window, record, report
from slo_operator.slo.promql import QueryPlan, build_queries
from slo_operator.slo.signals import parse_signals, spec_for

log = logging.getLogger(__name__)

# Replicas Ready for less than this are warming up: their samples do not refine the
# capacity model (cold caches, CUDA-graph capture on first batches).
WARMUP_S = 60.0


@dataclass(frozen=True)
class ServiceInput:
    """One service as the pass sees it (only services the reconciler has planned)."""

    key: ServiceKey
    spec: InferenceServiceSpec
    policy: SLOPolicySpec
    status: InferenceServiceStatus
    deployment: DeploymentObs | None
    pods: Sequence[PodObs]
    plan: ServicePlan  # its engine and pools as the reconciler plans them now


def inputs(snap: Snapshot, settings: Settings | None = None, fleet: Fleet | None = None,
           only: Collection[ServiceKey] | None = None) -> list[ServiceInput]:
    """Services with a valid spec, a bound policy, a planned Deployment and a plan on the
    fleet now (pure); the others are the reconciler's business and keep their conditions.
    ``only``: just these services (None: all)."""
    settings = settings if settings is not None else Settings()
    fleet = fleet if fleet is not None else survey(snap)
    out = []
    for (ns, name), body in sorted(snap.services.items()):
        key = ServiceKey(ns, name)
        if only is not None and key not in only:
            continue
        try:
            spec = InferenceServiceSpec.model_validate(body.get("spec") or {})
            status = InferenceServiceStatus.model_validate(body.get("status") or {})
            ref = spec.slo_policy_ref.name if spec.slo_policy_ref else None
            pol_body = snap.policy(ns, ref) if ref else {}
            if pol_body is None:
                continue
            policy = SLOPolicySpec.model_validate(pol_body.get("spec") or {})
        except ValidationError:
            continue
        if status.desired_replicas is None or status.hardware is None:
            continue  # not planned yet
        plan = plan_service(
            name=name, namespace=ns, uid=str(body["metadata"].get("uid", "")), spec=spec,
            policy=policy, policy_name=ref or "", pools=fleet.pools, nodes=snap.nodes,
            replicas=status.desired_replicas, restart_limit=status.batch_limit,
            runtime_image=settings.runtime_image, profiles=settings.profiles,
            prices=fleet.prices,
        )
        if isinstance(plan, Problem):
            continue  # the reconciler reports it; an update would not be applied
        out.append(ServiceInput(key, spec, policy, status, snap.deployment(ns, name),
                                snap.pods_of(ns, name), plan))
    return out


def query_plan(services: Sequence[ServiceInput]) -> QueryPlan:
    """The pass's queries: one per signal for all services and their policy windows."""
    return build_queries({float(parse_duration(s.policy.window)) for s in services})


def replica_counts(desired: int, pods: Sequence[PodObs], now: float) -> ReplicaCounts:
    """What the watch cache says about the replicas (Pending pods are never capacity)."""
    ready = [p for p in pods if p.ready]
    warming = [p for p in ready if p.ready_since is not None and now - p.ready_since < WARMUP_S]
    pending = [p for p in pods if p.unschedulable]
    starting = [p for p in pods if not p.ready and not p.unschedulable
                and p.phase not in ("Succeeded", "Failed")]
    return ReplicaCounts(desired=desired, ready=len(ready), warming=len(warming),
                         starting=len(starting), pending=len(pending))


def observation(s: ServiceInput, signals: Any, now: float) -> Observation:
    """The control law's view of one service; engine facts from the primary variant's
    engine plan (weights precision from its dtype and quantization, the batch ceiling
    ``--max-num-seqs``, the chunked-prefill budget ``--max-num-batched-tokens``)."""
    eng = s.plan.engine
    hw = s.plan.pool.resolution.hardware
    ceiling = eng.max_num_seqs
    # Under restarts the engine's ceiling is the limit now baked in; the law may move it
    # up to the policy's maxBatch (by another restart).
    max_batch = max(ceiling, s.policy.batching.max_batch) if s.policy.batching.mode == (
        "restart") else ceiling
    return Observation(
        key=s.key,
        now=now,
        signals=signals,
        replicas=replica_counts(s.status.desired_replicas or 0, s.pods, now),
        batch_limit=s.status.batch_limit or ceiling,
        max_batch=max_batch,
        hardware=hw.product if hw is not None else "",
        precision=engine_precision(eng),
        gpus_per_replica=eng.tensor_parallel_size,
        max_num_batched_tokens=eng.max_num_batched_tokens,
        model_size_b=s.spec.model.size_billions,
    )


def _pool_key(s: ServiceInput) -> str:
    """The pool a service's replicas compete in: its GPU product, or the set of products
    of its variants (their free GPUs pooled) when it may run on several."""
    products = sorted({label_value(v.product) for v in s.status.variants if v.product})
    if len(products) > 1:
        return "|".join(products)
    hw = s.status.hardware
    return label_value(hw.product) if hw is not None and hw.product else ""


def free_by_pool(fleet: Fleet, services: Sequence[ServiceInput]) -> dict[str, int]:
    """Free GPUs per pool (product) from the fleet's ledger, and per set of pools that a
    multi-variant service competes in (the sum of its pools' free GPUs)."""
    free = fleet.gpus.by_product(fleet.pools)
    for s in services:
        key = _pool_key(s)
        if "|" in key and key not in free:
            free[key] = sum(max(0, free.get(p, 0)) for p in key.split("|"))
    return free


def decide_all(
    services: Sequence[ServiceInput],
    plan: QueryPlan,
    results: Mapping[str, Any],
    free: Mapping[str, int],
    now: datetime,
) -> dict[ServiceKey, SLOUpdate]:
    """Every service's update for this pass (pure: results, free GPUs per pool and
    ``now`` passed in)."""
    ts = now.timestamp()
    # Series carry the service *label* (cut with a hash past 63 characters), not the name.
    by_label = {ServiceKey(s.key.namespace, service_label(s.key.name)): s for s in services}
    specs = {k: spec_for(s.policy.objectives, float(parse_duration(s.policy.window)))
             for k, s in by_label.items()}
    signals = {by_label[k].key: sig
               for k, sig in parse_signals(plan, results, specs, ts).items()}
    decisions: dict[ServiceKey, Decision] = {}
    requests = []
    for s in services:
        control = s.status.control or {}
        state = ControlState.from_dict(control.get("state"))
        lo, _ = initial_replicas(s.spec, s.policy)
        decision = decide(observation(s, signals[s.key], ts),
                          policy_for(s.policy, s.spec.replicas), state, ts)
        decisions[s.key] = decision
        hw = s.status.hardware
        requests.append(GpuRequest(
            key=s.key, wanted=decision.replicas,
            held=sum(1 for p in s.pods if not p.unschedulable),
            gpus_per_replica=(hw.gpus_per_replica or 1) if hw else 1,
            priority=s.policy.priority, tenant=s.policy.tenant or s.key.namespace,
            pool=_pool_key(s), min_replicas=lo,
        ))
    budgets = {r.tenant: s.policy.gpu_budget for r, s in zip(requests, services, strict=True)}
    grants = arbitrate(requests, free, budgets)
    return {s.key: _update(s, signals[s.key], decisions[s.key], grants.get(s.key), now)
            for s in services}


def _update(s: ServiceInput, signals: Any, decision: Decision, grant: Grant | None,
            now: datetime) -> SLOUpdate:
    ts = now.timestamp()
    control = s.status.control or {}
    window_s = float(parse_duration(s.policy.window))
    period_s = float(parse_duration(s.policy.attainment_period))
    verdict = evaluate_window(signals, s.policy.objectives)
    history = record(SLOHistory.from_dict(control.get("slo")), verdict.outcome, ts, window_s,
                     period_s)
    rep = report(history, s.policy.attainment_target, period_s, ts)
    replicas = decision.replicas
    limited, limited_msg = decision.limited_reason, decision.limited_message
    if grant is not None and grant.replicas < replicas:
        replicas = grant.replicas
        limited, limited_msg = grant.reason, grant.message
    reason, message = decision.reason, decision.message
    if decision.limit_reason and decision.batch_limit != s.status.batch_limit:
        message += f"; batch limit: {decision.limit_reason}: {decision.limit_message}"
    return SLOUpdate(
        replicas=replicas,
        batch_limit=decision.batch_limit,
        reason=reason,
        message=message,
        conds=(
            metrics_condition(signals, held=not decision.valid),
            slo_condition(verdict),
            scaling_condition(limited, limited_msg),
        ),
        observed=observed_status(signals, now),
        control={"state": decision.state.to_dict(), "slo": history.to_dict()},
        slo_compliant=None if verdict.outcome.value == "u" else verdict.outcome.value == "g",
        attainment=None if rep.attainment is None else round(rep.attainment, 4),
        error_budget_remaining=(None if rep.error_budget_remaining is None
                                else round(rep.error_budget_remaining, 4)),
    )


async def observe_and_decide(
    metrics: MetricsSource,
    snap: Snapshot,
    now: datetime,
    settings: Settings | None = None,
    only: Collection[ServiceKey] | None = None,
    fleet: Fleet | None = None,
) -> dict[ServiceKey, SLOUpdate]:
    """One pass's queries (the fixed 8 for all services) and every service's update.

    ``only``: decide just for these services (an SLOPolicy edit's bound services); GPUs
    are then arbitrated among them alone, out of what the snapshot shows free.
    ``fleet``: the snapshot's survey when the caller has one (it is read, not claimed).
    """
    fleet = fleet if fleet is not None else survey(snap)
    # Planning every service's engine is CPU work too: off the event loop as well.
    services = await asyncio.to_thread(inputs, snap, settings, fleet, only)
    if not services:
        return {}
    plan = query_plan(services)
    results = await metrics.run({q.name: q.expr for q in plan.queries}, now.timestamp())
    # Parsing and deciding for many services is CPU work: keep it off the event loop.
    return await asyncio.to_thread(decide_all, services, plan, results,
                                   free_by_pool(fleet, services), now)
