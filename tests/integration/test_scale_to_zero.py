"""Scale to zero end to end: the real operator (one-second passes, the chart's ClusterRole,
``--activator-service``), the real activator (its watches of the API server, the wake
annotation), a real Prometheus scraping replica models with a real cold start.

The local cluster runs no kube-proxy and no pod network, and kwok marks a pod Ready as
soon as it runs (a kubelet waits for the readiness probe: vLLM's health through the
gateway). Two small pieces of this file stand in for them, and only for them:

- :func:`service_url` is kube-proxy: it reads the Service's EndpointSlices from the API
  server (the endpoint controller's slice of the pods and the operator's slice of the
  activator) and picks a Ready endpoint, mapping a pod to its replica model's loopback
  port and the activator's fake address to the activator's;
- :class:`PodNetwork` gives the activator's watches the same mapping for pods, and counts
  a pod Ready once its replica model answers (the readiness probe).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from aiohttp import web

from slo_devtools.devenv.control_plane import LocalCluster
from slo_devtools.devenv.prometheus_server import PrometheusServer
from slo_devtools.devenv.replica_pods import ReplicaHarness
from slo_operator.activator.apiserver import KubeRoutes, KubeWaker
from slo_operator.activator.app import Activator, ActivatorConfig
from slo_operator.api.activation import (
    ANNOTATION_WAKE,
    COMPONENT_ACTIVATOR,
    LABEL_COMPONENT,
    LABEL_SERVICE_NAME,
    LABEL_SLICE_MANAGED_BY,
    RETRY_AFTER_S,
    SLICE_MANAGED_BY,
    Wake,
    parse_wake,
)
from slo_operator.api.cluster import ObjKey
from slo_operator.api.models import GROUP
from slo_operator.render.objects import service_name
from tests.integration.operator_support import chart_operator, conditions, events_for
from tests.support.prometheus import prometheus, prometheus_binary  # noqa: F401

pytestmark = pytest.mark.integration
ACTIVATOR_NS = "slo-activator-e2e"
ACTIVATOR_SVC = "slo-activator"
ACTIVATOR_IP = "10.250.0.10"  # the activator pod's address as its Service lists it
COLD_START_S = 3.0
BODY = {"model": "org/chat", "prompt": "hello", "max_tokens": 4}


# --- the pod network and kube-proxy, as far as the test needs them ----------------------------
class PodNetwork:
    """Pod IP -> the pod's replica model (loopback URL), Ready once the model answers."""

    def __init__(self, cluster: LocalCluster, harness: ReplicaHarness, namespace: str) -> None:
        self.cluster, self.harness, self.namespace = cluster, harness, namespace

    def pod_ips(self) -> dict[str, str]:
        pods = self.cluster.kubectl_json("get", "pods", "-n", self.namespace)["items"]
        return {p["status"]["podIP"]: p["metadata"]["name"] for p in pods
                if (p.get("status") or {}).get("podIP")}

    def ready_url(self, pod: str) -> str | None:
        return next((r.url for r in self.harness.replicas()
                     if r.namespace == self.namespace and r.pod == pod and r.ready), None)


class ProbedRoutes(KubeRoutes):
    """The activator's real watches; a pod endpoint counts once its replica is Ready."""

    def __init__(self, api: Any, network: PodNetwork) -> None:
        super().__init__(api, address=lambda ip, port: ip)
        self.network = network
        self._ips: dict[str, str] = {}

    def endpoints(self, key: ObjKey) -> Sequence[str]:
        out = []
        for ip in super().endpoints(key):
            pod = self._ips.get(ip)
            url = self.network.ready_url(pod) if pod else None
            if url:
                out.append(url)
        return out

    async def settled(self, key: ObjKey) -> None:
        """A Ready endpoint (probed) or the service gone; polled at a readiness probe's
        period (the probe is no event)."""
        while self.by_name(*key) is not None and not self.endpoints(key):
            if set(super().endpoints(key)) - set(self._ips):
                self._ips = await asyncio.to_thread(self.network.pod_ips)
                continue
            await asyncio.sleep(0.1)


