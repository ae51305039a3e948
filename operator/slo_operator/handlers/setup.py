"""Operator-wide kopf settings and the shared context handlers read from memo."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import platform
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from slo_operator.adapters.kube import (
    Kube,
    failure_summary,
    from_api,
    load_api_client,
    retry_after,
    transient,
)
from slo_operator.adapters.prometheus import MetricsSource, PrometheusAdapter, redact_url
from slo_operator.api.models import GROUP
from slo_operator.api.observe import ServiceKey
from slo_operator.engine.profiles import load_profiles
from slo_operator.monitoring.operator_metrics import METRICS, PEERING, PeeringState
from slo_operator.reconcile.loop import LawMemory
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.refresh import OwnerRefresher, Reconciler
from slo_operator.reconcile.service import Settings
from slo_operator.render.objects import instance_name, service_name
from slo_operator.settings import OperatorSettings, operator_version
from slo_operator.slo.promql import QUERY_NAMES
from slo_operator.slo.signals import digest


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


# Writes in a row that the watch cache may not have delivered yet (each pass writes a
# service's status at most once; the cache is a few writes behind at most).
OLDER_STATUSES_KEPT = 8
# The status field kopf keeps its progress and diff-base in (``configure``).
KOPF_STATUS_FIELD = "kopf"


@dataclass
class StatusMemory:
    """The status this operator last wrote per service, with the statuses the watch cache
    may still serve from before it. While the cache serves one of those, the written
    status is the newer truth, also in a newer revision of the object: another writer's
    change (the activator's wake annotation, a user's label) can reach the cache before
    this operator's status write does, and deciding from the older status then would undo
    the write (a woken service sent back to zero). Once the cache serves any other status
    it has the write (this operator is its status's only writer, kopf's own field aside),
    and the cache wins.

    kopf's bookkeeping (``status.kopf``) is left out of every comparison: kopf writes it
    on its own schedule (a handler's retry, say), and a cache status that differs from a
    remembered one only there is still that status."""

    # (namespace, name) -> (statuses older than the write, the status written)
    written: dict[tuple[str, str], tuple[tuple[dict[str, Any], ...], dict[str, Any]]] = \
        field(default_factory=dict)

    def latest(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = body["metadata"]
        seen = self.written.get((meta["namespace"], meta["name"]))
        if seen is None or _ours(body.get("status")) not in seen[0]:
            return body
        return {**body, "status": seen[1]}

    def remember(self, body: Mapping[str, Any], status: dict[str, Any],
                 between: Sequence[Mapping[str, Any]] = ()) -> None:
        """``status`` was written over ``body``'s (the cache's, or what :meth:`latest`
        put in its place), after ``between``: the statuses the same reconcile wrote first
        (the decision, written before an apply the API server then refused), which the
        cache may serve too. A write over the previous write keeps that one's older
        statuses: the cache may still serve any of them, then the previous write, then
        this one."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        old = _ours(body.get("status"))
        passed = tuple(_ours(s) for s in between)
        if not status or (status == old and not passed):
            return
        seen = self.written.get(key)
        older = (*seen[0], old) if seen is not None and old == seen[1] else (old,)
        older = (*older, *passed)
        self.written[key] = (older[-OLDER_STATUSES_KEPT:], status)


