"""The SLO loop's pass over all services: observe -> decide -> arbitrate -> updates.

Pure apart from the one awaited call to the metrics source: the pass builds one fixed
set of PromQL queries for every service (``slo.promql``, at most 10 per pass whatever
the number of services), hands the results to ``slo.signals``, runs ``control.decide``
per service and ``control.arbitrate`` across services for scarce GPUs, and returns one
:class:`SLOUpdate` per service. ``reconcile_service_sync`` then applies each update:
replicas through the Deployment (server-side apply of a changed object only), the live
limit through pod annotations, status and Events only on change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
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
from slo_operator.reconcile.desired import free_gpus, initial_replicas
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


def inputs(snap: Snapshot) -> list[ServiceInput]:
    """Services with a valid spec, a bound policy and a planned Deployment (pure);
    the others are the reconciler's business and keep their conditions."""
    out = []
    for (ns, name), body in sorted(snap.services.items()):
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
        out.append(ServiceInput(ServiceKey(ns, name), spec, policy, status,
                                snap.deployment(ns, name), snap.pods_of(ns, name)))
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


def _flag(args: Sequence[str], flag: str) -> int | None:
    try:
        return int(args[list(args).index(flag) + 1])
    except (ValueError, IndexError):
        return None


def observation(s: ServiceInput, signals: Any, now: float) -> Observation:
    """The control law's view of one service."""
    hw = s.status.hardware
    ceiling = _flag(s.status.engine_args, "--max-num-seqs") or s.policy.batching.max_batch
    max_batch = max(ceiling, s.policy.batching.max_batch) if s.policy.batching.mode == (
        "restart") else ceiling
    precision = "fp8" if hw is not None and hw.fp8 else (
        "fp16" if "float16" in s.status.engine_args else "bf16")
    return Observation(
        key=s.key,
        now=now,
        signals=signals,
        replicas=replica_counts(s.status.desired_replicas or 0, s.pods, now),
        batch_limit=s.status.batch_limit or ceiling,
        max_batch=max_batch,
        hardware=(hw.product or "") if hw else "",
        precision=precision,
        gpus_per_replica=(hw.gpus_per_replica or 1) if hw else 1,
        max_num_batched_tokens=_flag(s.status.engine_args, "--max-num-batched-tokens"),
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


def _free_gpus(snap: Snapshot, services: Sequence[ServiceInput]) -> dict[str, int]:
    """Free GPUs per pool (product) from the watch caches, and per set of pools that a
    multi-variant service competes in (the sum of its pools' free GPUs)."""
    free = free_gpus(snap)
    for s in services:
        key = _pool_key(s)
        if "|" in key and key not in free:
            free[key] = sum(max(0, free.get(p, 0)) for p in key.split("|"))
    return free


def decide_all(
    services: Sequence[ServiceInput],
    plan: QueryPlan,
    results: Mapping[str, Any],
    snap: Snapshot,
    now: datetime,
) -> dict[ServiceKey, SLOUpdate]:
    """Every service's update for this pass (pure: results and ``now`` passed in)."""
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
    grants = arbitrate(requests, _free_gpus(snap, services), budgets)
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
    metrics: MetricsSource, snap: Snapshot, now: datetime
) -> dict[ServiceKey, SLOUpdate]:
    """One pass's queries (a fixed handful for all services) and every service's update."""
    services = inputs(snap)
    if not services:
        return {}
    plan = query_plan(services)
    results = await metrics.run({q.name: q.expr for q in plan.queries}, now.timestamp())
    # Parsing and deciding for many services is CPU work: keep it off the event loop.
    return await asyncio.to_thread(decide_all, services, plan, results, snap, now)
