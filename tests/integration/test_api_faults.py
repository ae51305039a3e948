"""API-server faults survived by the real operator, on the real stack.

The operator process (one-second passes, under the chart's ClusterRole) runs against a
control plane of this module's own, so that restarting its API server cuts no other
suite's watches.

The operator talks to the API server through :class:`ApiFaultProxy`, an HTTP proxy on
loopback that forwards every request (watch streams streamed through as they come) to the
real kube-apiserver over TLS and answers some requests itself while a fault is on. The
ServiceAccount's bearer token passes through, so the API server authenticates and
authorizes the operator as without the proxy.

- 429: every other request of each kind (verb, resource, subresource) is answered
  ``429 Too Many Requests`` with ``Retry-After: 1``, what the API server's own
  max-in-flight and priority-and-fairness filters send. An SLOPolicy edit made during the
  fault must reach the service's Deployment and status after it.
- 409: every status PATCH of an InferenceService is answered ``409 Conflict``. The
  services' status and Deployments must follow an SLOPolicy edit made during the fault
  after it.
- API server restart: kube-apiserver is stopped (every watch stream cut; the proxy drops
  the operator's connections while nothing listens) and started again on the same port
  and etcd. The operator must act on an SLOPolicy edit and on a new InferenceService made
  after it.

In every case: the proxy counts the operator's requests in the fault window, which must
stay few (no hot loop: a retry without back-off makes hundreds a second on loopback); the
operator stays alive and keeps passing; its log holds no traceback (a refusal of the
moment is one WARNING line: ``adapters.kube.transient``). A failed survival check raises
``NotSurvived``; a traceback in the log, an AssertionError.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from slo_devtools.devenv.control_plane import Binaries, LocalCluster
from slo_devtools.devenv.pki import write_kubeconfig
from slo_operator.api.models import GROUP
from tests.integration.operator_support import (
    OPERATOR_NS,
    OperatorProcess,
    bind_role,
    chart_cluster_role,
    conditions,
    deployments_of,
    ensure_namespace,
    install_crds,
)
from tests.integration.test_api_requests import passes

pytestmark = pytest.mark.integration

# A fault's effects must show within this: a few one-second passes, the operator's own
# back-off for a refused apply (30 s, reconcile/ports.py AppliedCache), kubectl polling.
REACT_S = 60.0
# The fault window lasts at least this many periodic passes, so the count of requests in
# it covers several passes' retries.
FAULT_PASSES = 5
# Requests per second through the proxy that still count as backing off: two services'
# writes and kopf's retries at one-second passes come to a few a second (the figures are
# printed); a retry without any back-off makes hundreds a second on loopback.
MAX_RATE = 20.0
# What the API server's max-in-flight filter sends with a 429 (k8s.io/apiserver
# pkg/server/filters/maxinflight.go, tooManyRequests: "Retry-After: 1").
RETRY_AFTER_S = 1

# Headers that belong to one hop (RFC 9110 section 7.6.1) or that aiohttp sets itself;
# without Accept-Encoding the replies come unencoded, as they are forwarded.
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host",
       "content-length", "proxy-connection", "accept-encoding", "content-encoding"}


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """This module's own control plane (it overrides the suite's session cluster here):
    the API server restart must not cut the watch streams of other suites' operators."""
    binaries = Binaries.discover()
    missing = binaries.missing()
    if missing:
        msg = f"control-plane binaries not built ({', '.join(missing)})"
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    c = LocalCluster(binaries=binaries).start()
    try:
        yield c
    finally:
        c.stop()


# --- the proxy ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seen:
    """One request the proxy received."""

    at: float  # time.monotonic()
    verb: str  # the API server's verb: get, list, watch, patch, ...
    resource: str
    subresource: str
    # The status the proxy answered itself (502: the API server could not be reached and
    # the client's connection was dropped), None when forwarded.
    answered: int | None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.verb, self.resource, self.subresource)


def request_kind(method: str, path: str, query: Mapping[str, str]) -> tuple[str, str, str]:
    """(verb, resource, subresource) of an API request, as the API server names them
    (k8s.io/apiserver pkg/endpoints/request/requestinfo.go, NewRequestInfo): a GET of a
    collection is ``list``, with ``watch=true`` it is ``watch``."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return (method.lower(), path, "")
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] if rest else ""
    named = len(rest) >= 2
    sub = rest[2] if len(rest) >= 3 else ""
    verb = method.lower()
    if method == "GET":
        verb = "watch" if query.get("watch") in ("true", "1") else "get" if named else "list"
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    return (verb, resource, sub)


def status_reply(code: int, reason: str, message: str,
                 headers: Mapping[str, str] | None = None) -> web.Response:
    """An error reply as the API server sends it: a ``Status`` object
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#response-status-kind)."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    return web.json_response(body, status=code, headers=dict(headers or {}))


