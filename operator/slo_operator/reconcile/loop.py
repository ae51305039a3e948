"""The SLO loop's pass over services: observe -> decide -> arbitrate -> updates.

Pure apart from the one awaited call to the metrics source: the pass builds one fixed
set of PromQL queries for every service (``slo.promql.build_queries``: exactly 10, the
names in ``QUERY_NAMES``, whatever the number of services), hands the results to
``slo.signals`` (and what the pods run to ``slo.engine_info``), runs ``control.decide``
per service and ``control.arbitrate`` across services for scarce GPUs, and returns one
:class:`SLOUpdate` per service. Each service's engine facts (precision, batch ceiling,
chunked-prefill budget, GPUs per replica) come from its plan (``desired.plan_service`` on
the pass's :class:`Fleet`), the same plan the reconciler applies. ``reconcile_service_sync``
then applies each update: replicas through the Deployment (server-side apply of a changed
object only), the live limit through pod annotations, status and Events only on change.

The periodic pass runs it for every service; an SLOPolicy edit runs it for the services
bound to that policy (``only``), so a new objective acts at once rather than a period later.

Status is written only when something a reader uses changed (the decision, replicas, limit,
a condition, the SLO state, a signal that moved), or at the heartbeat (``status.status_write``).
The law's memory (rate samples, learnt speed and corrections, the window of wishes) moves on
almost every pass under traffic, yet is no reader's business: the operator keeps it between
writes in a :class:`LawMemory` and decides from it, and status carries it whenever status is
written (at the latest at the heartbeat, ``status.HEARTBEAT_S``). An operator that starts
(a restart, a peer taking over) decides from the written memory, brought up to the previous
pass as the passes since would have left it had nothing moved (``unwritten_passes``,
``resume``; the window history: ``fill``): at most a heartbeat of learning is lost, never a
decision, a limit or an SLO window (those are written at once).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slo_operator.adapters.prometheus import MetricsSource
from slo_operator.api.activation import ANNOTATION_WAKE, Wake, parse_wake
from slo_operator.api.cluster import DeploymentObs, PodObs, Snapshot
from slo_operator.api.models import (
    InferenceServiceSpec,
    InferenceServiceStatus,
    SLOPolicySpec,
    parse_duration,
)
from slo_operator.api.observe import (
    MetricsState,
    Observation,
    ReplicaCounts,
    ServiceKey,
    Signals,
)
from slo_operator.control import (
    ControlPolicy,
    ControlState,
    Decision,
    GpuRequest,
    Grant,
    arbitrate,
    decide,
    policy_for,
)
from slo_operator.control import reasons as R
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
    HEARTBEAT_S,
    SLOUpdate,
    heartbeat_due,
    metrics_condition,
    observed_status,
    scaling_condition,
    slo_condition,
    written_at,
)
from slo_operator.reconcile.tenancy import Claim, Tenancy
from slo_operator.render.names import label_value, service_label
from slo_operator.slo.engine_info import (
    PodEngine,
    engine_condition,
    observe_variants,
    parse_engine_info,
)
from slo_operator.slo.engine_info import observed_status as engine_observed
from slo_operator.slo.evaluate import Outcome, SLOHistory, evaluate_window, record, report
from slo_operator.slo.promql import ENGINE_QUERY, QueryPlan, build_queries, percentiles_asked
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
    uid: str = ""
    claim: Claim | None = None  # its policy's tenant (reconcile.tenancy); None: namespace
    wake: Wake | None = None  # the activator's last wake (annotation), None: none
    can_wake: bool = False  # an activator is configured: the law may go to zero

    @property
    def tenant(self) -> str:
        named = self.claim.tenant if self.claim else self.policy.tenant
        return named or self.key.namespace

    @property
    def priority(self) -> int:
        """The policy's priority under its Tenant's ceiling."""
        return self.claim.priority(self.policy.priority) if self.claim else self.policy.priority

    @property
    def tenant_budget(self) -> int | None:
        """The Tenant object's own GPU budget (None: none, or no Tenant object)."""
        return self.claim.spec.gpu_budget if self.claim and self.claim.spec else None


