"""Managed alert rules against the real API server: the operator (--manage-alert-rules,
the chart's role with alertRules.manage) keeps one PrometheusRule per SLOPolicy with the
prometheus-operator CRD installed from tests/fixtures/crds/."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.api.models import GROUP
from slo_operator.cli import main
from tests.integration.operator_support import (
    CHART,
    OPERATOR_NS,
    OperatorProcess,
    bind_role,
    conditions,
    ensure_namespace,
    events_for,
    install_crds,
)
from tests.support.tools import promtool

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULE_CRD = ROOT / "tests" / "fixtures" / "crds" / "monitoring.coreos.com_prometheusrules.yaml"
DENIED_NS_LABEL = "slo-test.example.com/deny-rules"


def managed_role(cluster: LocalCluster) -> dict[str, Any]:
    out = cluster.helm("template", "slo-operator", str(CHART), "--namespace", OPERATOR_NS,
                       "--set", "alertRules.manage=true",
                       "--show-only", "templates/clusterrole.yaml").stdout
    role: dict[str, Any] = yaml.safe_load(out)
    return role


@pytest.fixture(scope="module")
def operator(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[OperatorProcess]:
    install_crds(cluster)
    cluster.kubectl("apply", "--server-side", "-f", str(RULE_CRD))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/prometheusrules.monitoring.coreos.com")
    # An admission policy that refuses PrometheusRules in labelled namespaces.
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "slo-test-deny-rules"},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{
                      "apiGroups": ["monitoring.coreos.com"], "apiVersions": ["*"],
                      "operations": ["CREATE", "UPDATE"], "resources": ["prometheusrules"]}]},
                  "validations": [{"expression": "false",
                                   "message": "PrometheusRules are not allowed here"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": "slo-test-deny-rules"},
         "spec": {"policyName": "slo-test-deny-rules", "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {
                      "matchLabels": {DENIED_NS_LABEL: "true"}}}}},
    ]))
    ensure_namespace(cluster, OPERATOR_NS)
    kubeconfig = bind_role(cluster, managed_role(cluster), OPERATOR_NS, "slo-alerts")
    log_dir = tmp_path_factory.mktemp("alert-rules")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLO_MANAGE_ALERT_RULES", "true")
        mp.setenv("SLO_ALERT_RULE_LABELS", "release=kube-prometheus-stack")
        op = OperatorProcess(kubeconfig, log_dir / "operator.log", interval=2.0)
    try:
        cluster.wait_for(op.healthy, timeout=60, desc="operator liveness endpoint")
        yield op
    finally:
        op.stop()
        print(f"\n--- operator log ---\n{op.logs()[-6000:]}")


def apply(cluster: LocalCluster, ns: str, *objs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objs))


def policy(e2e_ms: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
            "metadata": {"name": "gold"},
            "spec": {"objectives": {"e2eLatencyMs": e2e_ms}, "attainmentTarget": 0.99}}


def service() -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "chat"},
            "spec": {"model": {"name": "org/chat", "sizeBillions": 8},
                     "hardware": {"gpuProducts": ["H100"]}, "sloPolicyRef": {"name": "gold"}}}


def get_rule(cluster: LocalCluster, ns: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", "prometheusrule", "-n", ns, "slo-gold", "-o", "json",
                           check=False)
    return yaml.safe_load(proc.stdout) if proc.returncode == 0 else None


def alert_condition(cluster: LocalCluster, ns: str) -> dict[str, Any] | None:
    pol = cluster.kubectl_json("get", "slo", "-n", ns, "gold")
    return conditions(pol).get("AlertRulesReady")


def printed_groups(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    """What `slo-operator rules` prints for the policy as the API server holds it."""
    text = cluster.kubectl("get", "slo", "-n", ns, "gold", "-o", "yaml").stdout
    result = CliRunner().invoke(main, ["rules", "-f", "-"], input=text)
    assert result.exit_code == 0, result.output
    groups: list[dict[str, Any]] = yaml.safe_load(result.output)["spec"]["groups"]
    return groups


def test_rule_follows_the_policy_from_creation_to_deletion(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str,
        tmp_path: Path) -> None:
    apply(cluster, namespace, policy(900), service())

    def bound_rule() -> dict[str, Any] | None:
        rule = get_rule(cluster, namespace)
        return rule if rule and rule["spec"].get("groups") else None

    rule = cluster.wait_for(bound_rule, timeout=60, desc="PrometheusRule with groups")
    assert rule is not None
    pol = cluster.kubectl_json("get", "slo", "-n", namespace, "gold")
    owner = rule["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "SLOPolicy", "gold", pol["metadata"]["uid"])
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert 'service=~"chat"' in yaml.safe_dump(rule["spec"]["groups"])
    cluster.wait_for(lambda: rule["spec"]["groups"] == printed_groups(cluster, namespace),
                     timeout=30, desc="rule groups equal to `slo-operator rules` output")
    cond = cluster.wait_for(lambda: alert_condition(cluster, namespace), timeout=30,
                            desc="AlertRulesReady condition")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "RulesApplied")
    groups_file = tmp_path / "groups.yaml"
    groups_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run([str(promtool()), "check", "rules", str(groups_file)],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr

    # Edited objective: the rule follows.
    apply(cluster, namespace, policy(400))
    cluster.wait_for(
        lambda: "> bool 0.4" in yaml.safe_dump((get_rule(cluster, namespace) or {})
                                               .get("spec", {})),
        timeout=60, desc="PrometheusRule updated to the edited objective")

    # Deleted policy: the rule goes with it.
    cluster.kubectl("delete", "slo", "-n", namespace, "gold", "--wait=true")
    cluster.wait_for(lambda: get_rule(cluster, namespace) is None, timeout=60,
                     desc="PrometheusRule deleted with its policy")


def test_refused_rule_is_a_condition_with_the_servers_message(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    cluster.kubectl("label", "namespace", namespace, f"{DENIED_NS_LABEL}=true")
    apply(cluster, namespace, policy(900), service())

    def refused() -> dict[str, Any] | None:
        c = alert_condition(cluster, namespace)
        return c if c and c["status"] == "False" else None

    cond = cluster.wait_for(refused, timeout=60, desc="AlertRulesReady=False")
    assert cond is not None
    assert cond["reason"] == "RulesRejected"
    assert "PrometheusRules are not allowed here" in cond["message"]
    assert get_rule(cluster, namespace) is None
    # The policy's own handling went on: validated and bound.
    pol = cluster.kubectl_json("get", "slo", "-n", namespace, "gold")
    assert conditions(pol)["Ready"]["status"] == "True"
    cluster.wait_for(lambda: any(e["reason"] == "RulesRejected" and e["type"] == "Warning"
                                 for e in events_for(cluster, namespace, "gold")),
                     timeout=30, desc="Warning Event RulesRejected")


def test_missing_crd_is_a_condition_not_a_traceback(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    # Last in the module: it removes the CRD.
    cluster.kubectl("delete", "crd", "prometheusrules.monitoring.coreos.com", "--wait=true")
    apply(cluster, namespace, policy(900))

    def missing() -> dict[str, Any] | None:
        c = alert_condition(cluster, namespace)
        return c if c and c["reason"] == "CRDMissing" else None

    cond = cluster.wait_for(missing, timeout=90, desc="AlertRulesReady=False CRDMissing")
    assert cond is not None
    assert cond["status"] == "False"
    assert "prometheusrules.monitoring.coreos.com" in cond["message"]
    assert "Traceback" not in operator.logs()
