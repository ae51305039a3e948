"""Plan one InferenceService's reconcile: observe, decide, and list the writes (pure).

Every trigger (create, resume, spec change, owned-object change, the periodic pass) plans
with this same function. It reads only a :class:`Snapshot` built from watch caches, the
pass's :class:`Fleet` (free GPUs as a value), what was last applied (a read-only view of
the ``AppliedCache``) and ``now``; it calls no client and reads no clock. It returns a
:class:`ReconcilePlan`: the actions in the order they are to be made (server-side applies
only for objects whose rendering changed, deletes of retired variants, the live limit
only on pods that differ, the status only when something a reader uses changed or at the
heartbeat (``status.status_write``), Events only on transitions) and what the handler
needs afterwards. ``executor.execute`` performs them.

An apply the API server refuses stops the plan there: nothing after it is touched (the
replicas that run keep serving), and the status and Events of :meth:`Refusal.report`
replace the planned ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slo_operator.api import conditions as C
from slo_operator.api.activation import ANNOTATION_WAKE, parse_wake
from slo_operator.api.cluster import Snapshot
from slo_operator.api.conditions import Cond, merge_conditions, rfc3339, transitions
from slo_operator.api.errors import field_problems, summarize
from slo_operator.api.models import (
    DecisionRecord,
    InferenceServiceSpec,
    InferenceServiceStatus,
    dump,
)
from slo_operator.control.policy import awake_bounds
from slo_operator.engine.profiles import NodeProfile
from slo_operator.reconcile.actions import (
    Action,
    Apply,
    ObjectRef,
    PatchStatus,
    PostEvent,
)
from slo_operator.reconcile.actuate import live_limit_patches
from slo_operator.reconcile.chunking import chunk_events, with_memory
from slo_operator.reconcile.desired import (
    DEFAULT_RUNTIME_IMAGE,
    Problem,
    live_limit,
    plan_service,
)
from slo_operator.reconcile.gpu_inventory import Fleet, survey
from slo_operator.reconcile.placing import (
    lost,
    place_variants,
    placement_event,
    retire_variants,
    retired_event,
    variant_status,
)
from slo_operator.reconcile.ports import ApiDiscovery, AppliedCache, AppliedView
from slo_operator.reconcile.routing import plan_pool
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
    status_write,
)
from slo_operator.reconcile.tenancy import Tenancy
from slo_operator.reconcile.wake import plan_wake
from slo_operator.render.inference_pool import INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND
from slo_operator.render.objects import LABEL_VARIANT, build_all
from slo_operator.settings import OperatorSettings

# Seconds before a service that waits (a missing policy, an unplannable spec, a refused
# object in its back-off) is reconciled again.
RETRY_POLICY_S = 30.0
RETRY_PROBLEM_S = 60.0
RETRY_REFUSED_S = 30.0


@dataclass(frozen=True)
class Settings:
    """Operator-wide settings the reconciler needs. ``pass_interval``: seconds between
    periodic passes (``OperatorSettings.interval``); the SLO loop replays the passes that
    wrote no status at this spacing (``loop.unwritten_passes``)."""

    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    profiles: tuple[NodeProfile, ...] = ()
    pass_interval: float = OperatorSettings.interval
    # Which optional kinds the API server serves (the InferencePool CRD); None: none.
    discovery: ApiDiscovery | None = None
    # --require-tenants: a namespace no Tenant object binds gets no policy
    # (reconcile.tenancy).
    require_tenants: bool = False
    # --activator-service: the activator's Service (namespace, name) that wakes services
    # at zero replicas; None: no scale to zero (reconcile.wake).
    activator: tuple[str, str] | None = None


@dataclass(frozen=True)
class Report:
    """A service's status after the reconcile and the writes that report it: the status
    patch (only when ``status_write`` finds a reason; otherwise ``status`` is the written
    one, unchanged), then the Events (actions first, then condition transitions)."""

    status: dict[str, Any]
    actions: tuple[Action, ...]


def report(
    body: Mapping[str, Any],
    old: InferenceServiceStatus,
    new: InferenceServiceStatus,
    conds: Sequence[Cond],
    now: datetime,
    announce: Sequence[EventSpec] = (),
    update: SLOUpdate | None = None,
) -> Report:
    """The status with ``conds`` merged in, a status patch when ``status_write`` says it
    must replace ``old`` (``update``: the SLO pass's, for its memory flag and the
    heartbeat), and Events for ``announce`` (scale and batch-limit actions, placement)
    and for the conditions that flipped."""
    meta = body["metadata"]
    final = new.model_copy(deep=True)
    final.conditions = merge_conditions(old.conditions, conds, now, meta.get("generation"))
    status, written = dump(final), dump(old)
    actions: list[Action] = []
    why = status_write(written, status, now, loop=update is not None,
                       memory_changed=update is not None and update.memory_changed)
    if why:
        actions.append(PatchStatus("InferenceService", meta["namespace"], meta["name"],
                                   merge_patch(written, status), why))
    else:
        # Nothing a reader uses moved: the written status stays, per-pass times included,
        # and is what the next pass starts from.
        status = written
    ref = ObjectRef.of(body)
    for ev in [*announce, *choose_events(transitions(old.conditions, final.conditions))]:
        actions.append(PostEvent(ref, ev.type, ev.reason, ev.message, now))
    return Report(status, tuple(actions))


def merge_patch(written: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` as the JSON merge patch that leaves exactly it where ``written`` is: a
    merge patch keeps every key it does not name, so what ``status`` no longer has (a
    placement reason, a verdict gone unknown, a signal gone missing, a key of the loop's
    memory) is sent as null, in nested objects too; lists are replaced whole. Keys this
    operator does not model (kopf's ``status.kopf``) are not in ``written`` and stay."""
    out = dict(status)
    for key, old in written.items():
        new = status.get(key)
        if key not in status:
            out[key] = None
        elif isinstance(old, Mapping) and isinstance(new, Mapping):
            out[key] = merge_patch(old, new)
    return out