@dataclass
class RunningActivator:
    activator: Activator
    port: int
    loop: asyncio.AbstractEventLoop
    runner: web.AppRunner
    routes: ProbedRoutes

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop as a restarted pod does: held requests lose their connections."""
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.routes.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)

    def count(self, name: str, **labels: str) -> float:
        text = requests.get(f"{self.url}/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


def start_activator(api: Any, network: PodNetwork, config: ActivatorConfig) -> RunningActivator:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    routes = ProbedRoutes(api, network)

    async def boot() -> RunningActivator:
        routes.start(loop)
        activator = Activator(routes, KubeWaker(api), config)
        # A short drain: a stopped activator drops what it holds (a restarted pod).
        runner = web.AppRunner(activator.app, handler_cancellation=True, access_log=None,
                               shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return RunningActivator(activator, port, loop, runner, routes)

    return asyncio.run_coroutine_threadsafe(boot(), loop).result(30)


def activator_service(cluster: LocalCluster, port: int) -> None:
    """The activator's Service as the chart makes it (the component label), with the slice
    the endpoint controller would make for its pod (the label copied from the Service)."""
    cluster.kubectl("create", "namespace", ACTIVATOR_NS, check=False)
    labels = {LABEL_COMPONENT: COMPONENT_ACTIVATOR}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": ACTIVATOR_SVC, "namespace": ACTIVATOR_NS, "labels": labels},
         "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{ACTIVATOR_SVC}-pods", "namespace": ACTIVATOR_NS,
                      "labels": {**labels, LABEL_SERVICE_NAME: ACTIVATOR_SVC}},
         "addressType": "IPv4",
         "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
         "endpoints": [{"addresses": [ACTIVATOR_IP], "conditions": {"ready": True}}]},
    ]))


def slices(cluster: LocalCluster, namespace: str, service: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json("get", "endpointslices", "-n", namespace, "-l",
                                 f"{LABEL_SERVICE_NAME}={service_name(service)}")["items"]
    return list(items)


def route_slice(cluster: LocalCluster, namespace: str, service: str) -> dict[str, Any] | None:
    return next((s for s in slices(cluster, namespace, service)
                 if s["metadata"]["labels"].get(LABEL_SLICE_MANAGED_BY) == SLICE_MANAGED_BY),
                None)


def service_url(cluster: LocalCluster, network: PodNetwork, activator: RunningActivator,
                namespace: str, service: str) -> tuple[str, str] | None:
    """kube-proxy: ("pod" | "activator", base URL) of a Ready endpoint of the Service,
    pods first where both exist (either is right: the activator forwards to a Ready pod)."""
    found: list[tuple[str, str]] = []
    for s in slices(cluster, namespace, service):
        for ep in s.get("endpoints") or ():
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            ref = ep.get("targetRef") or {}
            if ref.get("kind") == "Pod":
                url = network.ready_url(ref["name"])
                if url:
                    found.append(("pod", url))
            elif ACTIVATOR_IP in ep.get("addresses", ()):
                found.append(("activator", activator.url))
    return sorted(found, key=lambda f: f[0] != "pod")[0] if found else None


def post(url: str, namespace: str, service: str) -> tuple[int, float, dict[str, str]]:
    """One completion through the Service's DNS name (the Host header the activator reads);
    (status, seconds, headers)."""
    t0 = time.monotonic()
    r = requests.post(f"{url}/v1/completions", json=BODY, timeout=120,
                      headers={"Host": f"{service_name(service)}.{namespace}.svc"})
    return r.status_code, time.monotonic() - t0, dict(r.headers)


# --- fixtures ----------------------------------------------------------------------------------
POLICY = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy", "metadata": {"name": "idle"},
          "spec": {"window": "10s", "attainmentPeriod": "5m",
                   "scaling": {"minReplicas": 1, "maxReplicas": 2, "scaleToZero": True,
                               "idleBeforeZero": "5s", "scaleDownStabilization": "0s"}}}


def isvc(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": {"model": {"name": f"org/{name}", "sizeBillions": 8},
                     "hardware": {"gpuProducts": ["H100"]}, "sloPolicyRef": {"name": "idle"}}}


@dataclass
class World:
    cluster: LocalCluster
    namespace: str
    network: PodNetwork
    api: Any
    activator: RunningActivator

    def url(self, service: str) -> tuple[str, str] | None:
        return service_url(self.cluster, self.network, self.activator, self.namespace, service)

    def status(self, service: str) -> dict[str, Any]:
        svc = self.cluster.kubectl_json("get", "infsvc", "-n", self.namespace, service)
        return dict(svc)

    def at_zero(self, service: str) -> dict[str, Any]:
        def zero() -> dict[str, Any] | None:
            svc = self.status(service)
            awake = conditions(svc).get("Awake") or {}
            return svc if (svc.get("status") or {}).get("desiredReplicas") == 0 and \
                awake.get("reason") == "ScaledToZero" else None

        return self.cluster.wait_for(zero, timeout=120, desc=f"{service} scaled to zero")

    def held_request(self, pool: ThreadPoolExecutor) -> Future[tuple[int, float, dict[str, str]]]:
        """At zero, one request sent through the Service, once the activator holds it."""
        self.at_zero("chat")
        where = self.cluster.wait_for(lambda: self.url("chat"), timeout=30, desc="a route")
        held = pool.submit(post, where[1], self.namespace, "chat")
        self.cluster.wait_for(lambda: self.activator.count("slo_activator_held_requests") >= 1,
                              timeout=10, desc="a request held")
        return held

    def restart_activator(self, config: ActivatorConfig) -> None:
        self.activator.stop()
        self.activator = start_activator(self.api, self.network, config)
        activator_service(self.cluster, self.activator.port)


@pytest.fixture
def world(cluster: LocalCluster, namespace: str, prometheus: PrometheusServer,  # noqa: F811
          tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    config: ActivatorConfig = getattr(request, "param", ActivatorConfig())
    api = cluster.api_client()
    harness = ReplicaHarness(api, prometheus=prometheus, namespace=namespace,
                             cold_start_s=COLD_START_S, workdir=tmp_path / "replicas").start()
    network = PodNetwork(cluster, harness, namespace)
    activator = start_activator(api, network, config)
    activator_service(cluster, activator.port)
    w = World(cluster, namespace, network, api, activator)
    try:
        with chart_operator(cluster, tmp_path, "slo-scale-to-zero", interval=1.0,
                            prometheus_url=prometheus.url,
                            activator_service=f"{ACTIVATOR_NS}/{ACTIVATOR_SVC}"):
            cluster.kubectl("apply", "-n", namespace, "-f", "-",
                            input=yaml.safe_dump_all([POLICY, isvc("chat")]))
            yield w
    finally:
        w.activator.stop()
        harness.stop()
        api.close()


# --- the tests ---------------------------------------------------------------------------------
def test_an_idle_service_goes_to_zero_and_its_first_request_wakes_it(world: World) -> None:
    w, ns = world, world.namespace
    w.at_zero("chat")
    route = w.cluster.wait_for(lambda: route_slice(w.cluster, ns, "chat"), timeout=30,
                               desc="the route to the activator")
    assert [e["addresses"] for e in route["endpoints"]] == [[ACTIVATOR_IP]]
    assert route["ports"][0]["port"] == w.activator.port
    assert w.cluster.kubectl_json("get", "deploy", "-n", ns)["items"][0]["spec"]["replicas"] == 0

    # The first request reaches the activator, is held through the cold start, and served.
    where = w.url("chat")
    assert where is not None and where[0] == "activator"
    status, seconds, _ = post(where[1], ns, "chat")
    assert status == 200
    assert seconds >= COLD_START_S  # the cold start is in its latency

    def served() -> Wake | None:  # the activator records the end after forwarding
        wake = parse_wake(w.status("chat")["metadata"]["annotations"][ANNOTATION_WAKE])
        return wake if wake is not None and wake.waited_s is not None else None

    wake = w.cluster.wait_for(served, timeout=30, desc="the served wake recorded")
    assert wake.waited_s is not None and wake.waited_s >= COLD_START_S

    # The route goes back to the pods; the second request goes straight to one.
    w.cluster.wait_for(lambda: route_slice(w.cluster, ns, "chat") is None, timeout=30,
                       desc="the route back to the pods")
    where = w.url("chat")
    assert where is not None and where[0] == "pod"
    held_before = w.activator.count("slo_activator_requests_total", service="chat")
    status, seconds, _ = post(where[1], ns, "chat")
    assert status == 200 and seconds < COLD_START_S
    assert w.activator.count("slo_activator_requests_total", service="chat") == held_before

    # Status and Events tell the story: zero, the wake, the first request's wait.
    def woken() -> dict[str, Any] | None:
        svc = w.status("chat")
        return svc if conditions(svc).get("Awake", {}).get("reason") == "Woken" else None

    svc = w.cluster.wait_for(woken, timeout=30, desc="Awake=True Woken")
    stz = svc["status"]["scaleToZero"]
    assert stz["coldStarts"] == 1 and stz["lastWakeWaitSeconds"] >= COLD_START_S
    reasons = [e["reason"] for e in events_for(w.cluster, ns, "chat")]
    assert {"ScaledToZero", "Waking", "Woken"} <= set(reasons)


@pytest.mark.parametrize("world", [ActivatorConfig(queue_per_service=1, timeout_s=1.5)],
                         indirect=True)
def test_a_full_queue_is_refused_and_a_wake_that_outlasts_the_timeout_is_a_504(
        world: World) -> None:
    w, ns = world, world.namespace
    w.at_zero("chat")
    # No pod may start in the namespace now (a quota, as a GPU shortage would): the wake
    # asks for a replica that never becomes Ready.
    w.cluster.kubectl("create", "quota", "no-pods", "-n", ns, "--hard=pods=0")
    where = w.cluster.wait_for(lambda: w.url("chat"), timeout=30, desc="a route")
    assert where[0] == "activator"
    with ThreadPoolExecutor(2) as pool:
        first: Future[tuple[int, float, dict[str, str]]] = pool.submit(post, where[1], ns,
                                                                       "chat")
        w.cluster.wait_for(lambda: w.activator.count("slo_activator_held_requests") >= 1,
                           timeout=10, desc="the first request held")
        status, _, headers = post(where[1], ns, "chat")  # the queue of one is full
        assert status == 429 and headers["Retry-After"] == str(RETRY_AFTER_S)
        status, _, _ = first.result(60)
    assert status == 504

    seen: list[dict[str, Any]] = []

    def timed_out() -> dict[str, Any] | None:
        svc = w.status("chat")
        seen[:] = [svc]
        return svc if conditions(svc).get("Awake", {}).get("reason") == "WakeTimedOut" \
            else None

    try:
        svc = w.cluster.wait_for(timed_out, timeout=30, desc="WakeTimedOut")
    except TimeoutError as e:  # what the operator had: the activator's record and status
        last = seen[0] if seen else {}
        wake = (last.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_WAKE)
        raise AssertionError(
            f"{e}; wake annotation {wake!r}, "
            f"Awake {conditions(last).get('Awake')!r}, desiredReplicas "
            f"{last.get('status', {}).get('desiredReplicas')!r}") from e
    assert svc["status"]["desiredReplicas"] == 1  # still asked for
    assert svc["status"]["scaleToZero"]["lastWakeTimedOut"]
    warnings = {e["reason"] for e in events_for(w.cluster, ns, "chat") if e["type"] == "Warning"}
    assert "WakeTimedOut" in warnings


def test_a_restarted_activator_drops_what_it_held_and_the_service_still_wakes(
        world: World) -> None:
    w, ns = world, world.namespace
    with ThreadPoolExecutor(1) as pool:
        held = w.held_request(pool)
        # Restarted once the wake is on the InferenceService (a wake still in flight when
        # the activator stops is lost with it; the client's retry then makes a new one).
        w.cluster.wait_for(lambda: w.activator.count("slo_activator_wakes_total") >= 1,
                           timeout=10, desc="the wake recorded")
        w.restart_activator(ActivatorConfig())
        with pytest.raises(requests.ConnectionError):
            held.result(30)  # its connection is gone: the client retries
    # The wake was recorded before the restart: the service comes up without another one.
    w.cluster.wait_for(lambda: w.status("chat")["status"].get("desiredReplicas") == 1,
                       timeout=30, desc="woken by the recorded wake")
    where = w.cluster.wait_for(lambda: w.url("chat"), timeout=30, desc="a route")
    status, _, _ = post(where[1], ns, "chat")  # the retry, through the new activator or a pod
    assert status == 200


def test_a_service_deleted_while_waking_answers_its_held_requests_at_once(
        world: World) -> None:
    w, ns = world, world.namespace
    with ThreadPoolExecutor(1) as pool:
        held = w.held_request(pool)
        w.cluster.kubectl("delete", "infsvc", "-n", ns, "chat", "--wait=false")
        status, seconds, _ = held.result(30)
    assert status == 404 and seconds < COLD_START_S + 5
    # The route goes with its owner (garbage collection).
    w.cluster.wait_for(lambda: route_slice(w.cluster, ns, "chat") is None, timeout=60,
                       desc="the route collected")
