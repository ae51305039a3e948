"""Replica models for the pods of a local cluster: what a GPU node would run, without GPUs.

:class:`ReplicaHarness` watches the pods the operator manages
(``app.kubernetes.io/managed-by=slo-operator``) and, for every Running pod, serves what
the pod would serve: the real admission gateway (``slo_runtime.gateway``) in front of a
replica model of vLLM (``slo_devtools.replica.server``), both aiohttp applications on free
loopback ports in one background event loop. When the pod goes away it leaves the
endpoints and scrape targets at once and its servers stop once its requests in flight
finish, at most the pod's ``terminationGracePeriodSeconds`` later, as on a node (stopping
the harness cuts them after ``STOP_GRACE_S``).

- Prometheus: each replica is registered through the file service discovery of a
  :class:`~slo_devtools.devenv.prometheus_server.PrometheusServer`, two endpoints per pod
  (gateway ``/metrics`` and vLLM's ``/engine/metrics`` through the gateway) labelled
  ``namespace``, ``pod``, ``service``, ``tenant`` (and ``policy`` when the pod has it),
  the labels a Kubernetes pod scrape config would attach.
- The live limit: the pod annotation ``inference.slo-operator.io/inflight-limit`` is
  written to the replica's limit file, which the real gateway polls (0.2 s), as the
  kubelet refreshes the downward-API file from the annotation. A change reaches the
  gateway within about a second of the pod update.
- Step times: the shared step model (``slo_runtime.stepmodel``) calibrated from the
  packaged node profiles, for the model size named in the pod's ``SLO_ENGINE_ARGS``,
  moved to the pod's GPU (the node's GPU Feature Discovery labels, else the pod's
  ``inference.slo-operator.io/gpu-product`` label) by the catalogue's bandwidth and
  compute ratios, at the precision the arguments ask for (``--quantization`` FP8 method,
  ``--kv-cache-dtype``). ``speed`` divides every step time and the cold start (time
  compression); ``cold_start_s`` overrides the model's cold start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import kubernetes
from aiohttp import web

from slo_devtools.devenv.prometheus_server import PrometheusServer, Target
from slo_devtools.replica.server import Replica
from slo_operator.hardware import classify_node, resolve_product
from slo_operator.hardware.catalogue import HardwareClass
from slo_runtime import contract
from slo_runtime.gateway import Gateway, GatewayConfig, TenantsConfig, start_site
from slo_runtime.limitwatch import parse_limit
from slo_runtime.stepmodel import StepModel, load_profiles, select_profile

log = logging.getLogger("slo_devtools.devenv.replica_pods")

SELECTOR = f"{contract.LABEL_MANAGED_BY}={contract.MANAGED_BY}"
DEFAULT_SHAPE = "llama-3.1-8b"
# A deleted pod's requests in flight get its grace period to finish (Kubernetes' default
# where the pod sets none; the operator renders 120 s). Stopping the harness cuts the
# drains still running and gives requests this long, so it stays inside its 30 s bound.
DEFAULT_GRACE_S = 30.0
STOP_GRACE_S = 10.0
DRAIN_POLL_S = 0.1
# vLLM 0.32.0 defaults where the arguments say nothing.
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


def packaged_profiles() -> list[dict[str, Any]]:
    """The node profiles shipped in ``slo_operator/data/profiles``."""
    return load_profiles(Path(str(resources.files("slo_operator") / "data" / "profiles")))


# --- what a pod asks for (pure) ----------------------------------------------------------
@dataclass(frozen=True)
class PodReplica:
    """What the harness needs to know about one pod."""

    namespace: str
    pod: str
    service: str
    tenant: str
    policy: str
    model_name: str
    model: str
    precision: str                 # bf16 | fp16 | fp8
    kv_cache_dtype: str
    max_num_seqs: int
    max_num_batched_tokens: int
    tensor_parallel: int
    limit: int | None              # the live in-flight limit annotation
    grace_s: float = DEFAULT_GRACE_S  # spec.terminationGracePeriodSeconds
    pre_stop_s: float = 0.0  # the longest preStop sleep of its containers

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.pod


def engine_args(pod: Mapping[str, Any]) -> list[str]:
    """The pod's ``SLO_ENGINE_ARGS`` (first container that sets it), or []."""
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        for env in ctr.get("env") or []:
            if env.get("name") == contract.ENV_ENGINE_ARGS and "value" in env:
                try:
                    args = json.loads(env["value"])
                except ValueError:
                    return []
                return [str(a) for a in args] if isinstance(args, list) else []
    return []