# ---------------------------------------------------------------- the memory between writes

@dataclass(frozen=True)
class Kept:
    """A service's law memory as the last pass left it (``ControlState.to_dict``: what
    status would carry), and the ``observed.time`` of each status it continues: the one
    the pass read and the one it may have written. A status with another stamp was
    written by someone else (a peer, an older operator, a recreated object): the kept
    memory is then not this service's continuation and is not used."""

    uid: str
    stamps: frozenset[str | None]
    state: Mapping[str, Any]


@dataclass
class LawMemory:
    """The law's memory of every service between status writes (one per operator
    process; dropped when the process stops or its peering pauses it)."""

    entries: dict[ServiceKey, Kept] = field(default_factory=dict)

    def recall(self, s: ServiceInput) -> ControlState | None:
        """The kept memory of ``s`` when it continues ``s``'s written status, else None."""
        k = self.entries.get(s.key)
        stamp = s.status.observed.time if s.status.observed else None
        if k is None or k.uid != s.uid or stamp not in k.stamps:
            return None
        return ControlState.from_dict(k.state)

    def keep(self, services: Sequence[ServiceInput], updates: Mapping[ServiceKey, SLOUpdate],
             everyone: bool = False) -> None:
        """Keep what a pass decided for ``services``; ``everyone``: the pass saw every
        service, so memories of services it no longer sees (deleted, unbound) are dropped."""
        if everyone:
            seen = {s.key for s in services}
            for key in [k for k in self.entries if k not in seen]:
                del self.entries[key]
        for s in services:
            u = updates.get(s.key)
            state = (u.control or {}).get("state") if u is not None else None
            if state is None:
                self.entries.pop(s.key, None)
                continue
            read = s.status.observed.time if s.status.observed else None
            wrote = u.observed.time if u is not None and u.observed else None
            self.entries[s.key] = Kept(s.uid, frozenset({read, wrote}), state)

    def clear(self) -> None:
        self.entries.clear()

    def forget(self, key: ServiceKey) -> None:
        self.entries.pop(key, None)


def inputs(snap: Snapshot, settings: Settings | None = None, fleet: Fleet | None = None,
           only: Collection[ServiceKey] | None = None,
           now: float | None = None) -> list[ServiceInput]:
    """Services with a valid spec, a bound policy, a planned Deployment and a plan on the
    fleet now (pure); the others are the reconciler's business and keep their conditions.
    ``only``: just these services (None: all). ``now`` (seconds) lets the plan keep the
    chunked-prefill budget recorded in status (``reconcile.chunking``)."""
    settings = settings if settings is not None else Settings()
    fleet = fleet if fleet is not None else survey(snap)
    tenancy = Tenancy.of(snap, settings.require_tenants)
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
        claim = tenancy.claim(ns, policy.tenant)
        if claim.refused:
            continue  # the reconciler reports it (PolicyBound False)
        if status.desired_replicas is None or status.hardware is None:
            continue  # not planned yet
        plan = plan_service(
            name=name, namespace=ns, uid=str(body["metadata"].get("uid", "")), spec=spec,
            policy=policy, policy_name=ref or "", pools=fleet.pools, nodes=snap.nodes,
            replicas=status.desired_replicas, restart_limit=status.batch_limit,
            runtime_image=settings.runtime_image, profiles=settings.profiles,
            prices=fleet.prices, control=status.control, now=now,
        )
        if isinstance(plan, Problem):
            continue  # the reconciler reports it; an update would not be applied
        annotations = body["metadata"].get("annotations") or {}
        out.append(ServiceInput(key, spec, policy, status, snap.deployment(ns, name),
                                snap.pods_of(ns, name), plan,
                                str(body["metadata"].get("uid", "")), claim,
                                parse_wake(annotations.get(ANNOTATION_WAKE)),
                                settings.activator is not None))
    return out