@dataclass(frozen=True)
class Refusal:
    """What is reported when the API server refuses one of the plan's applies: the status
    as planned up to the applies (hardware and engine settings included), with Ready False
    for ``ApplyFailed`` and the server's own message."""

    body: Mapping[str, Any]
    old: InferenceServiceStatus
    new: InferenceServiceStatus
    conds: tuple[Cond, ...]
    now: datetime

    def report(self, message: str) -> Report:
        return report(self.body, self.old, self.new,
                      [*self.conds, Cond(C.READY, False, C.APPLY_FAILED, message)], self.now)


@dataclass(frozen=True)
class ReconcilePlan:
    """One reconcile's writes in order, the status they leave, and what follows."""

    actions: tuple[Action, ...]
    status: Mapping[str, Any]
    fleet: Fleet  # the pass's GPUs with this service's new replicas taken out
    now: datetime
    retry_after: float | None = None
    permanent_error: str | None = None
    # How to report an apply the API server refuses (None: the plan applies nothing).
    refusal: Refusal | None = None


def desired_replicas(status: InferenceServiceStatus, lo: int, hi: int) -> int:
    """The controller's last replica count clamped into the bounds; the minimum at first
    (at least one replica unless the bounds allow zero only)."""
    current = status.desired_replicas
    if current is None:
        return lo if lo > 0 else 1 if hi > 0 else 0
    return min(max(current, lo), hi)


