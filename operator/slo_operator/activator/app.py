"""The activator's HTTP service: find the InferenceService a request is for, hold it while
the service has no Ready replica, tell the operator (the wake annotation), forward it once
a replica is Ready.

The operator routes a Service with no Ready replica to the activator's pods (an
EndpointSlice of its own, ``slo_operator.api.activation``), so what arrives here is a
request for an InferenceService that is at zero or starting. Per service:

- a Ready endpoint exists: the request is forwarded at once (round robin over the Ready
  pods), through the same proxy code as the in-pod gateway (``slo_runtime.proxy``);
- else it waits in a bounded queue (full: 429 with ``Retry-After``); the first waiting
  request of a wake records a :class:`~slo_operator.api.activation.Wake` on the
  InferenceService at once (later arrivals update its count at most every
  :data:`WAKE_UPDATE_INTERVAL_S`);
- a Ready endpoint appears: every waiting request is forwarded, and the wake records when
  the first one was served and how long it waited;
- none within the timeout: 504 to each waiting request, and the wake records the timeout;
- the InferenceService is deleted meanwhile: 404 to each waiting request at once.

Cluster knowledge comes through :class:`Routes` and the annotation write through
:class:`Waker` (``slo_operator.activator.apiserver`` on the API server; fakes in tests).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from slo_operator.api.activation import (
    DEFAULT_QUEUE_PER_SERVICE,
    DEFAULT_WAKE_TIMEOUT_S,
    RETRY_AFTER_S,
    SERVICE_HEADER,
    WAKE_UPDATE_INTERVAL_S,
    Wake,
)
from slo_operator.api.cluster import ObjKey
from slo_runtime.contract import REQUEST_LATENCY_BUCKETS
from slo_runtime.proxy import (
    CLIENT_GONE,
    DEFAULT_MAX_BODY_BYTES,
    UPSTREAM_ERRORS,
    error_response,
    new_session,
    respond,
    send_upstream,
)

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"
# The activator's own endpoints answer only requests that name no InferenceService (a
# kubelet probe or a scrape reaches the pod by its IP).
OWN_PATHS = (HEALTH_PATH, READY_PATH, METRICS_PATH)
# A wake's end (served, or given up) refused by the API server is written again, first
# after FINAL_RETRY_S and then twice as late, for at most FINAL_RECORD_S: the operator reads
# the WakeTimedOut condition and a cold start's wait from it, and no later write of the
# resolved hold would carry it.
FINAL_RETRY_S = 0.5
FINAL_RECORD_S = 60.0

METRIC_PREFIX = "slo_activator_"
REQUESTS = f"{METRIC_PREFIX}requests"
HELD = f"{METRIC_PREFIX}held_requests"
HOLD_SECONDS = f"{METRIC_PREFIX}hold_seconds"
WAKES = f"{METRIC_PREFIX}wakes"
TIMEOUTS = f"{METRIC_PREFIX}wake_timeouts"
ABANDONED = f"{METRIC_PREFIX}abandoned_requests"


class NotFound(Exception):
    """The InferenceService is gone (raised by a :class:`Waker`)."""


class Routes(Protocol):
    """What the activator knows of the cluster (``routes.RouteTable`` implements it)."""

    @property
    def synced(self) -> bool:
        """Whether the first listing of the cluster's services arrived."""
        ...

    def by_name(self, namespace: str, name: str) -> ObjKey | None:
        """The InferenceService ``namespace/name`` when known."""
        ...

    def by_service(self, namespace: str, service: str) -> ObjKey | None:
        """The InferenceService behind Kubernetes Service ``namespace/service``."""
        ...

    def by_cluster_ip(self, ip: str) -> ObjKey | None:
        """The InferenceService whose Service has ClusterIP ``ip``."""
        ...

    def endpoints(self, key: ObjKey) -> Sequence[str]:
        """Base URLs (``http://ip:port``) of the service's Ready pods."""
        ...

    async def settled(self, key: ObjKey) -> None:
        """Return once the service has a Ready endpoint or is gone."""
        ...


