"""Refresh services from the caches: the per-service step every handler and the pass share.

Below the handlers, so that the InferenceService, SLOPolicy and periodic handlers call
the same code without importing one another. The pieces of the operator's context it
needs come in as a :class:`Reconciler` (``Reconciler.of(ctx)`` picks them from the kopf
memo's context).

``refresh`` reconciles one service under its lock; ``refresh_services`` runs observe ->
decide (``loop.observe_and_decide``) for a set of services, then refreshes each with its
update, threading the pass's free GPUs (:class:`Fleet`) from one service to the next.
``policy_changed`` and ``policy_removed`` are the SLOPolicy handlers' steps: an edited
policy's bound services get a decision at once, not a period later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from slo_operator.adapters.prometheus import MetricsSource
from slo_operator.api.cluster import Snapshot
from slo_operator.api.observe import ServiceKey
from slo_operator.monitoring.operator_metrics import METRICS
from slo_operator.reconcile.executor import Outcome
from slo_operator.reconcile.gpu_inventory import Fleet, survey
from slo_operator.reconcile.loop import observe_and_decide
from slo_operator.reconcile.planner import Settings
from slo_operator.reconcile.policy_binding import bound_to, reconcile_policy
from slo_operator.reconcile.ports import AppliedCache, KubeWriter
from slo_operator.reconcile.service import reconcile_service
from slo_operator.reconcile.status import SLOUpdate

log = logging.getLogger(__name__)
KIND = "InferenceService"


class StatusStore(Protocol):
    """The status this operator last wrote per service (``handlers.setup.StatusMemory``)."""

    def latest(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """``body`` with the status last written, while the cache still serves its revision."""

    def remember(self, body: Mapping[str, Any], status: dict[str, Any]) -> None:
        """``status`` was computed from ``body``."""


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
    def lock(self, namespace: str, name: str) -> AbstractAsyncContextManager[Any]: ...


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
    lock: Callable[[str, str], AbstractAsyncContextManager[Any]]
    metrics: MetricsSource | None = None
    clock: Callable[[], datetime] = _utcnow

    @staticmethod
    def of(ctx: OperatorContext) -> Reconciler:
        return Reconciler(ctx.kube, ctx.settings, ctx.applied, ctx.statuses, ctx.lock,
                          ctx.metrics)


async def refresh(r: Reconciler, body: Mapping[str, Any], snap: Snapshot,
                  update: SLOUpdate | None = None, fleet: Fleet | None = None) -> Outcome:
    """Reconcile one service under its lock; never raises for spec or dependency problems.

    ``fleet``: the pass's free GPUs so far (None: surveyed from ``snap``); the outcome
    carries it on for the next service.
    """
    meta = body["metadata"]
    async with r.lock(meta["namespace"], meta["name"]):
        # Start from the status this operator last wrote when the cache has not caught up
        # yet, so concurrent triggers never report the same transition twice.
        latest = r.statuses.latest(body)
        start = time.monotonic()
        try:
            outcome = await reconcile_service(r.kube, latest, snap, r.clock(), r.settings,
                                              r.applied, update, fleet)
        except Exception as e:
            METRICS.reconciles.labels(KIND, "error").inc()
            METRICS.errors.labels(KIND, type(e).__name__).inc()
            raise
        finally:
            METRICS.reconcile_duration.labels(KIND).observe(time.monotonic() - start)
        METRICS.reconciles.labels(KIND, "ok").inc()
        for ev in outcome.events:
            if ev.type == "Warning":
                METRICS.errors.labels(KIND, ev.reason).inc()
        r.statuses.remember(latest, outcome.status)
    if outcome.applied:
        log.info("Applied for InferenceService %s/%s: %s", meta["namespace"], meta["name"],
                 ", ".join(outcome.applied))
    return outcome


@dataclass
class PassResult:
    """What ``refresh_services`` did."""

    updates: dict[ServiceKey, SLOUpdate] = field(default_factory=dict)  # decisions made
    outcomes: dict[ServiceKey, Outcome] = field(default_factory=dict)
    writes: int = 0  # objects applied, deleted or patched
    pending: int = 0  # services failed, waiting for a retry or with an invalid spec


def decision_direction(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What an applied decision did: scale_up, scale_down, batch_up, batch_down or hold."""
    before, after = old.get("desiredReplicas"), new.get("desiredReplicas")
    if isinstance(before, int) and isinstance(after, int) and after != before:
        return "scale_up" if after > before else "scale_down"
    before, after = old.get("batchLimit"), new.get("batchLimit")
    if isinstance(before, int) and isinstance(after, int) and after != before:
        return "batch_up" if after > before else "batch_down"
    return "hold"


async def refresh_services(r: Reconciler, snap: Snapshot,
                           keys: Iterable[ServiceKey] | None = None,
                           decide: bool = True) -> PassResult:
    """Observe and decide for the services ``keys`` (None: every service in ``snap``), then
    refresh each with its update, from one snapshot and one fleet.

    Decisions need a metrics source (``r.metrics``) and ``decide``; without them the
    services are refreshed with their last decided replicas and limit. One service's
    failure is logged and counted, and the others go on.
    """
    # Decide from the newest status (this operator's own memory included), even when the
    # watch cache has not yet delivered what the previous reconcile wrote.
    snap = replace(snap, services={k: r.statuses.latest(v) for k, v in snap.services.items()})
    wanted = [ServiceKey(*k) for k in snap.services] if keys is None else list(keys)
    fleet = survey(snap)
    result = PassResult()
    if decide and r.metrics is not None and wanted:
        try:
            result.updates = await observe_and_decide(
                r.metrics, snap, r.clock(), r.settings,
                only=None if keys is None else set(wanted), fleet=fleet)
        except Exception:  # a bug in one pass's decisions must not stop reconciling
            log.exception("Failed the SLO decisions of a pass; services hold")
    for key in wanted:
        svc = snap.services.get((key.namespace, key.name))
        if svc is None:
            continue  # deleted since
        update = result.updates.get(key)
        try:
            outcome = await refresh(r, svc, snap, update, fleet)
        except Exception:  # one service's failure must not stop the others
            result.pending += 1
            log.exception("Failed to reconcile InferenceService %s/%s",
                          key.namespace, key.name)
            continue
        fleet = outcome.fleet or fleet
        result.outcomes[key] = outcome
        result.writes += len(outcome.applied)
        result.pending += bool(outcome.retry_after or outcome.permanent_error)
        if update is not None:
            direction = decision_direction(svc.get("status") or {}, outcome.status)
            METRICS.decisions.labels(direction, update.reason).inc()
    return result


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
    bound = await reconcile_policy(r.kube, body, r.clock(), snap.services.values())
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
