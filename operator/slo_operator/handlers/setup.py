"""Operator-wide kopf settings and the shared context handlers read from memo."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from slo_operator.adapters.kube import Kube, load_api_client
from slo_operator.adapters.prometheus import MetricsSource, PrometheusAdapter
from slo_operator.api.models import GROUP
from slo_operator.engine.profiles import load_profiles
from slo_operator.monitoring.operator_metrics import METRICS
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.service import Settings
from slo_operator.render.objects import instance_name, service_name


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw.strip() else default
    except ValueError:
        raise kopf.PermanentError(f"{name}={raw!r} is not a number") from None
    if value <= 0:
        raise kopf.PermanentError(f"{name}={raw!r} must be positive")
    return value


@dataclass(frozen=True)
class LoopSettings:
    """The periodic SLO pass, from the environment (``slo-operator run`` sets it too).

    SLO_RECONCILE_INTERVAL: seconds between passes (default 20).
    SLO_PROMETHEUS_URL: Prometheus base URL; unset means no SLO signals are read.
    SLO_PROMETHEUS_TIMEOUT: seconds per PromQL query (default 10).
    SLO_APPLY_TTL: seconds after which unchanged objects are applied again (default 600).
    """

    interval: float = 20.0
    prometheus_url: str | None = None
    prometheus_timeout: float = 10.0
    apply_ttl: float = 600.0

    @classmethod
    def from_env(cls) -> LoopSettings:
        return cls(
            interval=_env_float("SLO_RECONCILE_INTERVAL", cls.interval),
            prometheus_url=os.environ.get("SLO_PROMETHEUS_URL") or None,
            prometheus_timeout=_env_float("SLO_PROMETHEUS_TIMEOUT", cls.prometheus_timeout),
            apply_ttl=_env_float("SLO_APPLY_TTL", cls.apply_ttl),
        )


@dataclass
class StatusMemory:
    """The status this operator last wrote per service, with the resourceVersion of the
    body it started from: while the watch cache still serves that revision, the written
    status is the newer truth."""

    written: dict[tuple[str, str], tuple[str, dict[str, Any]]] = field(default_factory=dict)

    def latest(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = body["metadata"]
        seen = self.written.get((meta["namespace"], meta["name"]))
        if seen is None or seen[0] != meta.get("resourceVersion"):
            return body
        return {**body, "status": seen[1]}

    def remember(self, body: Mapping[str, Any], status: dict[str, Any]) -> None:
        meta = body["metadata"]
        if status and status != (body.get("status") or {}):
            self.written[(meta["namespace"], meta["name"])] = (
                str(meta.get("resourceVersion")), status)


@dataclass
class Context:
    kube: Kube
    settings: Settings
    loop: LoopSettings = field(default_factory=lambda: LoopSettings())
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    applied: AppliedCache = field(default_factory=AppliedCache)
    statuses: StatusMemory = field(default_factory=StatusMemory)
    # Set once kopf has called a resource handler, i.e. once the indexes are filled.
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # The SLO loop's signals; None without SLO_PROMETHEUS_URL (status then says
    # AwaitingMetrics and replicas stay at what was last decided).
    metrics: MetricsSource | None = None

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        # Timers, watch events and change handlers may fire together for one object.
        return self.locks.setdefault((namespace, name), asyncio.Lock())

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is remembered of a deleted service."""
        self.locks.pop((namespace, name), None)
        self.statuses.written.pop((namespace, name), None)
        for kind, obj in (("Deployment", instance_name(name)), ("Service", service_name(name)),
                          ("PodDisruptionBudget", instance_name(name))):
            self.applied.forget(kind, namespace, obj)
        self.applied.forget_prefix("Deployment", namespace, f"{instance_name(name)}-")


def context(memo: Any) -> Context:
    ctx: Context = memo.slo
    return ctx


def _record_query(signal: str, seconds: float, ok: bool) -> None:
    METRICS.query_duration.labels(signal).observe(seconds)
    if not ok:
        METRICS.query_errors.labels(signal).inc()


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Kopf's bookkeeping lives in status, not annotations, so the objects users keep
    # in Git are never touched by the operator (no drift in Argo CD).
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf")
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(name="kopf")
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # The resources are known up front; scanning CRDs would need cluster-wide read access
    # to CustomResourceDefinitions, which the least-privilege role does not grant.
    settings.scanning.disabled = True
    settings.execution.max_workers = int(os.environ.get("SLO_WORKERS", "8"))
    api = load_api_client(os.environ.get("SLO_KUBECONFIG") or None)
    extra = os.environ.get("SLO_PROFILES_DIR")
    profiles = load_profiles() + (load_profiles(Path(extra)) if extra else ())
    logging.getLogger(__name__).info(
        "Started with Prometheus %s, pass interval %gs",
        os.environ.get("SLO_PROMETHEUS_URL") or "(none: no SLO signals)",
        LoopSettings.from_env().interval,
    )
    logging.getLogger(__name__).info(
        "Loaded %d node profiles: %s", len(profiles), ", ".join(p.source for p in profiles)
    )
    loop = LoopSettings.from_env()
    memo.slo = Context(
        kube=Kube(api),
        loop=loop,
        applied=AppliedCache(ttl=loop.apply_ttl),
        metrics=(PrometheusAdapter(loop.prometheus_url, loop.prometheus_timeout,
                                   on_query=_record_query)
                 if loop.prometheus_url else None),
        settings=Settings(
            runtime_image=os.environ.get("SLO_RUNTIME_IMAGE", Settings().runtime_image),
            profiles=profiles,
        ),
    )
