"""Admission gateway: an asyncio reverse proxy in front of vLLM in the same pod.

- A live in-flight limit, read from a file (the downward-API projection of the pod
  annotation ``inference.slo-operator.io/inflight-limit``) and applied without restart
  (``slo_runtime.limitwatch``).
- Per-tenant queues served by weighted fair queuing (stride scheduling,
  ``slo_runtime.admission``); the tenant comes from a header or from the API key.
- Responses, streaming ones included, are passed through byte for byte; a client that
  goes away cancels its upstream request; a slow reader only slows itself.
- Its own TTFT / end-to-end / queue-wait histograms, arrival / answer / refusal counters
  and queue gauges on ``/metrics``, and what the launcher found and started in the pod
  (the probe's GPUs, ``slo_runtime_engine_info`` and ``slo_runtime_engine_change`` from
  its engine-info file).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

from slo_runtime import contract
from slo_runtime.admission import DEFAULT_MAX_QUEUE, FairAdmission, QueueFull
from slo_runtime.limitwatch import parse_limit, watch_limit_file
from slo_runtime.proxy import (
    CLIENT_GONE,
    DEFAULT_MAX_BODY_BYTES,
    UPSTREAM_ERRORS,
    error_response,
    new_session,
    respond,
    send_upstream,
)
from slo_runtime.proxy import start_site as start_site  # re-exported for existing callers

log = logging.getLogger("slo_runtime.gateway")

# --- the endpoint picker's view --------------------------------------------------------------
# A Gateway API Inference Extension endpoint picker (EPP) scrapes one path per pod and reads
# vLLM's names from it; the queue it reads (vllm:num_requests_waiting by default) misses
# the requests this gateway holds above the live limit. PICKER_METRICS_PATH serves vLLM's
# /metrics with PICKER_QUEUE_METRIC appended: vLLM's waiting requests plus the gateway's
# held ones. The EPP is pointed at both with --model-server-metrics-path and
# --total-queued-requests-metric (docs/gateway.md); Prometheus keeps scraping /metrics.
PICKER_METRICS_PATH = "/picker/metrics"
PICKER_QUEUE_METRIC = "slo_gateway_total_queued_requests"


# --- configuration -----------------------------------------------------------------------
class TenantSpec(BaseModel):
    weight: float = Field(1.0, gt=0)
    api_keys: list[str] = Field(default_factory=list)


class TenantsConfig(BaseModel):
    """The tenants file (YAML or JSON), see docs/runtime.md."""

    tenants: dict[str, TenantSpec] = Field(default_factory=dict)
    # What happens to a request whose tenant is not listed (or has none):
    # "default" serves it as ``default_tenant``; "reject" answers 403.
    unknown_tenant: Literal["default", "reject"] = "default"
    default_tenant: str = "default"

    @classmethod
    def load(cls, path: str | None) -> TenantsConfig:
        if not path:
            return cls()
        return cls.model_validate(yaml.safe_load(Path(path).read_text()) or {})


@dataclass
class GatewayConfig:
    upstream: str = f"http://{contract.VLLM_HOST}:{contract.VLLM_PORT}"
    default_limit: int = 256
    limit_file: str | None = None
    poll_interval_s: float = 0.5
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    tenant_header: str = "X-Tenant"
    tenants: TenantsConfig = field(default_factory=TenantsConfig)
    max_queue_per_tenant: int = DEFAULT_MAX_QUEUE
    queue_timeout_s: float = 300.0
    probe_file: str | None = None
    # The launcher's engine-info file; by default next to the probe file
    # (contract.engine_info_path), where the launcher writes it.
    engine_info_file: str | None = None


# --- metrics -----------------------------------------------------------------------------------
class _AdmissionCollector:
    """Queue depth, in-flight count and limit, read from the admission state at scrape
    time: nothing to update on the request path."""

    def __init__(self, admission: FairAdmission):
        self.admission = admission

    def collect(self) -> Iterator[GaugeMetricFamily]:
        a = self.admission
        depth = GaugeMetricFamily(contract.GATEWAY_QUEUE_DEPTH, "Requests waiting, per tenant.",
                                  labels=["tenant"])
        for name in sorted(a.tenants):
            depth.add_metric([name], a.queued(name))
        yield depth
        yield GaugeMetricFamily(contract.GATEWAY_INFLIGHT, "Requests admitted and not finished.",
                                value=a.in_flight)
        yield GaugeMetricFamily(contract.GATEWAY_INFLIGHT_LIMIT, "The live in-flight limit.",
                                value=a.limit)


class GatewayMetrics:
    def __init__(self, admission: FairAdmission) -> None:
        self.registry = reg = CollectorRegistry()
        self.requests = Counter(contract.GATEWAY_REQUESTS, "Requests answered, by HTTP status.",
                                ["tenant", "code"], registry=reg)
        self.rejections = Counter(contract.GATEWAY_REJECTIONS, "Requests refused, by reason.",
                                  ["tenant", "reason"], registry=reg)
        self.cancelled = Counter(contract.GATEWAY_CANCELLED, "Requests whose client went away.",
                                 ["tenant"], registry=reg)
        # Demand as it arrives: every inference request, counted before it is read,
        # admitted or queued, so requests later refused or abandoned count too (completions
        # alone undercount demand whenever the queue grows or requests are refused).
        self.arrivals = Counter(contract.GATEWAY_ARRIVALS,
                                "Inference requests arrived, before admission.",
                                ["tenant"], registry=reg)
        # vLLM's own boundaries and the round numbers objectives use, so the gateway's
        # view and the engine's compare bucket by bucket (and the queueing in front of vLLM
        # reads off) and whether a round objective is met is read exactly.
        self.ttft = Histogram(contract.GATEWAY_TTFT,
                              "Arrival at the gateway to first response byte (streaming).",
                              ["tenant"], buckets=contract.GATEWAY_TTFT_BUCKETS, registry=reg)
        self.e2e = Histogram(contract.GATEWAY_E2E_LATENCY,
                             "Arrival at the gateway to last response byte.",
                             ["tenant"], buckets=contract.GATEWAY_E2E_BUCKETS,
                             registry=reg)
        self.queue_wait = Histogram(contract.GATEWAY_QUEUE_WAIT,
                                    "Time waiting for an in-flight slot.", ["tenant"],
                                    buckets=contract.TTFT_BUCKETS, registry=reg)
        reg.register(_AdmissionCollector(admission))
        self._children: dict[tuple[str, ...], Any] = {}

    def child(self, metric: str, *labels: str) -> Any:
        """Label children cached per tenant: the request path skips the label lookup."""
        key = (metric, *labels)
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = getattr(self, metric).labels(*labels)
        return c


# --- the gateway ---------------------------------------------------------------------------------
class Gateway:
    def __init__(self, cfg: GatewayConfig):
        self.cfg = cfg
        weights = {n: s.weight for n, s in cfg.tenants.tenants.items()}
        self.admission = FairAdmission(cfg.default_limit, weights,
                                       max_queue=cfg.max_queue_per_tenant)
        self.metrics = GatewayMetrics(self.admission)
        # Arrival series of the known tenants exist from the start at 0: rate() over a
        # series that first appears at 1 never counts that first request.
        for name in {*cfg.tenants.tenants, cfg.tenants.default_tenant}:
            self.metrics.child("arrivals", name)
        self.key_to_tenant = {k: n for n, s in cfg.tenants.tenants.items() for k in s.api_keys}
        self.session: aiohttp.ClientSession | None = None
        self._stop = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None
        self.extra_metrics = b""
        if cfg.probe_file and Path(cfg.probe_file).exists():
            self.extra_metrics = _probe_metrics(cfg.probe_file)
        info_file = cfg.engine_info_file or (
            contract.engine_info_path(cfg.probe_file) if cfg.probe_file else None)
        self.engine_info = EngineInfoExport(info_file) if info_file else None
        app = web.Application(client_max_size=cfg.max_body_bytes)
        app.router.add_get(contract.GATEWAY_METRICS_PATH, self.metrics_handler)
        app.router.add_get(contract.ENGINE_METRICS_PATH, self.engine_metrics)
        app.router.add_get(PICKER_METRICS_PATH, self.picker_metrics)
        app.router.add_route("*", "/{tail:.*}", self.proxy)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        self.app = app

    # lifecycle
    async def _startup(self, app: web.Application) -> None:
        # No pool limit: the admission limit is the only cap on upstream concurrency.
        self.session = new_session()
        if self.cfg.limit_file:
            # Read once before serving, so the first requests already obey the file.
            try:
                n = parse_limit(Path(self.cfg.limit_file).read_text())
            except OSError:
                n = None
            if n is not None:
                self.set_limit(n)
            self._watch = asyncio.get_running_loop().create_task(watch_limit_file(
                self.cfg.limit_file, self.cfg.poll_interval_s, self.set_limit, self._stop))

    async def _cleanup(self, app: web.Application) -> None:
        self._stop.set()
        if self._watch:
            await asyncio.gather(self._watch, return_exceptions=True)
        if self.session:
            await self.session.close()

    def set_limit(self, n: int) -> None:
        if n != self.admission.limit:
            log.info("Changed in-flight limit from %d to %d", self.admission.limit, n)
        self.admission.set_limit(n)

    async def metrics_handler(self, request: web.Request) -> web.Response:
        engine = self.engine_info.text() if self.engine_info else b""
        return web.Response(
            body=generate_latest(self.metrics.registry) + self.extra_metrics + engine,
            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def engine_metrics(self, request: web.Request) -> web.StreamResponse:
        """vLLM's own /metrics through the gateway's port, so vLLM can stay on loopback."""
        return await self._forward(request.clone(rel_url="/metrics"), b"", "-",
                                   asyncio.get_running_loop().time(), False)

    async def picker_metrics(self, request: web.Request) -> web.Response:
        """vLLM's /metrics plus :data:`PICKER_QUEUE_METRIC` (vLLM's waiting requests and
        the gateway's held ones), for an endpoint picker; 502 while vLLM does not answer,
        so the picker never takes an absent engine for an idle one."""
        assert self.session is not None
        try:
            async with self.session.get(self.cfg.upstream + "/metrics") as up:
                if up.status != 200:
                    return error_response(502, f"engine /metrics answered {up.status}",
                                          "BadGateway")
                text = await up.text()
        except (aiohttp.ClientError, OSError) as e:
            return error_response(502, f"engine /metrics unreachable: {e}", "BadGateway")
        total = engine_waiting(text) + self.admission.queued()
        return web.Response(body=text.encode() + picker_queue_text(total),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # tenants
    def resolve_tenant(self, request: web.Request) -> str | None:
        tc = self.cfg.tenants
        name = request.headers.get(self.cfg.tenant_header)
        if not name:
            auth = request.headers.get("Authorization", "")
            if auth.lower().startswith("bearer "):
                name = self.key_to_tenant.get(auth[7:].strip())
        if name and name in tc.tenants:
            return name
        return tc.default_tenant if tc.unknown_tenant == "default" else None

    # proxy
    async def proxy(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        governed = request.method == "POST" and request.path.startswith("/v1/")
        tenant = "-"
        stream = False
        if governed:
            # Counted under the tenant its headers name ("unknown" when none is known),
            # before anything can refuse it.
            resolved = self.resolve_tenant(request)
            self.metrics.child("arrivals", resolved or "unknown").inc()
            cl = request.content_length
            if cl is not None and cl > self.cfg.max_body_bytes:
                return self._reject(tenant, 413, "too_large",
                                    f"body of {cl} bytes exceeds {self.cfg.max_body_bytes}")
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                return self._reject(tenant, 413, "too_large",
                                    f"body exceeds {self.cfg.max_body_bytes} bytes")
            try:
                doc = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return self._reject(tenant, 400, "invalid", "request body is not valid JSON")
            if not isinstance(doc, dict):
                return self._reject(tenant, 400, "invalid", "request body must be an object")
            stream = doc.get("stream") is True
            if resolved is None:
                return self._reject("unknown", 403, "unknown_tenant",
                                    "no tenant known for this request", "PermissionDenied")
            tenant = resolved
            try:
                await self.admission.acquire(tenant, self.cfg.queue_timeout_s)
            except QueueFull:
                return self._reject(tenant, 429, "queue_full", "tenant queue is full",
                                    "RateLimitError")
            except TimeoutError:
                return self._reject(tenant, 503, "queue_timeout",
                                    "timed out waiting for capacity", "ServiceUnavailable")
            except asyncio.CancelledError:
                self.metrics.child("cancelled", tenant).inc()
                raise
            self.metrics.child("queue_wait", tenant).observe(loop.time() - arrival)
        else:
            body = await request.read()
        try:
            return await self._forward(request, body, tenant, arrival, stream, governed)
        finally:
            if governed:
                self.admission.release()

    def _reject(self, tenant: str, status: int, reason: str, message: str,
                typ: str = "BadRequestError") -> web.Response:
        self.metrics.child("rejections", tenant, reason).inc()
        self.metrics.child("requests", tenant, str(status)).inc()
        return error_response(status, message, typ)

    async def _forward(self, request: web.Request, body: bytes, tenant: str, arrival: float,
                       stream: bool, observe: bool = False) -> web.StreamResponse:
        """Proxy one request upstream. ``observe``: count it in the request metrics (only
        inference requests: probes and metric scrapes would skew the latency SLIs)."""
        assert self.session is not None
        loop = asyncio.get_running_loop()
        try:
            up = await send_upstream(self.session, request, self.cfg.upstream, body)
        except asyncio.CancelledError:
            self.metrics.child("cancelled", tenant).inc()
            raise
        except UPSTREAM_ERRORS as e:
            return self._reject(tenant, 502, "upstream_error", f"upstream unreachable: {e}",
                                "BadGateway")

        def first_chunk() -> None:
            self.metrics.child("ttft", tenant).observe(loop.time() - arrival)

        try:
            resp = await respond(request, up, stream=stream,
                                 on_first_chunk=first_chunk if stream else None)
        except CLIENT_GONE:
            # respond closed the upstream connection: the engine aborts the sequence.
            self.metrics.child("cancelled", tenant).inc()
            raise
        if observe:
            self.metrics.child("e2e", tenant).observe(loop.time() - arrival)
            self.metrics.child("requests", tenant, str(up.status)).inc()
        return resp


def engine_waiting(text: str) -> float:
    """The sum of ``vllm:num_requests_waiting`` over its series (one per engine and
    model) in vLLM's exposition ``text``; 0 when absent. Only that family's lines are
    parsed: the picker scrapes often and vLLM's histograms are most of the text."""
    name = contract.NUM_REQUESTS_WAITING
    lines = [ln for ln in text.splitlines()
             if ln.startswith(name) and ln[len(name):len(name) + 1] in ("{", " ")]
    return sum(smp.value for fam in text_string_to_metric_families("\n".join(lines) + "\n")
               for smp in fam.samples if smp.name == name)


