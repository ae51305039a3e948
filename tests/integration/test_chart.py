"""The Helm chart installs for real: CRDs, identity, least-privilege role, the operator."""

from __future__ import annotations

import re
from typing import Any

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
    # The operator's objects and the activator's (Deployment, PDB, Service, ServiceAccount,
    # ClusterRole and its binding).
    assert kinds == ["ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding",
                     "Deployment", "Deployment", "KopfPeering", "KopfPeering",
                     "PodDisruptionBudget", "PodDisruptionBudget", "Role", "Role",
                     "RoleBinding", "RoleBinding", "Service", "Service", "ServiceAccount",
                     "ServiceAccount"]
    dep = next(d for d in yaml.safe_load_all(out)
               if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "slo-slo-operator")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["run", "--namespace=team-a", "--namespace=team-b"]


def _render(cluster: LocalCluster, *args: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = cluster.helm("template", "slo", str(CHART), "-n", "slo-system", *args).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_activator_is_deployed_with_a_service_the_operator_is_pointed_at(
    cluster: LocalCluster,
) -> None:
    from slo_operator.api.activation import (
        ACTIVATOR_PORT,
        ACTIVATOR_PORT_NAME,
        COMPONENT_ACTIVATOR,
        DEFAULT_QUEUE_PER_SERVICE,
        DEFAULT_WAKE_TIMEOUT_S,
        LABEL_COMPONENT,
    )
    from slo_operator.settings import option

    objs = _render(cluster)
    name = "slo-slo-operator-activator"
    dep = objs[("Deployment", name)]
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert dep["spec"]["replicas"] == 2
    assert container["args"] == [
        "activator", f"--port={ACTIVATOR_PORT}",
        f"--queue-per-service={DEFAULT_QUEUE_PER_SERVICE}",
        f"--timeout={DEFAULT_WAKE_TIMEOUT_S:g}"]
    assert container["env"] == [{"name": "POD_NAME",
                                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    assert container["ports"] == [{"name": ACTIVATOR_PORT_NAME, "containerPort": ACTIVATOR_PORT}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz",
                                                      "port": ACTIVATOR_PORT_NAME}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz",
                                                     "port": ACTIVATOR_PORT_NAME}
    assert spec["serviceAccountName"] == name
    operator = objs[("Deployment", "slo-slo-operator")]
    op_spec = operator["spec"]["template"]["spec"]
    assert spec["securityContext"] == op_spec["securityContext"]
    assert container["securityContext"] == op_spec["containers"][0]["securityContext"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert _selects(spread["labelSelector"]["matchLabels"], pod_labels)
    pdb = objs[("PodDisruptionBudget", name)]
    assert pdb["spec"]["minAvailable"] == 1
    assert _selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)

    # The operator's own selectors (Deployment, PDB, metrics Service) never pick an
    # activator pod, nor the activator's the operator's.
    op_pod_labels = operator["spec"]["template"]["metadata"]["labels"]
    for selector in (operator["spec"]["selector"]["matchLabels"],
                     objs[("PodDisruptionBudget", "slo-slo-operator")]["spec"]["selector"]
                     ["matchLabels"],
                     objs[("Service", "slo-slo-operator-metrics")]["spec"]["selector"]):
        assert not _selects(selector, pod_labels)
    assert not _selects(dep["spec"]["selector"]["matchLabels"], op_pod_labels)

    svc = objs[("Service", name)]
    assert svc["metadata"]["labels"][LABEL_COMPONENT] == COMPONENT_ACTIVATOR
    assert svc["spec"]["ports"] == [{"name": ACTIVATOR_PORT_NAME, "port": ACTIVATOR_PORT,
                                     "targetPort": ACTIVATOR_PORT_NAME, "protocol": "TCP"}]
    assert _selects(svc["spec"]["selector"], pod_labels)

    env = {e["name"]: e.get("value") for e in op_spec["containers"][0]["env"]}
    assert env[option("activator_service").env] == f"slo-system/{name}"
    assert objs[("ServiceAccount", name)]["metadata"]["namespace"] == "slo-system"
    binding = objs[("ClusterRoleBinding", name)]
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name,
                                    "namespace": "slo-system"}]

    # Values reach the flags; the longest release name still gives a DNS-label name.
    tuned = _render(cluster, "--set", "activator.replicas=3", "--set", "activator.port=9000",
                    "--set", "activator.queuePerService=7",
                    "--set", "activator.timeoutSeconds=42")
    (tuned_container,) = tuned[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
    assert tuned[("Deployment", name)]["spec"]["replicas"] == 3
    assert tuned_container["args"] == ["activator", "--port=9000", "--queue-per-service=7",
                                       "--timeout=42"]
    assert tuned[("Service", name)]["spec"]["ports"][0]["port"] == 9000
    long_release = "r" * 53  # the longest Helm allows
    out = cluster.helm("template", long_release, str(CHART), "-n", "slo-system").stdout
    (long_name,) = {d["metadata"]["name"] for d in yaml.safe_load_all(out)
                    if d and d["kind"] == "Service" and "activator" in d["metadata"]["name"]}
    assert len(long_name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", long_name)


def test_activator_disabled_renders_none_of_it_and_no_activator_for_the_operator(
    cluster: LocalCluster,
) -> None:
    from slo_operator.settings import option

    objs = _render(cluster, "--set", "activator.enabled=false")
    assert [key for key in objs if "activator" in key[1]] == []
    operator = objs[("Deployment", "slo-slo-operator")]
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert option("activator_service").env not in {e["name"] for e in container["env"]}
    assert not any("activator" in a for a in container["args"])
    # A single activator replica has no disruption budget (it would block every drain).
    single = _render(cluster, "--set", "activator.replicas=1")
    assert ("Deployment", "slo-slo-operator-activator") in single
    assert ("PodDisruptionBudget", "slo-slo-operator-activator") not in single


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

        # The activator: two Ready replicas, found by the operator the way it watches
        # (the endpoint controller's slices of a Service carrying the component label).
        from slo_operator.api.activation import (
            ACTIVATOR_PORT,
            COMPONENT_ACTIVATOR,
            LABEL_COMPONENT,
            LABEL_SERVICE_NAME,
            activator_slice_endpoints,
        )

        act = cluster.kubectl_json("get", "deployment", "-n", ns, "slo-slo-operator-activator")
        assert act["status"].get("readyReplicas") == 2

        def activator_endpoints() -> Any:
            slices = cluster.kubectl_json("get", "endpointslices", "-n", ns, "-l",
                                          f"{LABEL_COMPONENT}={COMPONENT_ACTIVATOR}")["items"]
            eps = [activator_slice_endpoints(s) for s in slices]
            return (slices, eps) if eps and all(e and len(e.addresses) == 2 for e in eps) \
                else None

        slices, eps = cluster.wait_for(activator_endpoints, timeout=60,
                                       desc="activator endpoints in its Service's slice")
        assert [s["metadata"]["labels"][LABEL_SERVICE_NAME] for s in slices] == [
            "slo-slo-operator-activator"]
        assert eps[0].port == ACTIVATOR_PORT
    finally:
        cluster.helm("uninstall", "slo", "-n", ns, "--wait")


def test_pod_monitor_gives_vllm_targets_the_labels_the_slo_loop_groups_by(
    cluster: LocalCluster,
) -> None:
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