def plan_reconcile(
    body: Mapping[str, Any],
    snap: Snapshot,
    now: datetime,
    settings: Settings,
    applied: AppliedView | None = None,
    update: SLOUpdate | None = None,
    fleet: Fleet | None = None,
) -> ReconcilePlan:
    """Plan one reconcile of ``body`` against the cached ``snap`` (pure).

    ``applied``: what was applied lately and what the API server refused (read only; an
    empty cache when None). ``update``: what the SLO loop decided this pass (replicas,
    batch limit, signals, conditions); without one, replicas and the limit hold their last
    decided values. ``fleet``: the pass's pools, prices and free GPUs (surveyed from
    ``snap`` when None); the plan returns it with this service's new replicas taken out.
    """
    view: AppliedView = applied if applied is not None else AppliedCache()
    surveyed: Fleet = fleet if fleet is not None else survey(snap)
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    old_status = InferenceServiceStatus.model_validate(body.get("status") or {})
    new = old_status.model_copy(deep=True)
    new.observed_generation = meta.get("generation")
    conds: list[Cond] = []

    def done(rep: Report, **outcome: Any) -> ReconcilePlan:
        return ReconcilePlan(rep.actions, rep.status, surveyed, now, **outcome)

    try:
        spec = InferenceServiceSpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        msg = summarize(field_problems(err))
        conds += [
            Cond(C.SPEC_VALID, False, C.INVALID_SPEC, msg),
            Cond(C.READY, False, C.INVALID_SPEC, msg),
        ]
        return done(report(body, old_status, new, conds, now), permanent_error=msg)
    conds.append(Cond(C.SPEC_VALID, True, C.VALID, "Spec is valid"))

    ref = spec.slo_policy_ref.name if spec.slo_policy_ref else None
    policy, bound = policy_condition(namespace, ref, snap.policy(namespace, ref) if ref else None,
                                     Tenancy.of(snap, settings.require_tenants))
    conds.append(bound)
    if policy is None:
        conds.append(Cond(C.READY, False, bound.reason, bound.message))
        return done(report(body, old_status, new, conds, now), retry_after=RETRY_POLICY_S)

    # Scale to zero: at least one replica while awake; zero only as the law decides it,
    # and only with an activator to wake the service again.
    lo, hi = awake_bounds(policy, spec.replicas)
    to_zero = policy.scaling.scale_to_zero
    zero_ok = to_zero and settings.activator is not None
    replicas = desired_replicas(old_status, lo, hi)
    if zero_ok and old_status.desired_replicas == 0:
        replicas = 0
    wanted_limit = old_status.batch_limit
    if update is not None:
        replicas = 0 if zero_ok and update.replicas == 0 else min(max(update.replicas, lo), hi)
        wanted_limit = update.batch_limit
    result = plan_service(
        name=name,
        namespace=namespace,
        uid=meta.get("uid", ""),
        spec=spec,
        policy=policy,
        policy_name=ref or "",
        pools=surveyed.pools,
        nodes=snap.nodes,
        replicas=replicas,
        restart_limit=wanted_limit,
        runtime_image=settings.runtime_image,
        profiles=settings.profiles,
        prices=surveyed.prices,
        control=old_status.control,
        now=now.timestamp(),
    )
    if isinstance(result, Problem):
        conds += problem_conditions(result.reason, result.field, result.message)
        # Nothing is torn down: existing replicas keep serving while the spec is fixed.
        return done(report(body, old_status, new, conds, now), retry_after=RETRY_PROBLEM_S)

    plan = result
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

    placed, renders, opts, gpus = place_variants(plan, snap, namespace, name, replicas,
                                                 surveyed.gpus)
    left = surveyed.with_gpus(gpus)
    existing = snap.variants(namespace, name)
    new.hardware = plan.hardware_status
    new.engine_args = list(eng.args)
    new.engine_notes = list(plan.notes) + [f"GPU prices: {p}" for p in left.prices.problems]
    refusal = Refusal(body, old_status, new.model_copy(deep=True), tuple(conds), now)

    stamp = now.timestamp()
    routing = spec.routing.inference_pool
    pool = plan_pool(routing, plan.render, routing.enabled and settings.discovery is not None
                     and settings.discovery.serves(INFERENCE_POOL_API_VERSION,
                                                   INFERENCE_POOL_KIND),
                     old_status.conditions)
    dep = snap.deployment(namespace, name)
    pods = snap.pods_of(namespace, name)
    nodes = {n.name for n in snap.nodes}
    # A Deployment counts the Ready pods of a lost node until they are collected; pods of
    # a variant whose Deployment is gone (retired) are counted by none.
    lost_ready = Counter(p.variant for p in pods if p.ready and lost(p, nodes))
    gone = sum(min(n, existing[v].ready_replicas) for v, n in lost_ready.items()
               if v in existing)
    if dep is not None and gone:
        dep = replace(dep, ready_replicas=max(0, dep.ready_replicas - gone))
    activator = settings.activator
    woke = plan_wake(plan.render, scale_to_zero=to_zero, desired=replicas,
                     ready=dep.ready_replicas if dep else 0,
                     wake=parse_wake((meta.get("annotations") or {}).get(ANNOTATION_WAKE)),
                     activator=snap.activators.get(activator) if activator else None,
                     configured=activator is not None, route=snap.routes.get((namespace, name)),
                     old=old_status.scale_to_zero, now=now)
    new.scale_to_zero = woke.status
    applies: list[Action] = []
    extra = [*pool.objects, *([woke.obj] if woke.obj is not None else [])]
    for obj in [*build_all(plan.render, renders), *extra]:
        drifted = (pool.force and obj is pool.obj) or (woke.force and obj is woke.obj)
        if obj["kind"] == "Deployment":
            # The watch cache shows the Deployment gone or scaled by another writer: apply
            # it again even while the cache says it was applied lately.
            current = existing.get(obj["metadata"]["labels"].get(LABEL_VARIANT, ""))
            drifted = current is None or current.spec_replicas != obj["spec"]["replicas"]
        if not drifted and view.fresh(obj, stamp):
            continue
        refused = view.backoff(obj, stamp)
        if refused is not None:
            # Refused lately and unchanged since: not re-sent until the back-off ends or
            # the rendering changes; nothing after it is touched.
            rep = refusal.report(refused)
            return ReconcilePlan((*applies, *rep.actions), rep.status, left, now,
                                 retry_after=RETRY_REFUSED_S,
                                 refusal=refusal if applies else None)
        applies.append(Apply(obj))

    retired = retire_variants(snap, namespace, name, plan, placed)
    deletes = [*retired, *pool.deletes, *([woke.delete] if woke.delete is not None else [])]
    conds += [pool.cond] if pool.cond is not None else []
    conds += [woke.cond] if woke.cond is not None else []
    conds += rollout_conditions(replicas, dep, pods, plan.render.gpu_resource)
    limit = live_limit(policy, eng.max_num_seqs, wanted_limit)
    patches = [p for p in live_limit_patches(namespace, pods, limit)
               if not view.limit_sent(namespace, p.pod, limit, stamp)]
    new.variants = variant_status(plan, placed, opts, existing)
    # What each variant's pods report they run: this SLO pass's reading, else the written one.
    engine = update.engine if update is not None and update.engine is not None else {
        v.name: v.engine_observed for v in old_status.variants}
    new.variants = [v.model_copy(update={"engine_observed": engine.get(v.name)})
                    for v in new.variants]
    new.placement = "; ".join(placed.reasons) or None
    announce = [*placement_event(placed, old_status.placement),
                *retired_event(retired, placed)]
    new.desired_replicas = replicas
    new.replicas = dep.replicas if dep else 0
    new.ready_replicas = dep.ready_replicas if dep else 0
    new.batch_limit = limit
    if update is not None:
        why = f"{update.reason}: {update.message}"
        announce = [*action_events(old_status.desired_replicas, replicas,
                                   old_status.batch_limit, limit, why), *announce]
        conds += update.conds
        new.observed = update.observed
        new.control = dict(update.control) if update.control is not None else new.control
        new.slo_compliant = update.slo_compliant
        new.attainment = update.attainment
        new.error_budget_remaining = update.error_budget_remaining
        new.last_decisions = append_decision(old_status.last_decisions, DecisionRecord(
            time=rfc3339(now), replicas=replicas, batch_limit=limit, reason=update.reason,
            message=update.message[:1024]))
    # The chunked-prefill budgets the plan runs, kept beside the law's memory for their
    # rate limit, and an Event for each that moved on a running variant.
    new.control = with_memory(new.control, plan.chunk_memory)
    announce = [*announce, *chunk_events(plan.chunk_changes, list(existing))]
    rep = report(body, old_status, new, conds, now, announce, update)
    # The status (the decision: desiredReplicas, batchLimit, the law's memory) is written
    # before the objects that carry it out: an operator killed between the two finds the
    # decision in status when it starts again and finishes the action (its resume
    # reconcile applies status.desiredReplicas and batchLimit); written after, the
    # restarted operator read the previous decision and undid the action before its first
    # pass redid it. The Events follow the actions they announce.
    first = tuple(a for a in rep.actions if isinstance(a, PatchStatus))
    then = tuple(a for a in rep.actions if not isinstance(a, PatchStatus))
    if first:
        # A refused apply is then reported over the status just written (the decision
        # stays recorded: the next attempt carries it out).
        written = InferenceServiceStatus.model_validate(rep.status)
        refusal = Refusal(body, written, written.model_copy(deep=True), (), now)
    return ReconcilePlan((*first, *applies, *deletes, *patches, *then), rep.status, left, now,
                         refusal=refusal if applies else None)