# The reply a fault gives a request of a kind, or None to forward it.
Rule = Callable[[tuple[str, str, str]], web.Response | None]


class ApiFaultProxy:
    """A plain-HTTP proxy on loopback for kube-apiserver, in its own event-loop thread.

    Requests are forwarded to ``upstream`` over TLS (verified against ``ca``) with the
    client's headers (its bearer token included); replies, watch streams among them, are
    streamed back chunk by chunk as they come. ``rule`` decides, for every request from
    the next one on, whether the proxy answers it itself."""

    def __init__(self, upstream: str, ca: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self.ca = ca
        self.rule: Rule | None = None
        self.seen: list[Seen] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="api-fault-proxy")
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    def start(self) -> ApiFaultProxy:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def window(self, start: float, end: float) -> list[Seen]:
        return [s for s in list(self.seen) if start <= s.at < end]

    async def _start(self) -> str:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        # No total timeout: a watch stays open until the API server ends it (kopf asks
        # for 300 s, handlers/setup.py).
        # A connection per request: a kept-alive one the API server has closed meanwhile
        # would fail the next request forwarded on it, a fault the test did not inject.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, force_close=True),
            timeout=aiohttp.ClientTimeout(total=None, connect=10),
            auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Watches still open when the test ends are dropped, not awaited.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        kind = request_kind(request.method, request.path, request.query)
        rule = self.rule
        injected = rule(kind) if rule is not None else None
        seen = Seen(time.monotonic(), *kind, injected.status if injected is not None else None)
        at = len(self.seen)  # appended only here, on the proxy's one event-loop thread
        self.seen.append(seen)
        if injected is not None:
            await request.read()
            return injected
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        body = await request.read()
        try:
            async with self._session.request(
                request.method, self.upstream + request.path_qs, headers=headers,
                data=body or None,
                # A body without a Content-Type goes on without one (the API server reads
                # it as JSON); aiohttp would label it application/octet-stream (415).
                skip_auto_headers=("Content-Type",),
            ) as up:
                resp = web.StreamResponse(status=up.status, reason=up.reason, headers={
                    k: v for k, v in up.headers.items() if k.lower() not in HOP})
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        except (aiohttp.ClientError, ConnectionError):
            # The API server went away mid-reply or refused the connection: the client
            # sees its connection dropped, as through an L4 load balancer. Recorded as 502.
            self.seen[at] = replace(seen, answered=502)
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPBadGateway() from None  # not delivered: the connection is gone


def every_other(match: Callable[[tuple[str, str, str]], bool],
                reply: Callable[[tuple[str, str, str]], web.Response]) -> Rule:
    """A rule answering the 1st, 3rd, 5th... matching request of each kind with ``reply``:
    half the requests, and the first attempt of every kind of write among them."""
    counts: Counter[tuple[str, str, str]] = Counter()

    def rule(kind: tuple[str, str, str]) -> web.Response | None:
        if not match(kind):
            return None
        counts[kind] += 1
        return reply(kind) if counts[kind] % 2 == 1 else None

    return rule


def throttled(kind: tuple[str, str, str]) -> web.Response:
    return status_reply(429, "TooManyRequests", "Too many requests, please try again later.",
                        {"Retry-After": str(RETRY_AFTER_S)})


def conflict(kind: tuple[str, str, str]) -> web.Response:
    return status_reply(409, "Conflict", f"Operation cannot be fulfilled on {kind[1]}: the "
                        "object has been modified; please apply your changes to the latest "
                        "version and try again")


# --- the stack ------------------------------------------------------------------------------
POLICY = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy", "metadata": {"name": "gold"},
          "spec": {"scaling": {"minReplicas": 1, "maxReplicas": 4}}}


def service_doc(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": {"model": {"name": f"org/{name}", "sizeBillions": 8},
                     "hardware": {"gpuProducts": ["H100"]},
                     "sloPolicyRef": {"name": "gold"}}}