def _arg_values(args: Sequence[str]) -> dict[str, str]:
    options, _ = contract.load_vllm_spec().parse(args)
    return {o.action.dest: (o.values[0] if o.values else "") for o in options
            if o.nested_key is None}


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def pod_replica(pod: Mapping[str, Any]) -> PodReplica:
    """Read one pod (a dict as the API serves it) into a :class:`PodReplica`."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    vals = _arg_values(engine_args(pod))
    quant = vals.get("quantization", "")
    if quant in contract.FP8_QUANT_METHODS:
        precision = "fp8"
    elif vals.get("dtype") in ("float16", "half"):
        precision = "fp16"
    else:
        precision = "bf16"
    served = vals.get("served_model_name") or ""
    model = vals.get("model") or vals.get("model_tag") or "model"
    return PodReplica(
        namespace=str(meta.get("namespace", "")), pod=str(meta.get("name", "")),
        service=str(labels.get(contract.LABEL_SERVICE, "")),
        tenant=str(labels.get(contract.LABEL_TENANT, "")),
        policy=str(labels.get(contract.LABEL_POLICY, "")),
        model_name=served or model, model=model, precision=precision,
        kv_cache_dtype=vals.get("kv_cache_dtype") or "auto",
        max_num_seqs=_int(vals.get("max_num_seqs"), DEFAULT_MAX_NUM_SEQS),
        max_num_batched_tokens=_int(vals.get("max_num_batched_tokens"),
                                    DEFAULT_MAX_NUM_BATCHED_TOKENS),
        tensor_parallel=_int(vals.get("tensor_parallel_size"), 1),
        limit=parse_limit(str(ann.get(contract.ANNOTATION_INFLIGHT_LIMIT, ""))),
        grace_s=_grace(pod),
        pre_stop_s=_pre_stop(pod),
    )


def _grace(pod: Mapping[str, Any]) -> float:
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(value) if isinstance(value, int | float) and value >= 0 else DEFAULT_GRACE_S


def _pre_stop(pod: Mapping[str, Any]) -> float:
    """The longest ``lifecycle.preStop.sleep.seconds`` of the pod's containers (0: none)."""
    out = 0.0
    for c in (pod.get("spec") or {}).get("containers") or ():
        sleep = (((c or {}).get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}
        value = sleep.get("seconds")
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            out = max(out, float(value))
    return out


async def drain(busy: Callable[[], bool], runners: Sequence[web.AppRunner],
                grace_s: float, stop: asyncio.Event, poll_s: float = DRAIN_POLL_S,
                pre_stop_s: float = 0.0) -> None:
    """A deleted pod's end, as on a node: its servers keep serving through the preStop
    sleep (``pre_stop_s``: the pod is out of the endpoints, and a client that read them
    just before still gets an answer), then wait until nothing is ``busy``, all within
    ``grace_s`` of the deletion (the kubelet's bound, preStop included), then stop
    (``runners``). Once ``stop`` is set (the harness stopping), stop them at once: each
    lets its requests in flight run for its runner's shutdown timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    if pre_stop_s > 0 and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), min(pre_stop_s, grace_s))
    while busy() and loop.time() < deadline and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), poll_s)
    await asyncio.gather(*(r.cleanup() for r in runners))


def pod_is_serving(pod: Mapping[str, Any]) -> bool:
    """Running and not being deleted: the pod's containers would be up."""
    meta = pod.get("metadata") or {}
    return (pod.get("status") or {}).get("phase") == "Running" and \
        not meta.get("deletionTimestamp")


def pod_hardware(pod: Mapping[str, Any], node_labels: Mapping[str, str] | None
                 ) -> HardwareClass | None:
    """The pod's GPU: its node's labels first, else its gpu-product label."""
    if node_labels:
        hw = classify_node(node_labels).hardware
        if hw is not None:
            return hw
    product = ((pod.get("metadata") or {}).get("labels") or {}).get(contract.LABEL_GPU)
    return resolve_product(product).hardware if product else None


def shape_for(model: str, profiles: Sequence[Mapping[str, Any]]) -> str:
    """The profiled model shape whose size tag ("8b", "70b") the model name carries."""
    name = model.lower()
    shapes = sorted({str(p.get("shape")) for p in profiles}, key=len, reverse=True)
    for shape in shapes:
        size = shape.rsplit("-", 1)[-1]
        if f"-{size}" in name or f"{size}-" in name or name.endswith(size):
            return shape
    return DEFAULT_SHAPE if DEFAULT_SHAPE in shapes else shapes[0]


def step_model(rep: PodReplica, hw: HardwareClass | None,
               profiles: Sequence[Mapping[str, Any]], speed: float = 1.0) -> StepModel:
    """The shared step model for this pod's model, GPU and precision."""
    prof = select_profile(profiles, shape_for(rep.model, profiles), 1024)
    m = StepModel.from_profile(prof, rep.precision, kv_cache_dtype=rep.kv_cache_dtype,
                               tensor_parallel=rep.tensor_parallel)
    ref = resolve_product(str((prof.get("hardware") or {}).get("product", ""))).hardware
    if hw is not None and ref is not None and hw.product != ref.product and \
            hw.memory_bandwidth_gbps and ref.memory_bandwidth_gbps:
        flops = "dense_fp8_tflops" if rep.precision == "fp8" and hw.dense_fp8_tflops \
            else "dense_bf16_tflops"
        mine, theirs = getattr(hw, flops), getattr(ref, flops)
        compute = mine / theirs if mine and theirs else \
            hw.memory_bandwidth_gbps / ref.memory_bandwidth_gbps
        m = m.for_hardware(hw.product, hw.memory_bandwidth_gbps / ref.memory_bandwidth_gbps,
                           compute, int(hw.memory_gib * 2**30))
    return m.sped_up(speed) if speed != 1.0 else m


# --- the running servers -----------------------------------------------------------------
@dataclass
class RunningReplica:
    spec: PodReplica
    gpu: str
    steps: StepModel
    limit_file: Path
    replica: Replica
    gateway: Gateway
    engine_port: int
    gateway_port: int
    runners: list[web.AppRunner] = field(default_factory=list)

    @property
    def url(self) -> str:
        """What clients, probes and Prometheus reach (the pod's port 8000)."""
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def ready(self) -> bool:
        return self.replica.ready

    @property
    def limit(self) -> int:
        return self.gateway.admission.limit

    def targets(self) -> list[Target]:
        s = self.spec
        labels = {"namespace": s.namespace, "pod": s.pod, "service": s.service,
                  "tenant": s.tenant}
        if s.policy:
            labels["policy"] = s.policy
        addr = f"127.0.0.1:{self.gateway_port}"
        return [Target(addr, labels, contract.GATEWAY_METRICS_PATH),
                Target(addr, labels, contract.ENGINE_METRICS_PATH)]


@dataclass(frozen=True)
class ReplicaInfo:
    """A snapshot of one replica, safe to read from any thread."""

    namespace: str
    pod: str
    service: str
    tenant: str
    url: str
    gpu: str
    precision: str
    limit: int
    ready: bool
    kv_capacity_tokens: int


class ReplicaHarness:
    """Watch the cluster's managed pods and serve a replica model for each Running one."""

    def __init__(self, api_client: kubernetes.client.ApiClient, *,
                 prometheus: PrometheusServer | None = None, namespace: str | None = None,
                 speed: float = 1.0, cold_start_s: float | None = None,
                 profiles: Sequence[Mapping[str, Any]] | None = None,
                 workdir: Path | None = None, limit_poll_s: float = 0.2,
                 default_max_tokens: int = 16) -> None:
        if speed <= 0:
            raise ValueError(f"speed: must be > 0, got {speed}")
        self.api = api_client
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.prometheus = prometheus
        self.namespace = namespace
        self.speed = speed
        self.cold_start_s = cold_start_s
        self.profiles = list(profiles) if profiles is not None else packaged_profiles()
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="slo-replicas-"))
        self.limit_poll_s = limit_poll_s
        self.default_max_tokens = default_max_tokens
        self._replicas: dict[tuple[str, str], RunningReplica] = {}
        self._draining: set[asyncio.Task[None]] = set()  # deleted pods still draining
        self._stopping = asyncio.Event()  # set when the harness stops: drains cut short
        self._nodes: dict[str, dict[str, str]] = {}
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever,
                                             name="replica-harness-loop", daemon=True)
        self._watch_thread = threading.Thread(target=self._watch_forever,
                                              name="replica-harness-watch", daemon=True)
        self._stop = threading.Event()
        self._watch: kubernetes.watch.Watch | None = None
        self.errors: list[str] = []

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> ReplicaHarness:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._loop_thread.start()
        self._watch_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]
        if self._loop_thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._stop_all(), self._loop)
            with contextlib.suppress(Exception):
                fut.result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=10)
        self._watch_thread.join(timeout=5)
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ReplicaHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what tests and the load generator read -------------------------------------------
    def replicas(self) -> list[ReplicaInfo]:
        return [ReplicaInfo(r.spec.namespace, r.spec.pod, r.spec.service, r.spec.tenant,
                            r.url, r.gpu, r.spec.precision, r.limit, r.ready,
                            r.steps.kv_capacity_tokens)
                for r in list(self._replicas.values())]

    def endpoints(self, namespace: str, service: str) -> list[str]:
        """Gateway URLs of the service's ready replicas, as a Service's endpoints."""
        return sorted(r.url for r in list(self._replicas.values())
                      if r.spec.namespace == namespace and r.spec.service == service
                      and r.ready)

    def wait_replicas(self, namespace: str, service: str, count: int,
                      timeout: float = 60.0, ready: bool = True) -> list[ReplicaInfo]:
        """Wait until exactly ``count`` replicas of the service exist (and are ready)."""
        from slo_devtools.devenv.control_plane import wait_for

        def check() -> list[ReplicaInfo] | bool:
            self._raise_errors()
            reps = [r for r in self.replicas()
                    if r.namespace == namespace and r.service == service
                    and (r.ready or not ready)]
            # An empty list is falsy: a wait for zero replicas succeeds with True.
            return (reps or True) if len(reps) == count else False

        got = wait_for(check, timeout=timeout, interval=0.1, max_interval=0.5,
                       desc=f"{count} replica(s) of {namespace}/{service}")
        return got if isinstance(got, list) else []

    def _raise_errors(self) -> None:
        if self.errors:
            raise RuntimeError("replica harness failed: " + "; ".join(self.errors))

    # --- the watch (its own thread) ------------------------------------------------------
    def _list(self) -> tuple[list[dict[str, Any]], str]:
        if self.namespace:
            res = self.core.list_namespaced_pod(self.namespace, label_selector=SELECTOR)
        else:
            res = self.core.list_pod_for_all_namespaces(label_selector=SELECTOR)
        pods = [self._dict(p) for p in res.items]
        return pods, str(res.metadata.resource_version if res.metadata else "")

    def _dict(self, obj: Any) -> dict[str, Any]:
        d: dict[str, Any] = self.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
        return d

    def _watch_forever(self) -> None:
        while not self._stop.is_set():
            try:
                pods, rv = self._list()
                self._sync(pods)
                self._watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
                kwargs: dict[str, Any] = {"label_selector": SELECTOR, "resource_version": rv,
                                          "timeout_seconds": 60}
                fn: Callable[..., Any] = self.core.list_pod_for_all_namespaces
                if self.namespace:
                    fn = self.core.list_namespaced_pod
                    kwargs["namespace"] = self.namespace
                for ev in self._watch.stream(fn, **kwargs):  # type: ignore[no-untyped-call]
                    if self._stop.is_set():
                        break
                    pod = self._dict(ev["object"])
                    if ev["type"] == "DELETED":
                        self._submit(self._remove(_key(pod)))
                    elif ev["type"] in ("ADDED", "MODIFIED"):
                        self._on_pod(pod)
            except Exception as e:  # a dropped watch relists; the harness never dies
                if self._stop.is_set():
                    return
                log.warning("Restarted pod watch after %s: %s", type(e).__name__, e)
                self._stop.wait(1.0)

    def _sync(self, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(_key(pod))
            self._on_pod(pod)
        for key in list(self._replicas):
            if key not in seen:
                self._submit(self._remove(key))

    def _on_pod(self, pod: dict[str, Any]) -> None:
        key = _key(pod)
        if not pod_is_serving(pod):
            if key in self._replicas:
                self._submit(self._remove(key))
            return
        spec = pod_replica(pod)
        running = self._replicas.get(key)
        if running is None:
            node = (pod.get("spec") or {}).get("nodeName")
            hw = pod_hardware(pod, self._node_labels(node) if node else None)
            self._submit(self._add(spec, hw))
        elif spec.limit is not None and spec.limit != running.spec.limit:
            log.info("Projected in-flight limit %d of pod %s/%s into %s", spec.limit, *key,
                     running.limit_file)
            running.spec = spec
            _write_limit(running.limit_file, spec.limit)

    def _node_labels(self, name: str) -> dict[str, str]:
        if name not in self._nodes:
            try:
                node = self.core.read_node(name)
                self._nodes[name] = dict((node.metadata.labels if node.metadata else None) or {})
            except kubernetes.client.ApiException:
                return {}
        return self._nodes[name]

    def _submit(self, coro: Any) -> None:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        # Wait, so events apply in order and the replica table is current afterwards.
        try:
            fut.result(timeout=30)
        except Exception as e:  # reported through wait_replicas
            self.errors.append(f"{type(e).__name__}: {e}")
            log.exception("Failed to apply a pod event")

    # --- the servers (the loop thread) ---------------------------------------------------
    async def _add(self, spec: PodReplica, hw: HardwareClass | None) -> None:
        if spec.key in self._replicas:
            return
        steps = step_model(spec, hw, self.profiles, self.speed)
        cold = self.cold_start_s if self.cold_start_s is not None else steps.cold_start_s
        pod_dir = self.workdir / spec.namespace / spec.pod
        pod_dir.mkdir(parents=True, exist_ok=True)
        limit_file = pod_dir / contract.LIMIT_FILE_NAME
        limit = spec.limit or spec.max_num_seqs
        _write_limit(limit_file, limit)
        replica = Replica(spec.model_name, steps, spec.max_num_seqs, steps.kv_capacity_tokens,
                          self.default_max_tokens,
                          max_num_batched_tokens=spec.max_num_batched_tokens,
                          cold_start_s=cold, kv_cache_dtype=spec.kv_cache_dtype)
        r_runner, r_port = await start_site(replica.app, "127.0.0.1", 0,
                                            shutdown_timeout=STOP_GRACE_S)
        gateway = Gateway(GatewayConfig(
            upstream=f"http://127.0.0.1:{r_port}", default_limit=limit,
            limit_file=str(limit_file), poll_interval_s=self.limit_poll_s,
            tenants=TenantsConfig(default_tenant=spec.tenant or "default")))
        g_runner, g_port = await start_site(gateway.app, "127.0.0.1", 0,
                                            shutdown_timeout=STOP_GRACE_S)
        running = RunningReplica(spec, hw.product if hw else "unknown", steps, limit_file,
                                 replica, gateway, r_port, g_port, [g_runner, r_runner])
        self._replicas[spec.key] = running
        log.info("Started replica %s/%s on %s (%s, %s, limit %d, cold start %.1fs)",
                 spec.namespace, spec.pod, running.url, running.gpu, spec.precision, limit,
                 cold)
        self._publish()

    async def _remove(self, key: tuple[str, str]) -> None:
        """As a deleted pod: out of the endpoints and the scrape targets at once; its
        requests in flight drain in the background (its grace period), so the next pod
        event is not held behind a long answer."""
        running = self._replicas.pop(key, None)
        if running is None:
            return
        self._publish()
        task = asyncio.get_running_loop().create_task(self._drain(key, running))
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    async def _drain(self, key: tuple[str, str], running: RunningReplica) -> None:
        admission = running.gateway.admission
        await drain(lambda: admission.in_flight + admission.queued() > 0, running.runners,
                    running.spec.grace_s, self._stopping, pre_stop_s=running.spec.pre_stop_s)
        log.info("Stopped replica %s/%s", *key)

    async def _stop_all(self) -> None:
        for key in list(self._replicas):
            await self._remove(key)
        self._stopping.set()  # the harness stops: no more grace
        if self._draining:
            await asyncio.gather(*self._draining, return_exceptions=True)

    def _publish(self) -> None:
        if self.prometheus is not None:
            self.prometheus.set_targets([t for r in self._replicas.values()
                                         for t in r.targets()])


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _write_limit(path: Path, limit: int) -> None:
    # Replace, never rewrite in place: the gateway must not read a half-written file.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{limit}")
    os.replace(tmp, path)