def picker_queue_text(total: float) -> bytes:
    """:data:`PICKER_QUEUE_METRIC` as one gauge in the text exposition format."""
    reg = CollectorRegistry()
    reg.register(_Fixed(GaugeMetricFamily(
        PICKER_QUEUE_METRIC,
        "Requests waiting in the pod: vLLM's waiting plus the gateway's held above the "
        "live limit.", value=total)))
    return generate_latest(reg)


class _Fixed:
    """A collector of one ready-made family."""

    def __init__(self, family: GaugeMetricFamily) -> None:
        self.family = family

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield self.family


def _probe_metrics(path: str) -> bytes:
    """The launcher's probe result as Prometheus lines (probe JSON as written by
    ``slo-runtime probe --output``)."""
    from slo_runtime.probe_metrics import gpu_metrics_text

    try:
        d: dict[str, Any] = json.loads(Path(path).read_text())
        g = d["gpu"]
        # The probe's own verdict: a mismatch list written next to the GPU facts.
        return gpu_metrics_text(g["vendor"], g["product"], g["compute_capability"],
                                int(g["memory_mib"]), int(g["count"]),
                                not d.get("mismatches")).encode()
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("Ignored probe file %s: %s", path, e)
        return b""


def engine_metrics_text(doc: dict[str, Any]) -> bytes:
    """``slo_runtime_engine_info`` (value 1, labels: the settings vLLM was started with) and
    one ``slo_runtime_engine_change`` (value 1) per setting the launcher changed, from an
    engine-info document as ``slo_runtime.launch.engine_info`` writes it."""
    reg = CollectorRegistry()
    info = Gauge(contract.RUNTIME_ENGINE_INFO,
                 "The settings vLLM was started with in this pod (value 1).",
                 list(contract.ENGINE_INFO_LABELS), registry=reg)
    settings = doc["settings"]
    if not isinstance(settings, dict):
        raise TypeError("settings is not an object")
    info.labels(*contract.engine_info_labels(settings)).set(1)
    changed = Gauge(contract.RUNTIME_ENGINE_CHANGE,
                    "A planned engine setting the launcher changed, with its reason (value 1).",
                    list(contract.ENGINE_CHANGE_LABELS), registry=reg)
    for ch in doc.get("changes") or ():
        changed.labels(str(ch["setting"]), str(ch.get("requested") or ""),
                       str(ch.get("applied") or ""), str(ch.get("code") or "")).set(1)
    return generate_latest(reg)


class EngineInfoExport:
    """The launcher's engine-info file as Prometheus lines, read again whenever the file
    changes (the launcher writes it when vLLM starts, after the gateway may be up, and
    again on every restart of the vLLM container); nothing while it is missing."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._text = b""

    def text(self) -> bytes:
        try:
            st = os.stat(self.path)
        except OSError:
            self._stamp, self._text = None, b""
            return b""
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._text = engine_metrics_text(json.loads(Path(self.path).read_text()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                log.warning("Ignored engine info file %s: %s", self.path, e)
                self._text = b""
        return self._text
