"""The Helm chart installs for real: CRDs, identity, least-privilege role, the operator."""

from __future__ import annotations

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from tests.integration.operator_support import CHART

pytestmark = pytest.mark.integration


def test_chart_lints_and_renders_every_template(cluster: LocalCluster) -> None:
    cluster.helm("lint", str(CHART))
    out = cluster.helm("template", "slo", str(CHART), "-n", "slo-system",
                       "--set", "watchNamespaces={team-a,team-b}").stdout
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out) if d)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Deployment", "KopfPeering",
                     "KopfPeering", "PodDisruptionBudget", "Role", "Role", "RoleBinding",
                     "RoleBinding", "Service", "ServiceAccount"]
    dep = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["run", "--namespace=team-a", "--namespace=team-b"]


def test_helm_install_creates_a_running_operator_deployment(cluster: LocalCluster) -> None:
    ns = "slo-chart"
    cluster.helm("install", "slo", str(CHART), "-n", ns, "--create-namespace", "--wait",
                 "--timeout", "120s")
    try:
        for crd in ("inferenceservices", "slopolicies"):
            cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                            f"crd/{crd}.inference.slo-operator.io")
        sa = cluster.kubectl_json("get", "serviceaccount", "-n", ns, "slo-slo-operator")
        assert sa["metadata"]["name"] == "slo-slo-operator"
        binding = cluster.kubectl_json("get", "clusterrolebinding", "slo-slo-operator")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slo-slo-operator",
                                        "namespace": ns}]
        dep = cluster.kubectl_json("get", "deployment", "-n", ns, "slo-slo-operator")
        # Two replicas by default: kopf peering lets one act (tests/integration/test_ship_chart.py).
        assert dep["status"].get("readyReplicas") == 2
        pod_spec = dep["spec"]["template"]["spec"]
        assert pod_spec["serviceAccountName"] == "slo-slo-operator"
        assert pod_spec["securityContext"]["runAsNonRoot"] is True
    finally:
        cluster.helm("uninstall", "slo", "-n", ns, "--wait")


def test_pod_monitor_gives_vllm_targets_the_labels_the_slo_loop_groups_by(
    cluster: LocalCluster,
) -> None:
    import re

    from slo_runtime.contract import LABEL_SERVICE, LABEL_TENANT, MANAGED_BY

    out = cluster.helm("template", "slo", str(CHART), "-n", "slo-system",
                       "--set", "podMonitor.enabled=true",
                       "--show-only", "templates/podmonitor.yaml").stdout
    pm = yaml.safe_load(out)
    assert pm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/managed-by"] == MANAGED_BY
    endpoints = pm["spec"]["podMetricsEndpoints"]
    assert sorted(e["path"] for e in endpoints) == ["/engine/metrics", "/metrics"]

    def meta(label: str) -> str:  # Prometheus' service-discovery name for a pod label
        return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)

    for e in endpoints:
        mapping = {r["targetLabel"]: r["sourceLabels"][0] for r in e["relabelings"]}
        assert mapping == {
            "namespace": "__meta_kubernetes_namespace",
            "pod": "__meta_kubernetes_pod_name",
            "service": meta(LABEL_SERVICE),
            "tenant": meta(LABEL_TENANT),
        }


def test_gpu_prices_become_the_labelled_config_map_the_operator_reads(
    cluster: LocalCluster,
) -> None:
    from slo_operator.control.prices import PRICES_LABEL, parse_prices

    out = cluster.helm("template", "slo", str(CHART), "-n", "slo-system",
                       "--set-string", "gpuPrices.H100-SXM-80GB=2.1",
                       "--set", "gpuPrices.L4-24GB=0.3",
                       "--show-only", "templates/gpu-prices.yaml").stdout
    cm = yaml.safe_load(out)
    assert cm["metadata"]["labels"][PRICES_LABEL] == "true"
    prices = parse_prices(cm["data"])
    assert prices.problems == ()
    assert prices.per_gpu_hour("H100-SXM-80GB") == 2.1
    assert prices.per_gpu_hour("L4-24GB") == 0.3
    bad = cluster.helm("template", "slo", str(CHART), "--set-string",
                       "gpuPrices.H100-SXM-80GB=cheap", check=False)
    assert bad.returncode != 0 and "gpuPrices/H100-SXM-80GB" in bad.stderr
