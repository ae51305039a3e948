"""Helpers to install the project's CRDs and RBAC and run the real operator process."""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from slo_devtools.devenv.control_plane import LocalCluster, free_port
from slo_operator.render.names import service_label
from slo_runtime.contract import LABEL_SERVICE

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "slo-operator"
OPERATOR_NS = "slo-system"


def install_crds(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    for crd in ("inferenceservices", "slopolicies", "tenants"):
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            f"crd/{crd}.inference.slo-operator.io",
        )


def chart_cluster_role(cluster: LocalCluster) -> dict[str, Any]:
    """The ClusterRole exactly as the Helm chart ships it."""
    out = cluster.helm(
        "template", "slo-operator", str(CHART), "--namespace", OPERATOR_NS,
        "--show-only", "templates/clusterrole.yaml",
    ).stdout
    role: dict[str, Any] = yaml.safe_load(out)
    return role


def bind_role(
    cluster: LocalCluster, role: Mapping[str, Any], sa_namespace: str, sa_name: str
) -> Path:
    """Apply ``role`` under a name unique to the ServiceAccount; return its kubeconfig."""
    role = copy.deepcopy(dict(role))
    name = f"slo-test-{sa_namespace}-{sa_name}"
    role["metadata"] = {"name": name}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}],
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))
    return cluster.sa_kubeconfig(sa_namespace, sa_name)


def ensure_namespace(cluster: LocalCluster, name: str) -> None:
    cluster.kubectl("create", "namespace", name, check=False)


class OperatorProcess:
    """``slo-operator run`` as a real process under a ServiceAccount kubeconfig."""

    def __init__(self, kubeconfig: Path, log_path: Path, interval: float = 3.0,
                 prometheus_url: str | None = None, activator_service: str | None = None
                 ) -> None:
        """``interval``: seconds between periodic passes; ``prometheus_url``: the SLO
        loop's Prometheus (default: SLO_PROMETHEUS_URL from the environment, if any);
        ``activator_service``: ``--activator-service`` (scale to zero)."""
        self.port = free_port()
        self.log_path = log_path
        env = {**os.environ, "SLO_RECONCILE_INTERVAL": str(interval),
               "SLO_KUBECONFIG": str(kubeconfig), "KUBECONFIG": str(kubeconfig)}
        if prometheus_url:
            env["SLO_PROMETHEUS_URL"] = prometheus_url
        if activator_service:
            env["SLO_ACTIVATOR_SERVICE"] = activator_service
        self._log = open(log_path, "w")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slo_operator.cli", "run",
             "--kubeconfig", str(kubeconfig),
             "--liveness", f"http://127.0.0.1:{self.port}/healthz"],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.logs()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def deployments_of(cluster: LocalCluster, namespace: str, service: str) -> list[dict[str, Any]]:
    """The service's Deployments: one per GPU pool variant it runs on."""
    items = cluster.kubectl_json("get", "deploy", "-n", namespace, "-l",
                                 f"{LABEL_SERVICE}={service_label(service)}")["items"]
    return list(items)


def only_deployment(cluster: LocalCluster, namespace: str, service: str) -> dict[str, Any]:
    """The Deployment of a service that runs on one GPU pool."""
    items = deployments_of(cluster, namespace, service)
    assert len(items) == 1, [d["metadata"]["name"] for d in items]
    return items[0]


def events_for(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json(
        "get", "events", "-n", namespace,
        "--field-selector", f"involvedObject.name={name}",
    )["items"]
    return list(items)


def wait_event(cluster: LocalCluster, namespace: str, name: str, reason: str,
               type_: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
    """The first Event of ``reason`` (and ``type_``) about ``name``, once posted: Events
    follow the status and the objects they announce (docs/status-and-events.md, "Order of
    writes"), so a test that saw a condition waits for its Event."""

    def posted() -> dict[str, Any] | None:
        return next((e for e in events_for(cluster, namespace, name)
                     if e["reason"] == reason and type_ in (None, e["type"])), None)

    found: dict[str, Any] = cluster.wait_for(posted, timeout=timeout,
                                             desc=f"a {type_ or ''} {reason} Event of {name}")
    return found


@contextlib.contextmanager
def chart_operator(cluster: LocalCluster, log_dir: Path, account: str = "slo-operator", *,
                   interval: float = 3.0, prometheus_url: str | None = None,
                   log_tail: int = 4000, activator_service: str | None = None
                   ) -> Iterator[OperatorProcess]:
    """``slo-operator run`` under the chart's ClusterRole bound to ServiceAccount
    ``account``: CRDs installed, the process awaited healthy, stopped afterwards and the
    tail of its log printed (pytest shows it for a failed test)."""
    install_crds(cluster)
    ensure_namespace(cluster, OPERATOR_NS)
    kubeconfig = bind_role(cluster, chart_cluster_role(cluster), OPERATOR_NS, account)
    op = OperatorProcess(kubeconfig, log_dir / "operator.log", interval=interval,
                         prometheus_url=prometheus_url, activator_service=activator_service)
    try:
        cluster.wait_for(op.healthy, timeout=60, desc="operator liveness endpoint")
        yield op
    finally:
        op.stop()
        print(f"\n--- operator log ---\n{op.logs()[-log_tail:]}")
