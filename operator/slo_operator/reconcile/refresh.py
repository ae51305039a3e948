"""Refresh services from the caches: the per-service step every handler and the pass share.

Below the handlers, so that the InferenceService, SLOPolicy and periodic handlers call
the same code without importing one another. The pieces of the operator's context it
needs come in as a :class:`Reconciler` (``Reconciler.of(ctx)`` picks them from the kopf
memo's context).

``refresh`` reconciles one service under its lock; ``refresh_services`` runs observe ->
decide (``loop.observe_and_decide``) for a set of services, then refreshes each with its
update, threading the pass's free GPUs (:class:`Fleet`) from one service to the next.
``OwnerRefresher`` gathers the refreshes that owned-object events ask for into such
batches.
``policy_changed`` and ``policy_removed`` are the SLOPolicy handlers' steps: an edited
policy's bound services get a decision at once, not a period later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from slo_operator.adapters.kube import failure_summary, from_api, transient
from slo_operator.adapters.prometheus import MetricsSource
from slo_operator.api.cluster import Snapshot
from slo_operator.api.observe import ServiceKey
from slo_operator.monitoring.operator_metrics import METRICS
from slo_operator.reconcile.actions import PatchStatus
from slo_operator.reconcile.executor import Outcome, execute
from slo_operator.reconcile.gpu_inventory import Fleet, survey
from slo_operator.reconcile.loop import LawMemory, observe_and_decide
from slo_operator.reconcile.planner import ReconcilePlan, Settings, plan_reconcile
from slo_operator.reconcile.policy_binding import bound_to, reconcile_policy
from slo_operator.reconcile.ports import AppliedCache, KubeWriter
from slo_operator.reconcile.status import SLOUpdate
from slo_operator.reconcile.tenancy import Tenancy
from slo_operator.settings import OperatorSettings

log = logging.getLogger(__name__)
KIND = "InferenceService"


class StatusStore(Protocol):
    """The status this operator last wrote per service (``handlers.setup.StatusMemory``)."""

    def latest(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """``body`` with the status last written, while the cache still serves its revision."""

    def remember(self, body: Mapping[str, Any], status: dict[str, Any],
                 between: Sequence[Mapping[str, Any]] = ()) -> None:
        """``status`` was computed from ``body`` and written after ``between``."""


class OperatorContext(Protocol):
    """What a refresh reads of the operator's context (``handlers.setup.Context``)."""

    @property
    def kube(self) -> KubeWriter: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def applied(self) -> AppliedCache: ...
    @property
    def statuses(self) -> StatusStore: ...
    @property
    def metrics(self) -> MetricsSource | None: ...
    @property
    def config(self) -> OperatorSettings: ...
    @property
    def law_memory(self) -> LawMemory: ...
    def lock(self, namespace: str, name: str) -> asyncio.Lock: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Reconciler:
    """The context pieces a refresh needs: the writer, settings, the applied-object and
    written-status memories, the per-service locks, the metrics source (None: no SLO
    decisions) and the clock."""

    kube: KubeWriter
    settings: Settings
    applied: AppliedCache
    statuses: StatusStore
    lock: Callable[[str, str], asyncio.Lock]
    metrics: MetricsSource | None = None
    clock: Callable[[], datetime] = _utcnow
    # Services of one pass writing at once (half of ``--workers``).
    write_concurrency: int = OperatorSettings().write_concurrency
    # The law's memory between status writes (``loop.LawMemory``); None: every move of
    # it is written.
    memory: LawMemory | None = None

    @staticmethod
    def of(ctx: OperatorContext) -> Reconciler:
        return Reconciler(ctx.kube, ctx.settings, ctx.applied, ctx.statuses, ctx.lock,
                          ctx.metrics, write_concurrency=ctx.config.write_concurrency,
                          memory=ctx.law_memory)


def _plan(r: Reconciler, body: Mapping[str, Any], snap: Snapshot, update: SLOUpdate | None,
          fleet: Fleet | None) -> tuple[Mapping[str, Any], ReconcilePlan]:
    """One service's reconcile plan (pure CPU), from the status this operator last wrote
    when the cache has not caught up yet, so concurrent triggers never report the same
    transition twice. Returns the body planned from and the plan."""
    latest = r.statuses.latest(body)
    return latest, plan_reconcile(latest, snap, r.clock(), r.settings, r.applied, update, fleet)


