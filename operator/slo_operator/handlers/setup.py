"""Operator-wide kopf settings and the shared context handlers read from memo."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import kopf

from slo_operator.adapters.kube import Kube, load_api_client
from slo_operator.adapters.prometheus import MetricsSource, PrometheusAdapter
from slo_operator.api.models import GROUP
from slo_operator.engine.profiles import load_profiles
from slo_operator.monitoring.operator_metrics import METRICS
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.service import Settings
from slo_operator.render.objects import instance_name, service_name
from slo_operator.settings import OperatorSettings, operator_version


def register_login(config: OperatorSettings) -> None:
    """With ``--kubeconfig``, log kopf in from that file (the same one the kubernetes client
    reads for the writes), instead of from the environment's default kubeconfig."""
    if not config.kubeconfig:
        return
    path = config.kubeconfig

    @kopf.on.login()
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(load_api_client(path).configuration)


def connection_info(cfg: Any) -> kopf.ConnectionInfo:
    """kopf's connection from a kubernetes client ``Configuration``."""
    keys = cfg.api_key or {}
    token = str(keys.get("BearerToken") or keys.get("authorization") or "")
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
        token=token.removeprefix("Bearer ").strip() or None,
        username=cfg.username or None,
        password=cfg.password or None,
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
    config: OperatorSettings = field(default_factory=OperatorSettings)
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    applied: AppliedCache = field(default_factory=AppliedCache)
    statuses: StatusMemory = field(default_factory=StatusMemory)
    # Set once kopf has called a resource handler, i.e. once the indexes are filled.
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # The SLO loop's signals; None without SLO_PROMETHEUS_URL (status then says
    # AwaitingMetrics and replicas stay at what was last decided).
    metrics: MetricsSource | None = None

    @property
    def loop(self) -> OperatorSettings:
        """The SLO pass's settings (interval, Prometheus), part of :attr:`config`."""
        return self.config

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
    config: OperatorSettings = getattr(memo, "config", None) or OperatorSettings()
    settings.execution.max_workers = config.workers
    api = load_api_client(config.kubeconfig)
    profiles = load_profiles() + (load_profiles(Path(config.profiles_dir))
                                  if config.profiles_dir else ())
    log = logging.getLogger(__name__)
    log.info("Started slo-operator %s with Prometheus %s, pass interval %gs",
             operator_version(), redact_url(config.prometheus_url) or "(none: no SLO signals)",
             config.interval)
    log.info("Loaded %d node profiles: %s", len(profiles),
             ", ".join(p.source for p in profiles))
    memo.slo = Context(
        kube=Kube(api),
        config=config,
        applied=AppliedCache(ttl=config.apply_ttl),
        metrics=(PrometheusAdapter(config.prometheus_url, config.prometheus_timeout,
                                   on_query=_record_query)
                 if config.prometheus_url else None),
        settings=Settings(runtime_image=config.image, profiles=profiles),
    )


def redact_url(url: str | None) -> str | None:
    """``url`` without a password (user:password@host -> user:***@host) for logs."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
