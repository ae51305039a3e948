"""The operator killed (SIGKILL) in the middle of an action, then restarted, on the real stack.

The real operator process (``slo-operator run``, one-second passes, under the chart's
ClusterRole) reads its Prometheus query API from ``PromQueryFake``
(``tests/integration/prom_query_fake.py``), a loopback HTTP server that answers the pass's
ten queries with what a given load would show, so that the decisions are known in
advance and do not wait for a load generator. Everything else is real: the API server,
the controller manager, the kwok nodes and pods.

A reconcile writes the status (the decision: ``desiredReplicas``, ``batchLimit``, the
law's memory) and the objects that carry it out (the Deployment's server-side apply, the
pods' live-limit annotations) one after the other (``reconcile.planner.plan_reconcile``).
To kill the process exactly between two writes of one action, whichever the operator
makes first, it runs through a small bootstrap (:data:`BOOTSTRAP`) that wraps the
Kubernetes adapter's writer (``adapters.kube.Kube``), traces every write to the log and
sends the process SIGKILL right after a named one: the first write that carries a new
replica count, or the first pod patch once the test arms it. A kill from outside
(``Popen.kill``) once the scale-out's status was written covers a finished action. After
each kill a plain ``slo-operator run`` is started.

Checked: the Deployment's ``metadata.generation`` (the API server bumps it on every spec
change: a scale undone and redone shows as two more), each pod's live-limit annotation as a
watch delivers every change of it, the pod patches the API server served
(``apiserver_request_total``), the status's decision history and the law's scale-in
stabilization, and no traceback in the restarted operator's log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from urllib3.exceptions import ProtocolError

from slo_devtools.devenv.control_plane import LocalCluster, free_port
from slo_operator.api.models import GROUP, VERSION
from slo_operator.api.observe import ServiceKey
from slo_operator.control import reasons as R
from slo_operator.render.objects import ANNOTATION_INFLIGHT_LIMIT
from tests.integration.operator_support import (
    OPERATOR_NS,
    ROOT,
    bind_role,
    chart_cluster_role,
    conditions,
    ensure_namespace,
    install_crds,
    only_deployment,
)
from tests.integration.prom_query_fake import PromQueryFake
from tests.integration.test_api_requests import request_counts
from tests.operator.reconcile.prom_fake import Load

pytestmark = pytest.mark.integration

WINDOW = "60s"  # the policies' SLO window: the fake answers the queries built for it
INTERVAL = 1.0  # seconds between periodic passes
KEY_NAME = "chat"
# Loads the fake Prometheus reports (the unit tests' shapes, tests/operator/reconcile).
QUIET = Load(rate=2.0, e2e_s=0.2, ttft_s=0.04, running=2, output_tokens=5)
OVERLOAD = Load(rate=400.0, e2e_s=3.0, ttft_s=1.0, waiting=40, running=200, output_tokens=5)
# KV cache past the law's KV_FULL (0.98): the live limit comes down (control.law).
# Three pods report (``pods``): a scale-in never waits for unreported pods.
KV_FULL = Load(rate=5.0, e2e_s=0.3, ttft_s=0.05, running=4, kv=0.99, pods=3)
CALM = Load(rate=5.0, e2e_s=0.3, ttft_s=0.05, running=4, kv=0.3, pods=3)
# Passes of the restarted operator watched after it caught up: enough for the resume
# handlers, the first periodic passes and the owned-object refreshes they cause.
SETTLE_PASSES = 4
POD_PATCH = ("PATCH", "pods", "")  # apiserver_request_total: a pod's metadata patched

# Runs the operator's CLI with the writer wrapped to SIGKILL the process between two writes
# of one action, whichever of them the operator makes first:
#   SLO_TEST_KILL=replicas:<n>  right after the first write that carries <n> replicas (the
#                               Deployment's apply or the status's desiredReplicas)
#   SLO_TEST_KILL=pod:<path>    right after the first pod patch made once <path> exists
#                               (the test creates it to arm the kill)
# Every write it lets through is traced to the log ("bootstrap: ...").
BOOTSTRAP = """
import os, signal, sys
from slo_operator.adapters.kube import Kube
from slo_operator.cli import main