class Waker(Protocol):
    async def wake(self, namespace: str, name: str, wake: Wake) -> None:
        """Record ``wake`` on the InferenceService; :class:`NotFound` when it is gone."""
        ...


@dataclass(frozen=True)
class ActivatorConfig:
    queue_per_service: int = DEFAULT_QUEUE_PER_SERVICE
    timeout_s: float = DEFAULT_WAKE_TIMEOUT_S
    pod_name: str = ""  # Wake.by
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    update_interval_s: float = WAKE_UPDATE_INTERVAL_S

    def __post_init__(self) -> None:
        if self.queue_per_service < 1:
            raise ValueError(f"queue per service must be at least 1, got "
                             f"{self.queue_per_service}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got "
                             f"{self.timeout_s}")


# --- which service a request is for ---------------------------------------------------------
@dataclass(frozen=True)
class HostName:
    """A Host of the form ``<service>.<namespace>[.svc[.<cluster domain>]]``."""

    namespace: str
    service: str


@dataclass(frozen=True)
class HostAddress:
    ip: str


def parse_host(host: str) -> HostName | HostAddress | None:
    """What a Host header names (its port stripped): a Service's DNS name, an IP address,
    or nothing the activator can use (None)."""
    h = host.strip().lower().rstrip(".")
    if h.startswith("["):  # [IPv6]:port
        h = h[1:].partition("]")[0]
    else:
        try:
            return HostAddress(str(ipaddress.ip_address(h)))  # IPv6 without a port
        except ValueError:
            pass
        name, colon, port = h.rpartition(":")
        if colon and port.isdigit():
            h = name
    try:
        return HostAddress(str(ipaddress.ip_address(h)))
    except ValueError:
        pass
    labels = h.split(".")
    if len(labels) < 2 or not all(labels[:2]):
        return None
    if len(labels) == 2 or labels[2] == "svc":
        return HostName(namespace=labels[1], service=labels[0])
    return None


class Outcome(Enum):
    READY = "ready"
    GONE = "gone"
    TIMEOUT = "timeout"


@dataclass
class Hold:
    """One wake of one service: the requests waiting for its first Ready replica."""

    key: ObjKey
    requested_at: float  # epoch seconds, the first waiting request
    started: float  # loop time of the same
    outcome: asyncio.Future[Outcome]
    waiting: int = 0  # requests in the queue now
    total: int = 0  # requests that waited in this wake (Wake.held)
    served: bool = False
    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    recorded: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ActivatorMetrics:
    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        labels = ["namespace", "service"]
        self.requests = Counter(REQUESTS, "Requests answered, by InferenceService and HTTP "
                                "status.", [*labels, "code"], registry=reg)
        self.held = Gauge(HELD, "Requests waiting for a Ready replica now.", labels,
                          registry=reg)
        # The gateway's end-to-end boundaries (seconds to hours): a cold start is minutes.
        self.hold_seconds = Histogram(HOLD_SECONDS, "Time a forwarded request waited for a "
                                      "Ready replica.", labels,
                                      buckets=REQUEST_LATENCY_BUCKETS, registry=reg)
        self.wakes = Counter(WAKES, "Wakes recorded on InferenceServices.", labels,
                             registry=reg)
        self.timeouts = Counter(TIMEOUTS, "Wakes given up: no Ready replica within the "
                                "timeout.", labels, registry=reg)
        self.abandoned = Counter(ABANDONED, "Requests whose client went away while waiting "
                                 "or being forwarded.", labels, registry=reg)