def _executed(r: Reconciler, latest: Mapping[str, Any], plan: ReconcilePlan) -> Outcome:
    """Make one plan's writes (blocking: run in a worker thread); counted and remembered."""
    outcome = execute(r.kube, plan, r.applied)
    METRICS.reconciles.labels(KIND, "ok").inc()
    for action in plan.actions:
        if isinstance(action, PatchStatus):
            METRICS.status_writes.labels(action.why or "other").inc()
    for ev in outcome.events:
        METRICS.events.labels(ev.type, ev.reason).inc()
        if ev.type == "Warning":
            METRICS.errors.labels(KIND, ev.reason).inc()
    r.statuses.remember(latest, outcome.status, outcome.superseded)
    return outcome


def _failed(e: BaseException) -> None:
    if isinstance(e, Exception):
        METRICS.reconciles.labels(KIND, "error").inc()
        METRICS.errors.labels(KIND, type(e).__name__).inc()


def _log_applied(key: ServiceKey, outcome: Outcome) -> None:
    if outcome.applied:
        log.info("Applied for InferenceService %s/%s: %s", key.namespace, key.name,
                 ", ".join(outcome.applied))


async def refresh(r: Reconciler, body: Mapping[str, Any], snap: Snapshot,
                  update: SLOUpdate | None = None, fleet: Fleet | None = None) -> Outcome:
    """Reconcile one service under its lock; never raises for spec or dependency problems.

    ``fleet``: the pass's free GPUs so far (None: surveyed from ``snap``); the outcome
    carries it on for the next service.
    """
    meta = body["metadata"]
    key = ServiceKey(meta["namespace"], meta["name"])
    async with r.lock(key.namespace, key.name):
        start = time.monotonic()
        try:
            # The kubernetes client is synchronous and planning is CPU: one worker thread.
            outcome = await asyncio.to_thread(
                lambda: _executed(r, *_plan(r, body, snap, update, fleet)))
        except BaseException as e:
            _failed(e)
            raise
        finally:
            METRICS.reconcile_duration.labels(KIND).observe(time.monotonic() - start)
    _log_applied(key, outcome)
    return outcome


# The status fields a decision writes (replicas, batch limit, the law's memory): another
# trigger's change of them supersedes a refresh that read the status before it.
DECIDED = ("desiredReplicas", "batchLimit", "control")


@dataclass
class PassResult:
    """What ``refresh_services`` did."""

    updates: dict[ServiceKey, SLOUpdate] = field(default_factory=dict)  # decisions made
    outcomes: dict[ServiceKey, Outcome] = field(default_factory=dict)
    writes: int = 0  # objects applied, deleted or patched
    pending: int = 0  # services failed, waiting for a retry or with an invalid spec
    superseded: int = 0  # services deleted, edited or rewritten (or their policy) meanwhile