def _ours(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """A status without kopf's bookkeeping field."""
    return {k: v for k, v in (status or {}).items() if k != KOPF_STATUS_FIELD}


class PeeringGate:
    """Whether kopf lets this replica act, for the work kopf does not drive itself (the
    periodic pass): ``acting`` is set while it may act, ``paused`` while a peer of higher
    priority acts, and ``resumes`` counts kopf's resumes (each one means caches to re-read).

    kopf pauses its own watches and daemons through a toggle it hands to no handler
    (``operator_paused``, kopf/_core/reactor/running.py:198, passed only to its internal
    tasks such as ``daemon_killer``, kopf/_core/engines/daemons.py:287); its daemons and
    timers are per object, with finalizers. So the gate follows the pause and resume lines
    kopf's peering engine logs as it turns that toggle (``monitoring.operator_metrics``,
    ``PeeringState``), in the same event-loop step.
    """

    def __init__(self, acting: bool = True) -> None:
        self.acting = asyncio.Event()
        self.paused = asyncio.Event()
        self.resumes = 0
        (self.acting if acting else self.paused).set()

    def is_acting(self) -> bool:
        """Read synchronously, also from the worker threads that send the pass's writes."""
        return self.acting.is_set()

    def turn(self, acting: bool) -> None:
        if acting == self.is_acting():
            return
        if acting:
            self.resumes += 1
            self.paused.clear()
            self.acting.set()
        else:
            self.acting.clear()
            self.paused.set()

    def follow(self, state: PeeringState) -> Callable[[], None]:
        """Take ``state``'s value now and every change after; returns the unsubscribe
        function. Must be called on the event loop the gate is awaited on."""
        loop = asyncio.get_running_loop()

        def changed(active: bool) -> None:
            try:
                here = asyncio.get_running_loop()
            except RuntimeError:
                here = None
            if here is loop:
                self.turn(active)
            else:  # kopf logs peering on its loop; anything else is handed over to it
                loop.call_soon_threadsafe(self.turn, active)

        self.turn(state.active)
        return state.subscribe(changed)


@dataclass
class Context:
    kube: Kube
    settings: Settings
    config: OperatorSettings = field(default_factory=OperatorSettings)
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    applied: AppliedCache = field(default_factory=AppliedCache)
    statuses: StatusMemory = field(default_factory=StatusMemory)
    # The SLO law's memory between status writes (status carries it at the heartbeat).
    law_memory: LawMemory = field(default_factory=LawMemory)
    # Set once kopf has called a resource handler, i.e. once the indexes are filled.
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # The SLO loop's signals; None without SLO_PROMETHEUS_URL (status then says
    # AwaitingMetrics and replicas stay at what was last decided).
    metrics: MetricsSource | None = None
    # Whether kopf lets this replica act (peering); always acting when standalone.
    gate: PeeringGate = field(default_factory=PeeringGate)
    # Owned-object events' refreshes, run in batches.
    owners: OwnerRefresher = field(default_factory=OwnerRefresher)
    # Creations, resumes and spec changes being refreshed at once (``--workers``: one
    # thread each).
    creating: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(OperatorSettings().workers))

    def reconciler(self) -> Reconciler:
        return Reconciler.of(self)

    def forget_writes(self) -> None:
        """Drop what this replica remembers having written (applied objects, statuses):
        while it was paused or stalled a peer may have acted, so the objects need not be
        as it left them. Refusals keep their back-off: they were the API server's."""
        self.applied.entries.clear()
        self.statuses.written.clear()
        self.law_memory.clear()

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        # Timers, watch events and change handlers may fire together for one object.
        return self.locks.setdefault((namespace, name), asyncio.Lock())

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is remembered of a deleted service."""
        self.locks.pop((namespace, name), None)
        self.statuses.written.pop((namespace, name), None)
        self.law_memory.forget(ServiceKey(namespace, name))
        for kind, obj in (("Deployment", instance_name(name)), ("Service", service_name(name)),
                          ("PodDisruptionBudget", instance_name(name))):
            self.applied.forget(kind, namespace, obj)
        self.applied.forget_prefix("Deployment", namespace, f"{instance_name(name)}-")


# glibc malloc arenas the process may use. glibc gives threads arenas of their own, up to
# 8 per core (mallopt(3), M_ARENA_MAX), and keeps what is freed in each: the worker and
# PromQL threads decode replies of megabytes at 1,000 services (the PromQL answers every
# pass), and each thread's arena kept its peak. Two arenas hold the operator's
# threads (mostly waiting on sockets; the GIL lets one run Python at a time) with little
# contention. The environment's MALLOC_ARENA_MAX, where set, wins.
MALLOC_ARENAS = 2
M_ARENA_MAX = -8  # glibc malloc.h


def cap_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for the threads started from now on; False where the C
    library is not glibc or the environment sets MALLOC_ARENA_MAX."""
    if os.environ.get("MALLOC_ARENA_MAX") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False