class Activator:
    def __init__(self, routes: Routes, waker: Waker, config: ActivatorConfig | None = None,
                 *, now: Callable[[], float] = time.time) -> None:
        self.routes = routes
        self.waker = waker
        self.cfg = config or ActivatorConfig()
        self.now = now
        self.metrics = ActivatorMetrics()
        self.session: aiohttp.ClientSession | None = None
        self.holds: dict[ObjKey, Hold] = {}
        self._next: dict[ObjKey, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        app = web.Application(client_max_size=self.cfg.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        self.app = app

    async def _startup(self, app: web.Application) -> None:
        self.session = new_session()

    async def _cleanup(self, app: web.Application) -> None:
        for hold in list(self.holds.values()):
            for task in hold.tasks:
                task.cancel()
        # Records already under way (a wake's served or timed-out write) finish first.
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=5)
            for task in pending:  # a refused end still being retried
                task.cancel()
        if self.session:
            await self.session.close()

    # --- the activator's own endpoints ---------------------------------------------------------
    def _own(self, request: web.Request) -> web.Response:
        if request.path == HEALTH_PATH:
            return web.Response(text="ok\n")
        if request.path == READY_PATH:
            if self.routes.synced:
                return web.Response(text="ok\n")
            return web.Response(status=503, text="waiting for the first listing of "
                                "services\n")
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- the request path ------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        arrival = asyncio.get_running_loop().time()
        target = self.target(request)
        if not isinstance(target, tuple):
            if request.path in OWN_PATHS and SERVICE_HEADER not in request.headers:
                return self._own(request)
            return self._answer(None, target)
        key = target
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._answer(key, error_response(
                413, f"request body exceeds {self.cfg.max_body_bytes} bytes",
                "BadRequestError"))
        urls = self.routes.endpoints(key)
        if urls:
            return await self._forward(request, body, key, urls, None, arrival)
        hold = self.holds.get(key) or self._start_hold(key)
        if hold.waiting >= self.cfg.queue_per_service:
            resp = error_response(429, queue_full_message(key, hold.waiting), "RateLimitError")
            resp.headers["Retry-After"] = str(RETRY_AFTER_S)
            return self._answer(key, resp)
        hold.waiting += 1
        hold.total += 1
        if hold.total > 1:
            hold.dirty.set()
        held = self.metrics.held.labels(*key)
        held.inc()
        try:
            outcome = await asyncio.shield(hold.outcome)
        except asyncio.CancelledError:
            self.metrics.abandoned.labels(*key).inc()
            raise
        finally:
            hold.waiting -= 1
            held.dec()
        if outcome is Outcome.READY:
            return await self._forward(request, body, key, self.routes.endpoints(key), hold,
                                       arrival)
        if outcome is Outcome.GONE:
            return self._answer(key, error_response(404, deleted_message(key), "NotFoundError"))
        return self._answer(key, error_response(504, timeout_message(key, self.cfg.timeout_s),
                                                "GatewayTimeout"))

    def target(self, request: web.Request) -> ObjKey | web.Response:
        """The InferenceService ``request`` is for, else the error response to send."""
        named = request.headers.get(SERVICE_HEADER)
        if named is not None:
            ns, slash, name = named.strip().partition("/")
            if not (slash and ns and name) or "/" in name:
                return error_response(400, bad_header_message(named), "BadRequestError")
            if not self.routes.synced:
                return _starting()
            return self.routes.by_name(ns, name) or error_response(
                404, unknown_name_message(ns, name), "NotFoundError")
        host = request.headers.get("Host", "")
        parsed = parse_host(host)
        if parsed is None:
            return error_response(400, no_target_message(host), "BadRequestError")
        if not self.routes.synced:
            return _starting()
        if isinstance(parsed, HostAddress):
            return self.routes.by_cluster_ip(parsed.ip) or error_response(
                404, unknown_ip_message(parsed.ip), "NotFoundError")
        return self.routes.by_service(parsed.namespace, parsed.service) or error_response(
            404, unknown_service_message(parsed.namespace, parsed.service), "NotFoundError")

    def _answer(self, key: ObjKey | None, resp: web.Response) -> web.Response:
        self.metrics.requests.labels(*(key or ("", "")), str(resp.status)).inc()
        return resp

    async def _forward(self, request: web.Request, body: bytes, key: ObjKey,
                       urls: Sequence[str], hold: Hold | None,
                       arrival: float) -> web.StreamResponse:
        if not urls:  # the replica went away between the wake and now
            return self._answer(key, error_response(
                503, no_replica_message(key), "ServiceUnavailable"))
        loop = asyncio.get_running_loop()
        i = self._next.get(key, 0)
        self._next[key] = i + 1
        url = urls[i % len(urls)]
        if hold is not None:
            self.metrics.hold_seconds.labels(*key).observe(loop.time() - arrival)
        sent_at = self.now()
        try:
            up = await send_upstream(self._session(), request, url, body)
        except asyncio.CancelledError:
            self.metrics.abandoned.labels(*key).inc()
            raise
        except UPSTREAM_ERRORS as e:
            return self._answer(key, error_response(
                502, f"replica {url} of InferenceService {key[0]}/{key[1]} unreachable: {e}",
                "BadGateway"))
        if hold is not None and not hold.served:
            hold.served = True
            self._spawn(self._record_end(hold, replace(
                self._wake(hold), served_at=sent_at,
                waited_s=max(0.0, sent_at - hold.requested_at))))
        try:
            resp = await respond(request, up)
        except CLIENT_GONE:
            self.metrics.abandoned.labels(*key).inc()
            raise
        self.metrics.requests.labels(*key, str(up.status)).inc()
        return resp

    def _session(self) -> aiohttp.ClientSession:
        assert self.session is not None, "the application is not started"
        return self.session

    # --- wakes -----------------------------------------------------------------------------------
    def _start_hold(self, key: ObjKey) -> Hold:
        loop = asyncio.get_running_loop()
        hold = Hold(key=key, requested_at=self.now(), started=loop.time(),
                    outcome=loop.create_future())
        hold.dirty.set()  # the first write, at once
        self.holds[key] = hold
        hold.tasks = [loop.create_task(self._watch(hold)),
                      loop.create_task(self._record(hold))]
        return hold

    def _wake(self, hold: Hold) -> Wake:
        return Wake(requested_at=hold.requested_at, held=max(1, hold.total),
                    by=self.cfg.pod_name)

    async def _watch(self, hold: Hold) -> None:
        """Resolve the hold: a Ready endpoint, the service gone, or the timeout."""
        settled = asyncio.get_running_loop().create_task(self.routes.settled(hold.key))
        try:
            either: set[asyncio.Future[Any]] = {settled, hold.outcome}
            done, _ = await asyncio.wait(either, timeout=self.cfg.timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            settled.cancel()
        if not hold.outcome.done():
            if settled in done:
                hold.outcome.set_result(Outcome.READY if self.routes.endpoints(hold.key)
                                        else Outcome.GONE)
            else:
                hold.outcome.set_result(Outcome.TIMEOUT)
                self.metrics.timeouts.labels(*hold.key).inc()
                log.warning("No Ready replica of %s/%s within %g s: answered %d waiting "
                            "request(s) 504", *hold.key, self.cfg.timeout_s, hold.waiting)
                self._spawn(self._record_end(hold, replace(self._wake(hold),
                                                           timed_out_at=self.now())))
        if self.holds.get(hold.key) is hold:
            del self.holds[hold.key]
        hold.tasks[1].cancel()

    async def _record(self, hold: Hold) -> None:
        """Write the wake at once, then again for later arrivals at most every
        ``update_interval_s``, until the hold resolves."""
        loop = asyncio.get_running_loop()
        last = -math.inf
        while not hold.outcome.done():
            await hold.dirty.wait()
            pause = last + self.cfg.update_interval_s - loop.time()
            if pause > 0:
                await asyncio.sleep(pause)
            hold.dirty.clear()
            last = loop.time()
            # Shielded: resolving the hold never cuts a write in half.
            await asyncio.shield(self._write(hold, self._wake(hold)))

    async def _write(self, hold: Hold, wake: Wake) -> bool:
        """Write ``wake``; whether it is settled (written, or no longer to be written)."""
        async with hold.lock:
            if hold.outcome.done() and hold.outcome.result() is Outcome.GONE:
                return True
            try:
                await self.waker.wake(*hold.key, wake)
            except NotFound:
                log.info("InferenceService %s/%s is gone: answering its waiting requests 404",
                         *hold.key)
                if not hold.outcome.done():
                    hold.outcome.set_result(Outcome.GONE)
                return True
            except Exception as e:  # the API server's refusal of the moment: retried
                log.warning("Could not record the wake of %s/%s: %s", *hold.key,
                            str(e).splitlines()[0] if str(e) else type(e).__name__)
                if not hold.outcome.done():
                    hold.dirty.set()
                return False
            if not hold.recorded:
                hold.recorded = True
                self.metrics.wakes.labels(*hold.key).inc()
            return True

    async def _record_end(self, hold: Hold, wake: Wake) -> None:
        """Write a wake's end (served or given up), retried after a refusal (its hold has
        resolved, so ``_record`` writes no more) for at most ``FINAL_RECORD_S``, until a
        newer wake of the service supersedes it."""
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + FINAL_RECORD_S, FINAL_RETRY_S
        while not await self._write(hold, wake):
            newer = self.holds.get(hold.key)
            if (newer is not None and newer is not hold) or loop.time() + pause > deadline:
                log.warning("Gave up recording the end of the wake of %s/%s", *hold.key)
                return
            await asyncio.sleep(pause)
            pause = min(2 * pause, FINAL_RECORD_S / 4)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# --- messages (tests/golden/activator.yaml) -------------------------------------------------------
def _starting() -> web.Response:
    resp = error_response(503, "the activator is starting: it has not listed the cluster's "
                          f"services yet; retry in {RETRY_AFTER_S} s", "ServiceUnavailable")
    resp.headers["Retry-After"] = str(RETRY_AFTER_S)
    return resp


def no_target_message(host: str) -> str:
    return (f"cannot tell which InferenceService this request is for: Host {host!r} is not "
            "a Service's name; use <service>.<namespace> (the Service's DNS name, also "
            f"with .svc or .svc.<cluster domain>) or send the header {SERVICE_HEADER}: "
            "<namespace>/<name>")


def bad_header_message(value: str) -> str:
    return f"header {SERVICE_HEADER} must be <namespace>/<name>, got {value!r}"


def unknown_name_message(namespace: str, name: str) -> str:
    return f"no InferenceService {name} in namespace {namespace} (or it has no Service yet)"


def unknown_service_message(namespace: str, service: str) -> str:
    return (f"Service {service} in namespace {namespace} belongs to no InferenceService "
            "(or does not exist)")


def unknown_ip_message(ip: str) -> str:
    return f"no InferenceService's Service has the cluster IP {ip}"


def queue_full_message(key: ObjKey, waiting: int) -> str:
    return (f"InferenceService {key[0]}/{key[1]} is starting and {waiting} requests already "
            f"wait for it; retry in {RETRY_AFTER_S} s")


def timeout_message(key: ObjKey, timeout_s: float) -> str:
    return (f"InferenceService {key[0]}/{key[1]} had no Ready replica within {timeout_s:g} s "
            "of the first waiting request")


def deleted_message(key: ObjKey) -> str:
    return (f"InferenceService {key[0]}/{key[1]} was deleted while this request waited for "
            "it")


def no_replica_message(key: ObjKey) -> str:
    return (f"InferenceService {key[0]}/{key[1]} lost its Ready replica before this request "
            f"was forwarded; retry in {RETRY_AFTER_S} s")