class Stack:
    """The operator's services in one namespace, and what the checks read of them."""

    def __init__(self, cluster: LocalCluster, namespace: str, op: OperatorProcess) -> None:
        self.cluster, self.ns, self.op = cluster, namespace, op

    def apply(self, docs: list[dict[str, Any]]) -> None:
        self.cluster.kubectl("apply", "-n", self.ns, "-f", "-",
                             input=yaml.safe_dump_all(docs))

    def set_min_replicas(self, n: int) -> None:
        self.cluster.kubectl("patch", "slopolicy", "-n", self.ns, "gold", "--type=merge",
                             "-p", json.dumps({"spec": {"scaling": {"minReplicas": n}}}))

    def replicas(self, name: str) -> list[int]:
        return [d["spec"]["replicas"] for d in deployments_of(self.cluster, self.ns, name)]

    def settled(self, names: tuple[str, ...], n: int) -> bool:
        """Every service's Deployment at ``n`` replicas, its status saying so and Ready,
        the operator alive."""
        self.op.healthy()  # raises with the log if the operator exited
        items = self.cluster.kubectl_json("get", "infsvc", "-n", self.ns)["items"]
        got = {s["metadata"]["name"]: s for s in items}
        return all(
            name in got and self.replicas(name) == [n]
            and (got[name].get("status") or {}).get("desiredReplicas") == n
            and conditions(got[name]).get("Ready", {}).get("status") == "True"
            for name in names)

    def await_settled(self, names: tuple[str, ...], n: int, desc: str) -> float:
        start = time.monotonic()
        self.cluster.wait_for(lambda: self.settled(names, n), timeout=REACT_S, desc=desc)
        return time.monotonic() - start

    def await_passes(self, n: int, desc: str) -> None:
        first = passes(self.op)
        self.cluster.wait_for(lambda: passes(self.op) >= first + n, timeout=REACT_S,
                              desc=desc)


@contextlib.contextmanager
def proxied_operator(cluster: LocalCluster, namespace: str, proxy: ApiFaultProxy,
                     log_dir: Path) -> Iterator[Stack]:
    """``slo-operator run`` under the chart's ClusterRole, talking to the API server only
    through ``proxy``: its kubeconfig is the ServiceAccount's, with the proxy's URL."""
    install_crds(cluster)
    ensure_namespace(cluster, OPERATOR_NS)
    direct = yaml.safe_load(bind_role(cluster, chart_cluster_role(cluster), OPERATOR_NS,
                                      "slo-api-faults").read_text())
    user = direct["users"][0]
    kubeconfig = write_kubeconfig(log_dir / "proxied.kubeconfig", server=proxy.url,
                                  ca=cluster.ca_cert, user=user["name"],
                                  token=user["user"]["token"], namespace=OPERATOR_NS)
    op = OperatorProcess(kubeconfig, log_dir / "operator.log", interval=1.0)
    try:
        cluster.wait_for(op.healthy, timeout=60, desc="operator liveness endpoint")
        yield Stack(cluster, namespace, op)
    finally:
        op.stop()
        print(f"\n--- operator log ---\n{op.logs()[-6000:]}")


@pytest.fixture
def proxy(cluster: LocalCluster) -> Iterator[ApiFaultProxy]:
    p = ApiFaultProxy(cluster.server, cluster.ca_cert).start()
    try:
        yield p
    finally:
        p.stop()


SERVICES = ("chat", "code")


@contextlib.contextmanager
def settled_stack(cluster: LocalCluster, namespace: str, proxy: ApiFaultProxy,
                  tmp_path: Path) -> Iterator[Stack]:
    """The operator behind ``proxy``; two services settled at their policy's minimum."""
    with proxied_operator(cluster, namespace, proxy, tmp_path) as st:
        st.apply([POLICY, *(service_doc(n) for n in SERVICES)])
        st.await_settled(SERVICES, 1, "both services at 1 replica, Ready")
        yield st


@pytest.fixture
def stack(cluster: LocalCluster, namespace: str, proxy: ApiFaultProxy,
          tmp_path: Path) -> Iterator[Stack]:
    with settled_stack(cluster, namespace, proxy, tmp_path) as st:
        yield st


def fault_window(stack: Stack, proxy: ApiFaultProxy, rule: Rule,
                 during: Callable[[], None]) -> tuple[list[Seen], float]:
    """Turn ``rule`` on, run ``during``, keep the fault for ``FAULT_PASSES`` passes more,
    turn it off. Returns the requests of the window and its length in seconds."""
    start = time.monotonic()
    proxy.rule = rule
    try:
        during()
        stack.await_passes(FAULT_PASSES, "passes go on during the fault")
    finally:
        proxy.rule = None
    end = time.monotonic()
    return proxy.window(start, end), end - start


def summary(seen: list[Seen]) -> str:
    counts = Counter(s.key for s in seen)
    return ", ".join(f"{'/'.join(p for p in k if p)}: {n}" for k, n in counts.most_common())


class NotSurvived(Exception):
    """A check that the operator survived the fault failed (as opposed to the check of
    its log, an AssertionError)."""


def require(ok: object, message: str) -> None:
    if not ok:
        raise NotSurvived(message)


