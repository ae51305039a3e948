"""Tenants on the real API server, with the operator under the chart's ClusterRole.

A cluster-scoped Tenant binds namespaces by label; an SLOPolicy in a namespace it does not
bind cannot claim it: the policy says so (``TenantBound`` False) and its service holds
(``PolicyBound`` False, nothing applied). Labelling the namespace binds it: the operator's
namespace watch sees the label and the service is deployed. The CRD refuses a selector the
label-selector API would refuse, naming the field. Where the Tenant CRD is absent (an
upgrade that kept the older CRDs: Helm never upgrades a chart's CRDs), the operator serves
as before Tenants existed.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.api.models import GROUP
from tests.integration.operator_support import (
    OPERATOR_NS,
    OperatorProcess,
    bind_role,
    chart_cluster_role,
    chart_operator,
    conditions,
    deployments_of,
    ensure_namespace,
    events_for,
    install_crds,
)

pytestmark = pytest.mark.integration


def _tenant(name: str, selector: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Tenant", "metadata": {"name": name},
            "spec": {"namespaceSelector": selector, **spec}}


def test_the_crd_refuses_a_selector_requirement_without_values(cluster: LocalCluster) -> None:
    install_crds(cluster)
    bad = _tenant("bad-selector", {"matchExpressions": [{"key": "team", "operator": "In"}]})
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(bad),
                          check=False)
    assert out.returncode != 0
    assert "operator In or NotIn needs values" in out.stderr
    assert "namespaceSelector.matchExpressions" in out.stderr


def test_a_policy_claiming_a_tenant_its_namespace_is_not_bound_to_holds_until_bound(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with chart_operator(cluster, tmp_path_factory.mktemp("tenants"), "slo-tenants",
                        interval=1.0) as op:
        ns = cluster.create_namespace()
        team = f"team-{ns}"
        tenant = _tenant(f"acme-{ns}", {"matchLabels": {"slo-test/team": team}}, gpuBudget=4)
        policy = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
                  "metadata": {"name": "gold", "namespace": ns},
                  "spec": {"tenant": f"acme-{ns}"}}
        svc = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
               "metadata": {"name": "llama-3.1-8b", "namespace": ns},
               "spec": {"model": {"name": "meta-llama/Llama-3.1-8B", "sizeBillions": 8},
                        "hardware": {"gpuProducts": ["H100"]}, "sloPolicyRef": {"name": "gold"}}}
        try:
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([tenant, policy, svc]))

            def cond(kind: str, name: str, ctype: str) -> dict[str, Any] | None:
                body = cluster.kubectl_json("get", kind, "-n", ns, name)
                return conditions(body).get(ctype)

            refused = cluster.wait_for(
                lambda: (c := cond("slopolicy", "gold", "TenantBound")) and c, timeout=60,
                desc="TenantBound on the policy")
            assert (refused["status"], refused["reason"]) == ("False", "NamespaceNotBound")
            assert ns in refused["message"] and f"acme-{ns}" in refused["message"]
            bound = cluster.wait_for(
                lambda: (c := cond("infsvc", "llama-3.1-8b", "PolicyBound")) and c, timeout=60,
                desc="PolicyBound on the service")
            assert (bound["status"], bound["reason"]) == ("False", "PolicyTenantRefused")
            assert deployments_of(cluster, ns, "llama-3.1-8b") == []
            assert "NamespaceNotBound" in {e["reason"] for e in events_for(cluster, ns, "gold")}

            # The platform team binds the namespace: the policy takes its tenant, the
            # service is deployed.
            cluster.kubectl("label", "namespace", ns, f"slo-test/team={team}")
            cluster.wait_for(
                lambda: (c := cond("slopolicy", "gold", "TenantBound")) and
                c["reason"] == "BoundByTenant", timeout=60, desc="policy bound to its tenant")
            cluster.wait_for(lambda: deployments_of(cluster, ns, "llama-3.1-8b"), timeout=60,
                             desc="the service deployed")
            now = cond("infsvc", "llama-3.1-8b", "PolicyBound")
            assert now is not None and now["status"] == "True"
            assert "Traceback" not in op.logs()
        finally:
            cluster.kubectl("delete", "tenant", f"acme-{ns}", "--ignore-not-found")


def test_without_the_tenant_crd_the_operator_serves_as_before(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    install_crds(cluster)
    cluster.kubectl("delete", "crd", "tenants.inference.slo-operator.io", "--wait=true")
    ensure_namespace(cluster, OPERATOR_NS)
    kubeconfig = bind_role(cluster, chart_cluster_role(cluster), OPERATOR_NS, "slo-no-tenants")
    op = OperatorProcess(kubeconfig, tmp_path_factory.mktemp("no-tenants") / "operator.log",
                         interval=1.0)
    try:
        cluster.wait_for(op.healthy, timeout=60, desc="operator liveness endpoint")
        ns = cluster.create_namespace()
        policy = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
                  "metadata": {"name": "gold", "namespace": ns}, "spec": {"tenant": "acme"}}
        svc = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
               "metadata": {"name": "chat", "namespace": ns},
               "spec": {"model": {"name": "org/chat", "sizeBillions": 8},
                        "hardware": {"gpuProducts": ["H100"]}, "sloPolicyRef": {"name": "gold"}}}
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([policy, svc]))
        cluster.wait_for(lambda: deployments_of(cluster, ns, "chat"), timeout=60,
                         desc="the service deployed")
        bound = cluster.wait_for(
            lambda: conditions(cluster.kubectl_json("get", "slopolicy", "-n", ns, "gold")).get(
                "TenantBound"), timeout=60, desc="TenantBound on the policy")
        assert (bound["status"], bound["reason"]) == ("True", "Unmanaged")
        assert "Traceback" not in op.logs()
    finally:
        op.stop()
        print(f"\n--- operator log ---\n{op.logs()[-3000:]}")
        install_crds(cluster)