def release_freed_memory() -> bool:
    """Hand the memory glibc's malloc holds free back to the system (``malloc_trim(0)``).

    A pass over 1,000 services builds every plan and update at once and frees them at its
    end; the allocator keeps those pages for reuse, so the RSS settles at a pass's peak
    (400 MB at N = 1,000 in docs/scale.md before this) although the live objects take
    about half of it. Called after each periodic pass: a few milliseconds. False where
    the C library is not glibc."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False


# Seconds before a handler refused by the API server for good (403, 404, 422) runs again:
# kopf's own default back-off for an arbitrary error.
API_VERDICT_RETRY_S = 60.0


@contextlib.contextmanager
def retried_when_transient(what: str) -> Iterator[None]:
    """Turn the API server's refusal in a handler into kopf's temporary error: one log line
    instead of a traceback. A refusal of the moment (``adapters.kube.transient``: 409, 429,
    5xx, no answer) is retried after the server's Retry-After (else 5 s), any other answer
    after a minute; an exception that is no answer of the API server (a bug) goes on as
    it is."""
    try:
        yield
    except (kopf.TemporaryError, kopf.PermanentError):
        raise
    except Exception as e:
        if transient(e):
            raise kopf.TemporaryError(f"{what}: {failure_summary(e)}",
                                      delay=retry_after(e)) from e
        if from_api(e):  # a verdict (403, 404, 422): retried at kopf's pace, one line
            raise kopf.TemporaryError(f"{what}: {failure_summary(e)}",
                                      delay=API_VERDICT_RETRY_S) from e
        raise


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
    settings.persistence.progress_storage = kopf.StatusProgressStorage(
        field=f"status.{KOPF_STATUS_FIELD}")
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(
        name=KOPF_STATUS_FIELD)
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # The resources are known up front; scanning CRDs would need cluster-wide read access
    # to CustomResourceDefinitions, which the least-privilege role does not grant.
    settings.scanning.disabled = True
    config: OperatorSettings = getattr(memo, "config", None) or OperatorSettings()
    settings.execution.max_workers = config.workers
    # Every Kubernetes call goes through asyncio.to_thread, i.e. the loop's default executor
    # (min(32, cores + 4) threads otherwise: 6 on 2 cores, flooded by a cold start's events
    # at 1,000 services, docs/scale.md). --workers sizes it too. The PromQL queries have a
    # pool of their own (adapters.prometheus), so no burst of events delays them.
    cap_malloc_arenas()
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="slo-io"))
    # kopf runs one worker task per watched object with events queued; an idle one exits
    # after settings.queueing.idle_timeout (5 s by default, kopf/_cogs/configs/
    # configuration.py, QueueingSettings). Each holds its object's last body, and a cold
    # start of 1,000 services touches 3,000 objects (services, Deployments, pods) within
    # seconds: 1 s lets them go sooner. A pod's events seldom come more than 1 s apart
    # (scheduled, started, ready), and a worker that left is recreated on the next one.
    settings.queueing.idle_timeout = 1.0
    # kopf logs every handler call's success at INFO on "kopf.objects": at 1,000 services
    # that is a line per pod and Deployment event (thousands a minute in a cold start),
    # formatted and written by the event loop. Failures and retries are WARNING and above
    # and still show; --verbose (DEBUG) keeps everything.
    objects = logging.getLogger("kopf.objects")
    if not objects.isEnabledFor(logging.DEBUG):
        objects.setLevel(logging.WARNING)
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
                                   on_query=_record_query, threads=len(QUERY_NAMES),
                                   digest=digest)
                 if config.prometheus_url else None),
        settings=Settings(runtime_image=config.image, profiles=profiles,
                          pass_interval=config.interval,
                          require_tenants=config.require_tenants,
                          activator=config.activator,
                          # Optional CRDs (InferencePool) from API discovery, cached.
                          discovery=Kube(api)),
        creating=asyncio.Semaphore(config.workers),
    )
    # Standalone, PEERING stays active; with peering it starts paused (kopf does too,
    # until it has read the peering object) and follows kopf's pause and resume.
    memo.slo_unfollow = memo.slo.gate.follow(PEERING)


@kopf.on.cleanup()
async def unfollow(memo: kopf.Memo, **_: Any) -> None:
    stop: Callable[[], None] | None = getattr(memo, "slo_unfollow", None)
    if stop is not None:
        stop()
    ctx: Context | None = getattr(memo, "slo", None)
    if ctx is not None:
        ctx.owners.stop()