point = os.environ.get("SLO_TEST_KILL", "")
kind_of, arg = point.split(":", 1)
apply, patch_status, patch_pod = Kube.apply, Kube.patch_status, Kube.patch_pod

def wrote(what, kill):
    print(f"bootstrap: {what}", flush=True)
    if kill:
        print("bootstrap: SIGKILL", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

def traced_apply(self, obj):
    apply(self, obj)
    replicas = (obj.get("spec") or {}).get("replicas") if obj["kind"] == "Deployment" else None
    wrote(f"applied {obj['kind']} {obj['metadata']['name']} replicas {replicas}",
          kind_of == "replicas" and str(replicas) == arg)

def traced_patch_status(self, kind, namespace, name, status):
    patch_status(self, kind, namespace, name, status)
    wrote(f"status of {kind} {namespace}/{name}: desiredReplicas "
          f"{status.get('desiredReplicas')} batchLimit {status.get('batchLimit')}",
          kind_of == "replicas" and kind == "InferenceService"
          and str(status.get("desiredReplicas")) == arg)

def traced_patch_pod(self, namespace, name, patch):
    patch_pod(self, namespace, name, patch)
    wrote(f"patched pod {namespace}/{name}: {patch}",
          kind_of == "pod" and os.path.exists(arg))

Kube.apply, Kube.patch_status, Kube.patch_pod = (
    traced_apply, traced_patch_status, traced_patch_pod)
main(prog_name="slo-operator")
"""


class Operator:
    """``slo-operator run`` (through :data:`BOOTSTRAP` when ``kill`` names a point)."""

    def __init__(self, kubeconfig: Path, log_path: Path, prometheus_url: str,
                 kill: str = "") -> None:
        self.log_path = log_path
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLO_")}
        env |= {"SLO_RECONCILE_INTERVAL": str(INTERVAL), "SLO_PROMETHEUS_URL": prometheus_url,
                "SLO_KUBECONFIG": str(kubeconfig), "KUBECONFIG": str(kubeconfig)}
        argv = [sys.executable, "-m", "slo_operator.cli"]
        if kill:
            env["SLO_TEST_KILL"] = kill
            argv = [sys.executable, "-c", BOOTSTRAP]
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [*argv, "run", "--kubeconfig", str(kubeconfig),
             "--liveness", f"http://127.0.0.1:{self.port}/healthz"],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def running(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"operator exited with {self.proc.returncode}:\n"
                               f"{self.logs()[-3000:]}")
        return True

    def killed(self) -> bool:
        """Whether the process ended by SIGKILL (its own, at the bootstrap's point)."""
        return self.proc.poll() == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()


class Stack:
    """One test's namespace, fake Prometheus and operator processes (stopped at the end,
    their logs' tails printed)."""

    def __init__(self, cluster: LocalCluster, namespace: str, tmp: Path) -> None:
        self.cluster, self.namespace, self.tmp = cluster, namespace, tmp
        self.key = ServiceKey(namespace, KEY_NAME)
        self.prom = PromQueryFake({self.key: QUIET}, window=WINDOW)
        install_crds(cluster)
        ensure_namespace(cluster, OPERATOR_NS)
        self.kubeconfig = bind_role(cluster, chart_cluster_role(cluster), OPERATOR_NS,
                                    f"slo-restart-{namespace}")
        self.api = cluster.api_client()
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apps = kubernetes.client.AppsV1Api(self.api)
        self.operators: list[Operator] = []

    def start(self, kill: str = "") -> Operator:
        op = Operator(self.kubeconfig, self.tmp / f"operator-{len(self.operators)}.log",
                      self.prom.url, kill)
        self.operators.append(op)
        return op

    def apply(self, policy: dict[str, Any]) -> None:
        docs = [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
                 "metadata": {"name": "gold"}, "spec": {"window": WINDOW, **policy}},
                {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
                 "metadata": {"name": KEY_NAME},
                 "spec": {"model": {"name": "org/chat", "sizeBillions": 8},
                          "hardware": {"gpuProducts": ["H100"]},
                          "sloPolicyRef": {"name": "gold"}}}]
        self.cluster.kubectl("apply", "-n", self.namespace, "-f", "-",
                             input=yaml.safe_dump_all(docs))

    def wait(self, predicate: Callable[[], Any], timeout: float, desc: str) -> Any:
        """``cluster.wait_for``; on a timeout the service's status is in the message."""
        try:
            return self.cluster.wait_for(predicate, timeout=timeout, desc=desc)
        except TimeoutError as e:
            raise TimeoutError(f"{e}; status: {self.status()}") from e

    def status(self) -> dict[str, Any]:
        svc: Any = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "inferenceservices", KEY_NAME)
        status: dict[str, Any] = svc.get("status") or {}
        return status

    def deployment(self) -> tuple[int, int]:
        """The Deployment's (spec.replicas, metadata.generation)."""
        dep = only_deployment(self.cluster, self.namespace, KEY_NAME)
        return dep["spec"]["replicas"], dep["metadata"]["generation"]

    def pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{GROUP}/service={KEY_NAME}").items)

    def running_pods(self) -> int:
        return sum(1 for p in self.pods() if p.status.phase == "Running")

    def limits(self) -> dict[str, str | None]:
        return {p.metadata.name: (p.metadata.annotations or {}).get(ANNOTATION_INFLIGHT_LIMIT)
                for p in self.pods()}

    def decided(self, reason_not: str = R.WAITING_FOR_REPLICAS) -> dict[str, Any] | None:
        """The status once the law decided on metrics (a decision other than
        ``reason_not``) and the service is Ready."""
        status = self.status()
        last = (status.get("lastDecisions") or [{}])[-1]
        ready = conditions({"status": status}).get("Ready", {}).get("status") == "True"
        return status if ready and last.get("reason") not in (None, reason_not) and (
            (status.get("observed") or {}).get("state") == "OK") else None

    def close(self) -> None:
        for op in self.operators:
            op.stop()
            print(f"\n--- {op.log_path.name} (exit {op.proc.returncode}) ---\n"
                  f"{op.logs()[-2500:]}")
        self.prom.stop()
        self.api.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def stack(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    s = Stack(cluster, namespace, tmp_path)
    try:
        yield s
    finally:
        s.close()


class LimitWatch:
    """Every value of each pod's live-limit annotation, in order: the listed one, then
    each a watch of the pods delivers from the listing on (repeats of one value folded).
    A stream the server ends is resumed from the last resourceVersion seen; one it can
    no longer resume (410 Gone: events lost) fails the test."""

    def __init__(self, s: Stack) -> None:
        selector = f"{GROUP}/service={KEY_NAME}"
        listed: Any = s.core.list_namespaced_pod(s.namespace, label_selector=selector)
        self.seen: dict[str, list[str | None]] = {
            p.metadata.name: [(p.metadata.annotations or {}).get(ANNOTATION_INFLIGHT_LIMIT)]
            for p in listed.items}
        self.watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
        self.error: BaseException | None = None
        self.stopping = False
        version = listed.metadata.resource_version

        def run() -> None:
            nonlocal version
            while not self.stopping:
                try:
                    for ev in self.watch.stream(  # type: ignore[no-untyped-call]
                            s.core.list_namespaced_pod, s.namespace,
                            label_selector=selector, resource_version=version,
                            timeout_seconds=60):
                        pod = ev["object"]
                        version = pod.metadata.resource_version
                        value = (pod.metadata.annotations or {}).get(
                            ANNOTATION_INFLIGHT_LIMIT)
                        values = self.seen.setdefault(pod.metadata.name, [])
                        if not values or values[-1] != value:
                            values.append(value)
                except ProtocolError:
                    continue  # the stream broke off: resumed from ``version``
                except BaseException as e:  # reported by the test, not lost in the thread
                    if not self.stopping:
                        self.error = e
                    return

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self) -> dict[str, list[str | None]]:
        self.stopping = True
        self.watch.stop()  # type: ignore[no-untyped-call]
        self.thread.join(timeout=10)
        assert self.error is None, self.error
        return self.seen