def query_plan(services: Sequence[ServiceInput]) -> QueryPlan:
    """The pass's queries: one per signal for all services and their policy windows."""
    return build_queries({float(parse_duration(s.policy.window)) for s in services},
                         percentiles=percentiles_asked(s.policy.objectives for s in services))


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
        error_budget_left=budget_left(s, now),
        wake=s.wake,
        pooled_routing=s.spec.routing.inference_pool.enabled,
    )


def budget_left(s: ServiceInput, now: float) -> float | None:
    """Share of the policy period's error budget left, from the windows in status."""
    control = s.status.control or {}
    history = SLOHistory.from_dict(control.get("slo"))
    if history.last_index is None:
        return None
    rep = report(history, s.policy.attainment_target,
                 float(parse_duration(s.policy.attainment_period)), now)
    return rep.error_budget_remaining


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
    interval: float = Settings.pass_interval,
    memory: LawMemory | None = None,
) -> dict[ServiceKey, SLOUpdate]:
    """Every service's update for this pass (pure: results, free GPUs per pool and
    ``now`` passed in; ``interval``: the seconds between periodic passes).

    ``memory``: the law's memory kept since the last write (read, not changed): a service
    whose kept memory continues its status decides from it, and a move of that memory
    alone does not call for a status write. Without it (None) the written memory is all
    there is, and every move of it is written."""
    ts = now.timestamp()
    # Series carry the service *label* (cut with a hash past 63 characters), not the name.
    by_label = {ServiceKey(s.key.namespace, service_label(s.key.name)): s for s in services}
    specs = {k: spec_for(s.policy.objectives, float(parse_duration(s.policy.window)))
             for k, s in by_label.items()}
    signals = {by_label[k].key: sig
               for k, sig in parse_signals(plan, results, specs, ts).items()}
    # What each pod runs (None: the engine query failed, the written reading stands).
    reported = parse_engine_info(results.get(ENGINE_QUERY))
    engines = {s.key: None if reported is None else reported.get(k, {})
               for k, s in by_label.items()}
    decisions: dict[ServiceKey, Decision] = {}
    unwritten: dict[ServiceKey, tuple[float, ...]] = {}
    requests = []
    for s in services:
        control = s.status.control or {}
        state = ControlState.from_dict(control.get("state"))
        lo, _ = initial_replicas(s.spec, s.policy)
        policy = policy_for(s.policy, s.spec.replicas, can_wake=s.can_wake)
        obs = observation(s, signals[s.key], ts)
        times = unwritten[s.key] = unwritten_passes(s.status, state, ts, interval)
        recalled = memory.recall(s) if memory is not None else None
        decision = decide(obs, policy, recalled or state, ts)
        since = times if recalled is None and law_decided(s.status, state) else ()
        # Replaying the unwritten passes costs a decide each: done only when this pass
        # writes (it decides differently, or the heartbeat is due); a pass that changes
        # nothing decides the same from the written memory as from the replayed one.
        if since and (not settled(s.status, state, decision, policy, ts)
                      or heartbeat_due(s.status.observed.time if s.status.observed else None,
                                       ts)):
            decision = decide(obs, policy, resume(s.status, state, obs, policy, since), ts)
        decisions[s.key] = decision
        hw = s.status.hardware
        requests.append(GpuRequest(
            key=s.key, wanted=decision.replicas,
            held=sum(1 for p in s.pods if not p.unschedulable),
            gpus_per_replica=(hw.gpus_per_replica or 1) if hw else 1,
            priority=s.priority, tenant=s.tenant,
            pool=_pool_key(s), min_replicas=lo,
        ))
    # A Tenant object's budget is one more claim on its tenant: policies may lower it.
    grants = arbitrate(requests, free, tenant_budgets(
        [(s.tenant, s.policy.gpu_budget) for s in services]
        + [(s.tenant, s.tenant_budget) for s in services]))
    return {s.key: _update(s, signals[s.key], decisions[s.key], grants.get(s.key), now,
                           unwritten[s.key], kept=memory is not None, engine=engines[s.key])
            for s in services}