def decision_direction(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What an applied decision did: scale_up, scale_down, batch_up, batch_down or hold."""
    before, after = old.get("desiredReplicas"), new.get("desiredReplicas")
    if isinstance(before, int) and isinstance(after, int) and after != before:
        return "scale_up" if after > before else "scale_down"
    before, after = old.get("batchLimit"), new.get("batchLimit")
    if isinstance(before, int) and isinstance(after, int) and after != before:
        return "batch_up" if after > before else "batch_down"
    return "hold"


# Services planned per worker-thread hop. Planning is CPU (about 5 ms a service at 1,000
# services, most of it copying status models: docs/scale.md), so it runs off the event
# loop; one hop per service would cost a thread hand-off each, one hop for the whole pass
# would hold every service's lock until the last is planned. 25 services is about 0.1 s
# of planning: the writes of one batch start while the next is planned.
PLAN_BATCH = 25


@dataclass
class _Planned:
    key: ServiceKey
    body: Mapping[str, Any]  # the cache's body, for the decision metric
    lock: asyncio.Lock
    latest: Mapping[str, Any] | None = None  # the body planned from
    plan: ReconcilePlan | None = None
    error: Exception | None = None
    seconds: float = 0.0
    writing: bool = False  # its writer holds its lock and a write slot

    def release(self, slots: asyncio.Semaphore) -> None:
        if self.writing:
            self.writing = False
            self.lock.release()
            slots.release()


def _plan_batch(r: Reconciler, batch: list[_Planned], snap: Snapshot,
                updates: Mapping[ServiceKey, SLOUpdate], fleet: Fleet) -> Fleet:
    """Plan ``batch`` in order, each service taking its GPUs from what the previous one
    left (blocking: run in a worker thread). Returns the fleet after the batch."""
    for p in batch:
        start = time.monotonic()
        try:
            p.latest, p.plan = _plan(r, p.body, snap, updates.get(p.key), fleet)
        except Exception as e:  # one service's failure must not stop the others
            p.error = e
        else:
            fleet = p.plan.fleet or fleet
        p.seconds = time.monotonic() - start
    return fleet


async def refresh_services(r: Reconciler, snap: Snapshot,
                           keys: Iterable[ServiceKey] | None = None,
                           decide: bool = True,
                           stale: Callable[[ServiceKey], bool] | None = None) -> PassResult:
    """Observe and decide for the services ``keys`` (None: every service in ``snap``), then
    refresh each with its update, from one snapshot and one fleet.

    Decisions need a metrics source (``r.metrics``) and ``decide``; without them the
    services are refreshed with their last decided replicas and limit. One service's
    failure is logged and counted, and the others go on.

    Services are planned in key order, in batches off the event loop (``PLAN_BATCH``),
    each taking its GPUs from what the previous one left; their writes then run side by
    side, at most ``r.write_concurrency`` services at a time. A service's lock is held
    from its planning to the end of its writes; every multi-service refresh takes the
    locks in the same (key) order, so two of them never wait on each other in a cycle.

    ``stale``: asked for each service once its lock is held (None: never): True when the
    caches now hold a newer revision of it or of its policy than ``snap`` (deleted or
    edited while the pass observed and decided); such a service is left alone by this
    pass (counted in ``superseded``), so no write goes to a deleted object and no decision
    of an edited-away policy lands after the edit's own reconcile. So is a service another
    trigger decided for meanwhile (a wake's handler during a pass; ``DECIDED``): a decision
    from the status before would undo it (a woken service sent back to zero).
    """
    # Decide from the newest status (this operator's own memory included), even when the
    # watch cache has not yet delivered what the previous reconcile wrote.
    read = snap
    snap = replace(snap, services={k: r.statuses.latest(v) for k, v in snap.services.items()})

    def rewritten(key: ServiceKey) -> bool:
        """Another trigger (a wake's handler, a policy edit) decided for the service since
        this refresh read its status: a decision from the status before would undo it. A
        refresh that only reported (pods Ready, conditions) is no reason to drop one."""
        k = (key.namespace, key.name)
        body = read.services.get(k)
        if body is None:
            return False
        now, then = r.statuses.latest(body).get("status") or {}, \
            snap.services[k].get("status") or {}
        return any(now.get(f) != then.get(f) for f in DECIDED)

    wanted = sorted({ServiceKey(*k) for k in snap.services} if keys is None else set(keys),
                    key=lambda k: (k.namespace, k.name))
    fleet = survey(snap)
    result = PassResult()
    if decide and r.metrics is not None and wanted:
        try:
            result.updates = await observe_and_decide(
                r.metrics, snap, r.clock(), r.settings,
                only=None if keys is None else set(wanted), fleet=fleet, memory=r.memory)
        except Exception:  # a bug in one pass's decisions must not stop reconciling
            log.exception("Failed the SLO decisions of a pass; services hold")
    present = [_Planned(k, svc, r.lock(k.namespace, k.name)) for k in wanted
               if (svc := snap.services.get((k.namespace, k.name))) is not None]
    slots = asyncio.Semaphore(r.write_concurrency)
    writers: list[asyncio.Task[None]] = []
    held: list[_Planned] = []  # locked, not yet handed to a writer
    try:
        for i in range(0, len(present), PLAN_BATCH):
            batch = present[i:i + PLAN_BATCH]
            for p in batch:
                await p.lock.acquire()
                held.append(p)
            for p in [p for p in batch
                      if rewritten(p.key) or (stale is not None and stale(p.key))]:
                batch.remove(p)
                held.remove(p)
                p.lock.release()
                result.superseded += 1
            fleet = await asyncio.to_thread(_plan_batch, r, batch, snap, result.updates,
                                            fleet)
            for p in batch:
                if p.plan is None:
                    held.remove(p)
                    p.lock.release()
                    _service_failed(result, p, p.error)
                    continue
                await slots.acquire()
                held.remove(p)
                p.writing = True
                writers.append(asyncio.create_task(_write(r, p, slots, result)))
        outcomes = await asyncio.gather(*writers, return_exceptions=True)
    except BaseException:
        for t in writers:
            t.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
        for p in present:  # a writer cancelled before it started never ran its finally
            p.release(slots)
        raise
    finally:
        for p in held:
            p.lock.release()
    for o in outcomes:
        if isinstance(o, BaseException) and not isinstance(o, Exception):
            raise o  # a stop (the gated writer's pause), not one service's failure
    return result


def _service_failed(result: PassResult, p: _Planned, e: BaseException | None) -> None:
    _failed(e or RuntimeError("no plan"))
    result.pending += 1
    if e is not None and transient(e):
        # Throttled, a conflict, the API server failing or gone: the next pass retries.
        log.warning("Failed to reconcile InferenceService %s/%s for now (retried next "
                    "pass): %s", p.key.namespace, p.key.name, failure_summary(e))
        return
    if e is not None and from_api(e):  # the API server's verdict: no traceback to add
        log.error("Failed to reconcile InferenceService %s/%s (retried next pass): %s",
                  p.key.namespace, p.key.name, failure_summary(e))
        return
    log.error("Failed to reconcile InferenceService %s/%s", p.key.namespace, p.key.name,
              exc_info=e)


async def _write(r: Reconciler, p: _Planned, slots: asyncio.Semaphore,
                 result: PassResult) -> None:
    """Make one planned service's writes in a worker thread, then release its lock and
    its slot; its failure is counted, not raised (a stop is raised)."""
    assert p.plan is not None and p.latest is not None
    start = time.monotonic()
    try:
        outcome = await asyncio.to_thread(_executed, r, p.latest, p.plan)
    except Exception as e:
        _service_failed(result, p, e)
        return
    except BaseException as e:
        _failed(e)
        raise
    finally:
        METRICS.reconcile_duration.labels(KIND).observe(time.monotonic() - start + p.seconds)
        p.release(slots)
    _log_applied(p.key, outcome)
    result.outcomes[p.key] = outcome
    result.writes += len(outcome.applied)
    result.pending += bool(outcome.retry_after or outcome.permanent_error)
    update = result.updates.get(p.key)
    if update is not None:
        direction = decision_direction(p.body.get("status") or {}, outcome.status)
        METRICS.decisions.labels(direction, update.reason).inc()


class OwnerRefresher:
    """Refreshes of services whose owned objects changed, run in batches by one background
    task: ``ask`` returns at once, and every service asked for while a batch runs is
    refreshed in the next one (one snapshot, one survey of the fleet, plans in batches,
    writes side by side: ``refresh_services``).

    Returning at once matters: kopf handles one object's events one after the other and
    updates its index entry only when it reaches an event, so a handler that waited for
    its refresh kept that pod's cache entry old meanwhile, and every refresh from it
    patched the pod's live limit again (docs/scale.md). Batching matters too: a cold start
    of 1,000 services sends a pod or Deployment event every few milliseconds, and one by
    one each built its own snapshot and survey of every service.
    """

    def __init__(self) -> None:
        self._asked: set[ServiceKey] = set()
        self._task: asyncio.Task[None] | None = None

    def ask(self, key: ServiceKey,
            run: Callable[[list[ServiceKey]], Awaitable[object]]) -> None:
        """Have ``key`` refreshed soon, by ``run`` (called with a batch of keys)."""
        self._asked.add(key)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(run))

    async def idle(self) -> None:
        """Return once no batch runs and none is waiting."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _drain(self, run: Callable[[list[ServiceKey]], Awaitable[object]]) -> None:
        while self._asked:
            batch = sorted(self._asked, key=lambda k: (k.namespace, k.name))
            self._asked.clear()
            try:
                await run(batch)
            except Exception:  # one failed batch must not stop the next
                log.exception("Failed to refresh %d services after their objects changed",
                              len(batch))


async def policy_changed(r: Reconciler, body: Mapping[str, Any], snap: Snapshot,
                         decide: bool = True) -> PassResult:
    """An SLOPolicy was created, resumed or its spec edited: validate it and record its
    bound services, then observe -> decide -> apply for those services right away (the
    same path as the periodic pass, restricted to them), so a new objective or bound acts
    now. ``decide=False`` only refreshes them (an operator restart resumes every policy;
    the periodic pass decides soon enough)."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    # The cache may not hold this very revision yet: the handler's body is the newest.
    snap = replace(snap, policies={**snap.policies, (namespace, name): dict(body)})
    bound = await reconcile_policy(r.kube, body, r.clock(), snap.services.values(),
                                   Tenancy.of(snap, r.settings.require_tenants))
    keys = [ServiceKey(namespace, svc["metadata"]["name"]) for svc in bound]
    return await refresh_services(r, snap, keys, decide=decide)


async def policy_removed(r: Reconciler, namespace: str, name: str,
                         snap: Snapshot) -> PassResult:
    """Services bound to a deleted policy keep running and say that their policy is gone."""
    snap = replace(snap, policies={k: v for k, v in snap.policies.items()
                                   if k != (namespace, name)})
    keys = [ServiceKey(namespace, svc["metadata"]["name"])
            for svc in bound_to(namespace, name, snap.services.values())]
    return await refresh_services(r, snap, keys, decide=False)