def passes(op: Operator) -> int:
    """The number of the operator's last finished periodic pass (its log)."""
    found = re.findall(r"Finished periodic pass (\d+):", op.logs())
    return int(found[-1]) if found else 0


# The strict xfails below expect an AssertionError (the undo they name); what the test
# needs on the way (the kill inside the window, no traceback) fails outright instead.
def require(ok: bool, what: str) -> None:
    if not ok:
        pytest.fail(what)


def no_traceback(op: Operator) -> None:
    require("Traceback" not in op.logs(), f"a traceback:\n{op.logs()[-3000:]}")


def test_a_kill_between_the_scale_and_its_status_write_scales_once(stack: Stack) -> None:
    """Killed between the Deployment's apply and the status patch of one scale-out (in
    whichever order the operator makes them), the restarted operator finishes the action:
    3 replicas, the Deployment's spec changed once, the decision in status."""
    s = stack
    # Stabilization long past the test: the replicas can only fall back by an undo.
    s.apply({"scaling": {"minReplicas": 1, "maxReplicas": 3,
                         "scaleDownStabilization": "300s"},
             "batching": {"mode": "off"}})
    first = s.start(kill="replicas:3")
    s.wait(lambda: first.running() and s.running_pods() == 1 and s.decided(),
           timeout=120, desc="one replica running, decided from metrics")
    replicas, generation = s.deployment()
    require(replicas == 1, f"{replicas} replicas before the overload")

    s.prom.loads[s.key] = OVERLOAD
    s.wait(first.killed, timeout=60, desc="operator killed between the two writes")
    killed_at = (s.deployment()[0], s.status()["desiredReplicas"])
    # The kill fell between the two writes: one of them says 3, the other still 1.
    require(sorted(killed_at) == [1, 3],
            f"not killed between the writes: (Deployment, status) replicas {killed_at}")

    second = s.start()
    s.wait(lambda: second.running() and s.status().get("desiredReplicas") == 3
           and s.deployment()[0] == 3,
           timeout=90, desc="the Deployment and the status at 3 replicas")
    start = passes(second)
    s.wait(lambda: second.running() and passes(second) >= start + SETTLE_PASSES,
           timeout=60, desc=f"{SETTLE_PASSES} passes of the restarted operator")
    no_traceback(second)
    status = s.status()
    print(f"\nkilled at (Deployment, status) replicas {killed_at}; Deployment generation "
          f"{generation} before the scale-out, {s.deployment()[1]} after the restart")
    assert status["lastDecisions"][-1]["replicas"] == 3
    # One scale-out in all: no replica count in between, one spec change.
    assert s.deployment() == (3, generation + 1), (
        f"Deployment (replicas, generation) {s.deployment()}, before the scale-out "
        f"(1, {generation}); restarted operator's log:\n{second.logs()[-3000:]}")