def tenant_budgets(claims: Iterable[tuple[str, int | None]]) -> dict[str, int | None]:
    """Each tenant's GPU budget from the policies that name it: the smallest any of them
    sets (None: no policy sets one). Policies in several namespaces may name one tenant; a
    new policy can lower a tenant's budget, never raise it past another's."""
    out: dict[str, int | None] = {}
    for tenant, budget in claims:
        have = out.get(tenant)
        out[tenant] = budget if have is None else (have if budget is None else min(have, budget))
    return out


def _update(s: ServiceInput, signals: Any, decision: Decision, grant: Grant | None,
            now: datetime, unwritten: Sequence[float] = (), kept: bool = False,
            engine: Mapping[str, PodEngine] | None = None) -> SLOUpdate:
    ts = now.timestamp()
    control = s.status.control or {}
    window_s = float(parse_duration(s.policy.window))
    period_s = float(parse_duration(s.policy.attainment_period))
    verdict = evaluate_window(signals, s.policy.objectives)
    written = SLOHistory.from_dict(control.get("slo"))
    history = record(fill(written, unwritten, window_s, period_s), verdict.outcome, ts,
                     window_s, period_s)
    rep = report(history, s.policy.attainment_target, period_s, ts)
    replicas = decision.replicas
    limited, limited_msg = decision.limited_reason, decision.limited_message
    if grant is not None and grant.replicas < replicas:
        replicas = grant.replicas
        limited, limited_msg = grant.reason, grant.message
    reason, message = decision.reason, decision.message
    if decision.limit_reason and decision.batch_limit != s.status.batch_limit:
        message += f"; batch limit: {decision.limit_reason}: {decision.limit_message}"
    # The window history changes in something a later pass reads only with a new verdict
    # (or a new window length): more windows of the written verdict are ``fill``'s.
    same_windows = (written.last_index is not None and written.window_s == max(1, int(window_s))
                    and written.outcomes[-1:] == verdict.outcome.value)
    # With the memory kept between writes, its moves wait for the next write.
    memory_changed = not same_windows or not (kept or same_memory(
        ControlState.from_dict(control.get("state")), decision.state,
        policy_for(s.policy, s.spec.replicas, can_wake=s.can_wake), ts, idle(s.status)))
    # The pods' engine settings against each variant's plan (``engine``: the service's
    # pods as reported; None: unknown this pass, nothing is said).
    variants = None if engine is None else observe_variants(
        {v.option.variant: v.engine.args for v in s.plan.variants},
        {p.name: p.variant for p in s.pods}, engine)
    return SLOUpdate(
        replicas=replicas,
        batch_limit=decision.batch_limit,
        reason=reason,
        message=message,
        conds=(
            metrics_condition(signals, held=not decision.valid,
                              at_zero=s.status.desired_replicas == 0 and decision.reason in (
                                  R.SCALED_TO_ZERO_REASON, R.WOKEN)),
            slo_condition(verdict),
            scaling_condition(limited, limited_msg),
            *(() if variants is None else (engine_condition(variants),)),
        ),
        observed=observed_status(signals, now),
        control={"state": decision.state.to_dict(), "slo": history.to_dict()},
        slo_compliant=None if verdict.outcome.value == "u" else verdict.outcome.value == "g",
        attainment=None if rep.attainment is None else round(rep.attainment, 4),
        error_budget_remaining=(None if rep.error_budget_remaining is None
                                else round(rep.error_budget_remaining, 4)),
        memory_changed=memory_changed,
        engine=None if variants is None else {
            name: engine_observed(v) for name, v in variants.items()},
    )