def check_survived(stack: Stack, seen: list[Seen], seconds: float, name: str) -> None:
    """Few requests in the fault window, the operator alive and passing."""
    rate = len(seen) / seconds
    print(f"\n{name}: {len(seen)} requests in {seconds:.1f}s ({rate:.1f}/s), "
          f"{sum(s.answered is not None for s in seen)} answered by the fault; "
          f"{summary(seen)}")
    require(rate <= MAX_RATE, f"{name}: {rate:.1f} requests/s: {summary(seen)}")
    stack.await_passes(2, f"{name}: passes go on after the fault")
    require(stack.op.proc.poll() is None, f"{name}: the operator exited")


def assert_no_traceback(stack: Stack) -> None:
    log = stack.op.logs()
    at = log.find("Traceback")
    assert at < 0, log[max(0, log.rfind("\n", 0, at - 200)):at + 1500]


def test_throttled_requests_are_retried_and_an_edit_made_meanwhile_is_applied(
    stack: Stack, proxy: ApiFaultProxy,
) -> None:
    def throttled_apply() -> bool:
        return any(s.key == ("patch", "deployments", "") and s.answered == 429
                   for s in proxy.seen)

    def edit() -> None:
        stack.set_min_replicas(2)
        # The first apply of the edit is answered 429 (every_other starts with a refusal).
        stack.cluster.wait_for(throttled_apply, timeout=REACT_S,
                               desc="an apply of the edit throttled")

    seen, seconds = fault_window(stack, proxy, every_other(lambda k: True, throttled), edit)
    took = stack.await_settled(SERVICES, 2, "both services at the edit's 2 replicas")
    print(f"\n429: the edit applied {took:.1f}s after the fault ended")
    require(any(s.answered is None for s in seen), "429: no request went through")
    check_survived(stack, seen, seconds, "429")
    assert_no_traceback(stack)


def test_conflicting_status_writes_are_retried_and_the_status_catches_up(
    stack: Stack, proxy: ApiFaultProxy,
) -> None:
    def conflicting(kind: tuple[str, str, str]) -> web.Response | None:
        return conflict(kind) if kind == ("patch", "inferenceservices", "status") else None

    def edit() -> None:
        before = sum(s.answered == 409 for s in proxy.seen)
        stack.set_min_replicas(2)
        # The edit's decision is refused at least twice per service. (The planner writes
        # a decision to status before the objects that carry it out, reconcile/planner.py,
        # so the Deployments may wait for the status as well.)
        stack.cluster.wait_for(
            lambda: sum(s.answered == 409 for s in proxy.seen) >= before + 2 * len(SERVICES),
            timeout=REACT_S, desc="status PATCHes of the edit refused")

    seen, seconds = fault_window(stack, proxy, conflicting, edit)
    took = stack.await_settled(SERVICES, 2, "both services' status at 2 replicas")
    print(f"\n409: the status caught up {took:.1f}s after the fault ended")
    require(any(s.answered == 409 for s in seen), "409: no status PATCH was refused")
    check_survived(stack, seen, seconds, "409")
    assert_no_traceback(stack)


# Seconds after which the operator applies an unchanged object again (SLO_APPLY_TTL) in
# the restart case: well inside the API server's absence (10 s or more), so that passes
# in it have writes to make, whatever else is pending when the API server goes.
RESTART_APPLY_TTL_S = 2.0


def test_an_api_server_restart_cuts_the_watches_and_later_edits_are_acted_on(
    cluster: LocalCluster, namespace: str, proxy: ApiFaultProxy, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLO_APPLY_TTL", str(RESTART_APPLY_TTL_S))
    apiserver = next(c for c in cluster.components if c.name == "kube-apiserver")
    with settled_stack(cluster, namespace, proxy, tmp_path) as stack:
        first = passes(stack.op)
        start = time.monotonic()
        apiserver.stop()  # SIGTERM, SIGKILL after 10 s: every watch stream is cut
        require(stack.op.healthy(), "restart: the operator's liveness, API server down")
        apiserver.start(cluster.workdir)
        cluster.wait_for(lambda: cluster.kubectl("get", "--raw", "/readyz",
                                                 check=False).stdout == "ok",
                         timeout=REACT_S, desc="kube-apiserver ready again")
        back = time.monotonic()
        # Seen only through the watches kopf opens again: an edit and a new service.
        stack.set_min_replicas(2)
        stack.apply([service_doc("summarize")])
        took = stack.await_settled((*SERVICES, "summarize"), 2,
                                   "the edit and the new service acted on")
        down = proxy.window(start, back)
        print(f"\nrestart: API server away for {back - start:.1f}s, {passes(stack.op) - first} "
              f"passes since; the edit and the new service acted on {took:.1f}s after")
        require(any(s.answered == 502 for s in down), "restart: no request met the outage")
        check_survived(stack, down, back - start, "restart")
        assert_no_traceback(stack)