def test_a_restart_after_a_scale_out_keeps_the_scale_in_stabilization(stack: Stack) -> None:
    s = stack
    s.apply({"scaling": {"minReplicas": 1, "maxReplicas": 3,
                         "scaleDownStabilization": "300s"},
             "batching": {"mode": "off"}})
    first = s.start()
    s.wait(lambda: first.running() and s.running_pods() == 1 and s.decided(),
           timeout=120, desc="one replica running, decided from metrics")
    s.prom.loads[s.key] = OVERLOAD

    def scaled() -> dict[str, Any] | None:
        status = s.status()
        return status if first.running() and status.get("desiredReplicas") == 3 else None

    s.wait(scaled, timeout=60, desc="status: scaled out to 3")
    first.proc.kill()  # at once, right after the decision was written
    first.proc.wait()
    written = s.status()
    replicas, generation = s.deployment()
    assert replicas == 3
    # The load falls away: the law wants one replica, its stabilization holds three.
    s.prom.loads[s.key] = replace(QUIET, pods=3)
    s.wait(lambda: s.running_pods() == 3, timeout=90, desc="three replicas")

    second = s.start()
    s.wait(lambda: second.running() and passes(second) >= SETTLE_PASSES,
           timeout=90, desc=f"{SETTLE_PASSES} passes of the restarted operator")

    def holding() -> dict[str, Any] | None:
        status = s.status()
        last = status["lastDecisions"][-1]
        return status if last["time"] != written["lastDecisions"][-1]["time"] and (
            last["reason"] == R.STABILIZING) else None

    status = s.wait(holding, timeout=60,
                                desc="a decision of the restarted operator: Stabilizing")
    assert status is not None
    no_traceback(second)
    assert status["desiredReplicas"] == 3 and status["lastDecisions"][-1]["replicas"] == 3
    # The decision history carried over: the scale-out is still in it.
    assert written["lastDecisions"][-1] in status["lastDecisions"]
    # The law's memory carried over: the scale-out's wish (its need, past maxReplicas)
    # is still in the window of wishes that holds the replicas.
    wishes = status["control"]["state"]["recommendations"]
    assert max(n for _, n in wishes) >= 3, wishes
    assert s.deployment() == (3, generation)


