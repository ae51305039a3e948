"""The chart on the real control plane: server-side dry run, schema errors, install with two
operator replicas of which one acts, handover when the active one dies or stops, upgrade
(CRDs included) and uninstall.

The chart's pods are fake (kwok runs no containers), so the two replicas that act are real
`slo-operator run --peering` processes authenticated as the chart's ServiceAccount: they
get exactly the chart's RBAC and its kopf peering object.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster, free_port
from tests.integration.operator_support import CHART, ROOT, conditions

pytestmark = pytest.mark.integration

RELEASE = "slo-operator"  # full name equals the release name: objects are "slo-operator*"
NS = "slo-ha"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
LIFETIME = int(VALUES["peering"]["lifetimeSeconds"])


def render(cluster: LocalCluster, *args: str) -> list[dict[str, Any]]:
    out = cluster.helm("template", RELEASE, str(CHART), "-n", NS, *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def apply_crds(cluster: LocalCluster) -> None:
    # What docs/install.md tells users to run before every upgrade.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    for crd in ("inferenceservices.inference.slo-operator.io",
                "slopolicies.inference.slo-operator.io", "clusterkopfpeerings.kopf.dev",
                "kopfpeerings.kopf.dev"):
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")


@pytest.mark.parametrize("args", [
    pytest.param((), id="defaults-cluster-wide"),
    pytest.param(("--set", "watchNamespaces={dry-a,dry-b}", "--set", "replicaCount=3"),
                 id="namespaced-three-replicas"),
    pytest.param(("--set", "peering.enabled=false", "--set", "replicaCount=1",
                  "--set", "metrics.enabled=false"), id="standalone-no-metrics"),
    pytest.param(("--set", "activator.enabled=false",), id="no-activator"),
])
def test_rendered_chart_is_accepted_by_the_api_server(cluster: LocalCluster,
                                                      args: tuple[str, ...]) -> None:
    cluster.helm("lint", str(CHART), *args)
    apply_crds(cluster)
    for ns in (NS, "dry-a", "dry-b"):
        cluster.kubectl("create", "namespace", ns, check=False)
    docs = render(cluster, *args)
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                           input=yaml.safe_dump_all(docs), check=False)
    assert proc.returncode == 0, proc.stderr
    kinds = {d["kind"] for d in docs}
    activator = {(d["kind"], d["metadata"]["name"]) for d in docs
                 if d["metadata"]["name"] == f"{RELEASE}-activator"}
    if "activator.enabled=false" in args:
        assert activator == set()
    else:
        assert activator == {(k, f"{RELEASE}-activator") for k in (
            "Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
            "PodDisruptionBudget")}
    if "peering.enabled=false" in args:
        assert not kinds & {"ClusterKopfPeering", "KopfPeering"}
        assert [d for d in docs if d["kind"] == "PodDisruptionBudget"
                and d["metadata"]["name"] == RELEASE] == []
        dep = next(d for d in docs
                   if d["kind"] == "Deployment" and d["metadata"]["name"] == RELEASE)
        assert dep["spec"]["strategy"]["type"] == "Recreate"
    elif any("watchNamespaces" in a for a in args):
        peerings = sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == "KopfPeering")
        assert peerings == ["dry-a", "dry-b"]
        assert sum(d["kind"] == "Role" for d in docs) == 2
    else:
        assert {"ClusterKopfPeering", "Service", "PodDisruptionBudget"} <= kinds


def test_operator_prometheus_rule_parses(cluster: LocalCluster, tmp_path: Path) -> None:
    from tests.support.tools import promtool

    docs = render(cluster, "--set", "prometheusRule.enabled=true",
                  "--set", "serviceMonitor.enabled=true")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    monitor = monitors["slo-operator"]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # The activator's hold times and timeouts are scraped from its own Service's pods.
    activator = monitors["slo-operator-activator"]
    service = next(d for d in docs if d["kind"] == "Service"
                   and d["metadata"]["name"] == "slo-operator-activator")
    assert activator["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert activator["spec"]["endpoints"][0]["port"] == "http"
    path = tmp_path / "operator-rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    proc = subprocess.run([str(promtool()), "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("args", "want"), [
    pytest.param(("--set", "replicaCount=0"), "/replicaCount", id="zero-replicas"),
    pytest.param(("--set", "peering.enabled=false"), "/replicaCount",
                 id="two-replicas-without-peering"),
    pytest.param(("--set", "metrics.port=80"), "/metrics/port", id="privileged-port"),
    pytest.param(("--set", "prometheusUrl=prometheus:9090"), "/prometheusUrl",
                 id="url-without-scheme"),
    pytest.param(("--set", "watchNamespaces={Team_A}"), "/watchNamespaces/0",
                 id="namespace-not-dns"),
    pytest.param(("--set", "replicas=2"), "'replicas' not allowed", id="misspelt-key"),
    pytest.param(("--set", "activator.port=80"), "/activator/port",
                 id="activator-privileged-port"),
    pytest.param(("--set", "activator.replicas=0"), "/activator/replicas",
                 id="activator-zero-replicas"),
    pytest.param(("--set", "activator.queuePerService=0"), "/activator/queuePerService",
                 id="activator-empty-queue"),
    pytest.param(("--set", "activator.timeoutSeconds=0"), "/activator/timeoutSeconds",
                 id="activator-no-timeout"),
    pytest.param(("--set", "activator.queue=5"), "'queue' not allowed",
                 id="activator-misspelt-key"),
])
def test_values_schema_names_the_bad_value(cluster: LocalCluster, args: tuple[str, ...],
                                           want: str) -> None:
    proc = cluster.helm("template", RELEASE, str(CHART), *args, check=False)
    assert proc.returncode != 0
    assert want in proc.stderr, proc.stderr


# ------------------------------------------------------------------ HA for real


class Replica:
    """One `slo-operator run --peering` process, as a pod of the chart would run it."""

    def __init__(self, name: str, kubeconfig: Path, peering: str, log_dir: Path) -> None:
        self.name = name
        self.health_port, self.metrics_port = free_port(), free_port()
        self.log_path = log_dir / f"operator-{name}.log"
        self._log = self.log_path.open("w")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "SLO_KUBECONFIG": str(kubeconfig),
               "POD_ID": name, "SLO_PEERING": peering,
               "SLO_PEERING_LIFETIME": str(LIFETIME), "SLO_RECONCILE_INTERVAL": "3",
               "SLO_METRICS_PORT": str(self.metrics_port)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slo_operator.cli", "run", "--kubeconfig", str(kubeconfig),
             "--liveness", f"http://127.0.0.1:{self.health_port}/healthz"],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def _get(self, port: int, path: str) -> str:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.logs()}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return str(r.read().decode())

    def healthy(self) -> bool:
        try:
            self._get(self.health_port, "/healthz")
        except OSError:
            return False
        return True

    def active(self) -> bool | None:
        try:
            text = self._get(self.metrics_port, "/metrics")
        except OSError:
            return None
        m = re.search(r"^slo_operator_peering_active (\S+)$", text, re.M)
        return None if m is None else float(m.group(1)) == 1.0

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture
def installed(cluster: LocalCluster) -> Iterator[None]:
    apply_crds(cluster)
    cluster.helm("install", RELEASE, str(CHART), "-n", NS, "--create-namespace", "--wait",
                 "--timeout", "180s")
    try:
        yield
    finally:
        cluster.helm("uninstall", RELEASE, "-n", NS, "--wait", check=False)


def example_objects(namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "llama-8b-h100.yaml").read_text())
            if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    return docs


def reconciled(cluster: LocalCluster, ns: str, name: str, generation: int | None = None) -> bool:
    obj = cluster.kubectl_json("get", "infsvc", "-n", ns, name)
    status = obj.get("status") or {}
    want = generation or obj["metadata"]["generation"]
    return "Ready" in conditions(obj) and status.get("observedGeneration") == want


def test_two_replicas_one_acts_and_a_standby_takes_over(
    cluster: LocalCluster, installed: None, namespace: str, tmp_path: Path,
    record_property: Any,
) -> None:
    dep = cluster.kubectl_json("get", "deployment", "-n", NS, RELEASE)
    assert dep["spec"]["replicas"] == 2 and dep["status"].get("readyReplicas") == 2
    peering = cluster.kubectl_json("get", "clusterkopfpeering", RELEASE)
    assert peering["metadata"]["name"] == RELEASE

    kubeconfig = cluster.sa_kubeconfig(NS, RELEASE, create=False)
    a = Replica("replica-a", kubeconfig, RELEASE, tmp_path)
    b: Replica | None = None
    try:
        cluster.wait_for(lambda: a.active() is True, timeout=90, desc="replica-a acting")
        b = Replica("replica-b", kubeconfig, RELEASE, tmp_path)
        cluster.wait_for(b.healthy, timeout=90, desc="replica-b healthy")
        cluster.wait_for(
            lambda: set(cluster.kubectl_json("get", "clusterkopfpeering", RELEASE)
                         .get("status") or {}) >= {"replica-a", "replica-b"},
            timeout=60, desc="both replicas in the peering object")
        assert b.active() is False and a.active() is True

        # The examples are reconciled under the chart's RBAC by the acting replica.
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(example_objects(namespace)))
        cluster.wait_for(lambda: reconciled(cluster, namespace, "llama-8b"), timeout=90,
                         desc="example reconciled by replica-a")
        assert b.active() is False
        # GitOps: the operator wrote nothing but status on either kind (docs/argocd.md).
        cluster.wait_for(lambda: "Ready" in conditions(
            cluster.kubectl_json("get", "slo", "-n", namespace, "chat-gold")),
            timeout=60, desc="policy reconciled")
        for kind, name in (("infsvc", "llama-8b"), ("slo", "chat-gold")):
            meta = cluster.kubectl_json("get", kind, "-n", namespace, name,
                                        "--show-managed-fields")["metadata"]
            assert not meta.get("finalizers")
            writers = [m for m in meta["managedFields"] if not m["manager"].startswith("kubectl")]
            assert writers and all(m.get("subresource") == "status" for m in writers), writers

        # The active replica dies without goodbye: the standby resumes after the lifetime.
        t0 = time.monotonic()
        a.stop(signal.SIGKILL)
        cluster.wait_for(lambda: b.active() is True, timeout=LIFETIME + 60,
                         desc="replica-b takes over")
        killed_handover = time.monotonic() - t0
        cluster.kubectl("patch", "infsvc", "-n", namespace, "llama-8b", "--type=merge",
                        "-p", '{"spec":{"replicas":{"max":4}}}')
        cluster.wait_for(lambda: reconciled(cluster, namespace, "llama-8b"), timeout=60,
                         desc="spec change reconciled by replica-b")
        killed_reconciled = time.monotonic() - t0
        record_property("handover_after_kill_s", round(killed_handover, 1))
        assert killed_handover <= LIFETIME + 15, killed_handover

        # A restarted replica starts later, so it stands by; the incumbent keeps acting.
        a = Replica("replica-a2", kubeconfig, RELEASE, tmp_path)
        cluster.wait_for(a.healthy, timeout=90, desc="replica-a2 healthy")
        cluster.wait_for(
            lambda: "replica-a2" in (cluster.kubectl_json("get", "clusterkopfpeering", RELEASE)
                                     .get("status") or {}),
            timeout=60, desc="replica-a2 in the peering object")
        assert a.active() is False and b.active() is True

        # A clean stop (what `kubectl delete pod` sends) removes itself: handover at once.
        t1 = time.monotonic()
        b.stop(signal.SIGTERM)
        cluster.wait_for(lambda: a.active() is True, timeout=LIFETIME + 30,
                         desc="replica-a2 takes over after a clean stop")
        clean_handover = time.monotonic() - t1
        record_property("handover_after_clean_stop_s", round(clean_handover, 1))
        print(f"\nhandover: {killed_handover:.1f}s after SIGKILL (lifetime {LIFETIME}s; "
              f"spec change reconciled after {killed_reconciled:.1f}s), "
              f"{clean_handover:.1f}s after SIGTERM")
        assert clean_handover < LIFETIME, clean_handover
    finally:
        for r in (a, b):
            if r is not None:
                r.stop()


def test_upgrade_applies_crds_and_values_then_uninstall_removes_everything_but_crds(
    cluster: LocalCluster, installed: None,
) -> None:
    # CRDs first (Helm never upgrades crds/), then the release.
    apply_crds(cluster)
    cluster.helm("upgrade", RELEASE, str(CHART), "-n", NS, "--wait", "--timeout", "180s",
                 "--set", "replicaCount=3", "--set", "peering.lifetimeSeconds=20")
    dep = cluster.kubectl_json("get", "deployment", "-n", NS, RELEASE)
    assert dep["spec"]["replicas"] == 3
    env = {e["name"]: e.get("value") for e in
           dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLO_PEERING_LIFETIME"] == "20" and env["SLO_PEERING"] == RELEASE
    cluster.wait_for(lambda: cluster.kubectl_json("get", "deployment", "-n", NS, RELEASE)
                     ["status"].get("readyReplicas") == 3, timeout=120, desc="3 ready")

    cluster.helm("uninstall", RELEASE, "-n", NS, "--wait")
    for kind, name, ns in (("deployment", RELEASE, NS), ("serviceaccount", RELEASE, NS),
                           ("service", f"{RELEASE}-metrics", NS),
                           ("clusterrole", RELEASE, None),
                           ("clusterrole", f"{RELEASE}-peering", None),
                           ("deployment", f"{RELEASE}-activator", NS),
                           ("service", f"{RELEASE}-activator", NS),
                           ("serviceaccount", f"{RELEASE}-activator", NS),
                           ("poddisruptionbudget", f"{RELEASE}-activator", NS),
                           ("clusterrole", f"{RELEASE}-activator", None),
                           ("clusterrolebinding", f"{RELEASE}-activator", None),
                           ("clusterkopfpeering", RELEASE, None)):
        args = ["get", kind, name] + (["-n", ns] if ns else [])
        proc = cluster.kubectl(*args, check=False)
        assert proc.returncode != 0 and "NotFound" in proc.stderr, f"{kind}/{name} left"
    # Custom resources outlive the release: Helm never deletes CRDs.
    cluster.kubectl("get", "crd", "inferenceservices.inference.slo-operator.io")