# ---------------------------------------------------------------- passes that wrote nothing

# What an idle pass observes (no request finished, none waiting or running): the signals
# the passes of an idle stretch saw, replayed to rebuild the memory they did not write.
IDLE = Signals(state=MetricsState.NO_TRAFFIC, request_rate=0.0, waiting=0.0, running=0.0)


def unwritten_passes(status: InferenceServiceStatus, state: ControlState, now: float,
                     interval: float) -> tuple[float, ...]:
    """When the passes since the loop last wrote ``status`` ran (every ``interval``
    seconds back from ``now``, ``now`` excluded), oldest first.

    None of them wrote: each found nothing a reader uses changed, so each decided and
    judged as the written status says. A status older than a heartbeat and two passes was
    not left unwritten by passes (the heartbeat would have written it): the loop did not
    run (operator down), and there is nothing to replay.
    """
    written = written_at(status.observed.time if status.observed else None)
    if written is None or now - written > HEARTBEAT_S + 2 * interval:
        return ()
    # observed.time has whole seconds; the law's own stamp of that pass has milliseconds.
    start = state.last_time if law_decided(status, state) else written + 0.5
    assert start is not None  # law_decided guarantees it
    n = math.floor((now - start - interval / 2) / interval)
    return tuple(now - k * interval for k in range(max(0, n), 0, -1))


def law_decided(status: InferenceServiceStatus, state: ControlState) -> bool:
    """Whether the last written pass was a valid decision (the memory's ``lastTime`` is
    that pass): the unwritten passes since decided too, as their conditions were the
    same. Otherwise the law held, and its memory did not move on those passes either."""
    written = written_at(status.observed.time if status.observed else None)
    last = state.last_time
    return written is not None and last is not None and written - 0.01 <= last < written + 1.01


def resume(status: InferenceServiceStatus, state: ControlState, obs: Observation,
           policy: ControlPolicy, times: Sequence[float]) -> ControlState:
    """The law's memory as the unwritten passes at ``times`` left it.

    An idle stretch (the written signals say NoTraffic) is replayed through ``decide``
    itself with idle signals: its rate samples (zeros, which the burst and trend headroom
    of the next busy pass count), the stamps and the window of wishes come out exactly as
    the law keeps them. Otherwise only time moved in what a later pass reads (a pass that
    moved anything else was written): the last decision and the newest run of wishes are
    stamped with the last unwritten pass.
    """
    if not times:
        return state
    if idle(status):
        for t in times:
            state = decide(replace(obs, now=t, signals=IDLE), policy, state, t).state
        return state
    last = times[-1]
    recs = state.recommendations
    if recs and recs[-1][0] < last:
        recs = (*recs[:-1], (last, recs[-1][1]))
    return state.evolve(recommendations=recs, last_time=max(last, state.last_time or last),
                        last_good_time=max(last, state.last_good_time or last))