@dataclass(frozen=True)
class LimitRun:
    """What one kill between the pods' live-limit patches and the restart left."""

    old: str  # the limit every pod had before
    decided: str  # the limit the killed operator decided and gave one pod
    status_at_kill: int  # status.batchLimit when the process was killed
    seen: dict[str, list[str | None]]  # each pod's annotation values (LimitWatch)
    final: dict[str, str | None]  # each pod's annotation at the end
    patches: int  # pod patches the API server served from before the decision on


def kill_between_pod_patches(s: Stack) -> LimitRun:
    """Three pods at one live limit; the KV cache fills, the law lowers the limit, and the
    operator is killed right after the first pod's patch; a new one is started and awaited
    until every pod and the status carry the decided limit, then a few passes more."""
    armed = s.tmp / "armed"
    s.apply({"scaling": {"minReplicas": 3, "maxReplicas": 3},
             "batching": {"mode": "live", "minBatch": 8, "maxBatch": 64}})
    s.prom.loads[s.key] = CALM
    first = s.start(kill=f"pod:{armed}")

    def settled() -> dict[str, Any] | None:
        status = s.decided()
        if not (first.running() and status and s.running_pods() == 3):
            return None
        limits = set(s.limits().values())
        return status if limits == {str(status["batchLimit"])} else None

    old = str(s.wait(settled, timeout=120,
                     desc="three pods running at the decided limit")["batchLimit"])
    watch, requests = LimitWatch(s), request_counts(s.cluster)
    armed.touch()
    s.prom.loads[s.key] = KV_FULL
    s.wait(first.killed, timeout=60, desc="operator killed after one pod patch")
    limits = s.limits()
    new = {v for v in limits.values() if v != old}
    # The kill fell inside the action: one pod at the new limit, the others at the old.
    require(len(new) == 1 and sum(v != old for v in limits.values()) == 1,
            f"not killed between the pod patches: {limits}")
    decided = str(new.pop())
    status_at_kill = s.status()["batchLimit"]

    second = s.start()

    def patched() -> bool:
        return second.running() and str(s.status().get("batchLimit")) == decided and set(
            s.limits().values()) == {decided}

    s.wait(patched, timeout=90, desc=f"every pod and the status at {decided}")
    s.prom.loads[s.key] = CALM  # no further lowering: the limit rests for a window
    start = passes(second)
    s.wait(lambda: second.running() and passes(second) >= start + SETTLE_PASSES,
           timeout=60, desc=f"{SETTLE_PASSES} passes of the restarted operator")
    seen = watch.stop()
    patches = request_counts(s.cluster)[POD_PATCH] - requests[POD_PATCH]
    print(f"\nlive limit {old} -> {decided} on {len(limits)} pods (status {status_at_kill} "
          f"at the kill): {patches} pod patches; annotation values seen: {seen}")
    no_traceback(second)
    return LimitRun(old, decided, status_at_kill, seen, s.limits(), patches)


def test_a_kill_between_pod_patches_moves_each_pod_once_to_the_decided_limit(
        stack: Stack, record_property: Any) -> None:
    """Killed after the first of three pods got a new live limit, the restarted operator
    moves the other two to it and leaves the first alone."""
    r = kill_between_pod_patches(stack)
    record_property("pod_patches", r.patches)
    assert set(r.final.values()) == {r.decided} and len(r.final) == 3
    # From the decision on, every pod's annotation moved once: to the decided limit ...
    assert r.seen == {name: [r.old, r.decided] for name in r.final}, r.seen
    # ... by one patch each (the first before the kill, the two others after the restart),
    # not the same value again while the restarted operator's watch cache catches up.
    assert r.patches == len(r.final), r.patches