def fill(history: SLOHistory, times: Sequence[float], window_s: float,
         period_s: float) -> SLOHistory:
    """The window history with the windows of the unwritten passes at ``times`` judged as
    the newest written window was (those passes found the same verdict: a different one
    is a change of ``sloCompliant``, which is written at once); windows no pass saw stay
    unknown, as ``record`` leaves them."""
    w = max(1, int(window_s))
    if not times or history.last_index is None or history.window_s != w \
            or not history.outcomes:
        return history
    seen = {math.floor(t / w) for t in times}
    newest = max(seen)
    if newest <= history.last_index:
        return history
    keep = max(1, int(period_s) // w)
    start = max(history.last_index + 1, newest - keep + 1)
    added = "".join(history.outcomes[-1] if i in seen else Outcome.UNKNOWN.value
                    for i in range(start, newest + 1))
    return SLOHistory(w, newest, (history.outcomes + added)[-keep:])


def idle(status: InferenceServiceStatus) -> bool:
    """Whether the written signals say no request finished, waited or ran (NoTraffic)."""
    return status.observed is not None and status.observed.state == MetricsState.NO_TRAFFIC


def settled(status: InferenceServiceStatus, state: ControlState, decision: Decision,
            policy: ControlPolicy, now: float) -> bool:
    """Whether ``decision`` repeats the written one (replicas, limit, reason) and leaves
    the law's memory as written but for what time alone moves (``same_memory``)."""
    last = status.last_decisions[-1] if status.last_decisions else None
    return last is not None and (last.replicas, last.batch_limit, last.reason) == (
        decision.replicas, decision.batch_limit, decision.reason) and same_memory(
        state, decision.state, policy, now, idle(status))


def same_memory(written: ControlState, new: ControlState, policy: ControlPolicy,
                now: float, idle: bool = False) -> bool:
    """Whether ``new`` differs from the ``written`` memory only in what passing time moves,
    so that deciding from either (``resume`` brings the written one forward) comes to the
    same: the stamps of the last pass (``lastTime``, ``lastGood.time``), the last time of
    the newest run of equal wishes, what fell out of the law's windows (wishes past the
    stabilization windows, rate and prompt-work samples past the burst lookback) and, while
    ``idle`` (a stretch ``resume`` replays), more zero samples of either. Elsewhere a new
    sample is a change even when it repeats the last: the burst headroom counts samples.
    Compared as written (``to_dict``'s rounding)."""
    return _memory(written, policy, now, idle) == _memory(new, policy, now, idle)


def _memory(state: ControlState, policy: ControlPolicy, now: float,
            idle: bool) -> dict[str, Any]:
    d = state.to_dict()
    d.pop("lastTime", None)
    if "lastGood" in d:
        d["lastGood"] = {k: v for k, v in d["lastGood"].items() if k != "time"}
    # A pass that makes the newest wish again only restamps it; older wishes count while
    # inside the stabilization windows.
    horizon = max(policy.scale_up_stabilization_s, policy.scale_down_stabilization_s)
    *older, newest = d.get("recommendations") or [[None, None]]
    d["recommendations"] = [[t, n] for t, n in older if now - t <= horizon] + [
        [None, newest[1]]]
    for key in ("rates", "loads"):  # sampled alike (law._remember)
        series = [[t, r] for t, r in d.get(key, []) if now - t <= policy.burst_lookback_s]
        while idle and len(series) > 1 and series[-1][1] == series[-2][1] == 0:
            series.pop()  # a run of zeros: its first sample (when it began) stands for it
        d[key] = series
    return d


async def observe_and_decide(
    metrics: MetricsSource,
    snap: Snapshot,
    now: datetime,
    settings: Settings | None = None,
    only: Collection[ServiceKey] | None = None,
    fleet: Fleet | None = None,
    memory: LawMemory | None = None,
) -> dict[ServiceKey, SLOUpdate]:
    """One pass's queries (the fixed 10 for all services) and every service's update.

    ``only``: decide just for these services (an SLOPolicy edit's bound services); GPUs
    are then arbitrated among them alone, out of what the snapshot shows free.
    ``fleet``: the snapshot's survey when the caller has one (it is read, not claimed).
    ``memory``: the law's memory between writes (``decide_all``); the pass's is kept in it.
    """
    fleet = fleet if fleet is not None else survey(snap)
    # Planning every service's engine is CPU work too: off the event loop as well.
    services = await asyncio.to_thread(inputs, snap, settings, fleet, only, now.timestamp())
    if not services:
        return {}
    plan = query_plan(services)
    results = await metrics.run({q.name: q.expr for q in plan.queries}, now.timestamp())
    interval = (settings or Settings()).pass_interval
    # Parsing and deciding for many services is CPU work: keep it off the event loop.
    updates = await asyncio.to_thread(decide_all, services, plan, results,
                                      free_by_pool(fleet, services), now, interval, memory)
    if memory is not None:
        memory.keep(services, updates, everyone=only is None)
    return updates
