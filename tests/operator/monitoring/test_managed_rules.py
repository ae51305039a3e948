"""The PrometheusRule the operator keeps per SLOPolicy: the generator's groups, the owner,
the labels, and the AlertRulesReady condition for each outcome."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from slo_operator.api.cluster import ApiRejected
from slo_operator.cli import main
from slo_operator.monitoring import managed_rules as M
from slo_operator.monitoring.rules import RulesInputError
from tests.support.tools import promtool

UID = "0b6f6a3e-4c1e-4a55-9b0c-3f1f3f6e2a11"


def policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.slo-operator.io/v1alpha1",
        "kind": "SLOPolicy",
        "metadata": {"name": "gold", "namespace": "team-a", "uid": UID, "generation": 2},
        "spec": {"objectives": {"e2eLatencyMs": 900}, "attainmentTarget": 0.99, **spec},
        "status": {"boundServices": ["chat", "summarize"]},
    }


def cli_output(body: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(body))
    result = CliRunner().invoke(main, ["rules", "-f", str(path)])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = yaml.safe_load(result.output)
    return out


def test_groups_are_the_ones_slo_operator_rules_prints_for_the_same_policy(
        tmp_path: Path) -> None:
    body = policy()
    obj = M.managed_rule(body, {})
    printed = cli_output(body, tmp_path)
    assert obj["spec"]["groups"] == printed["spec"]["groups"]
    assert obj["metadata"]["name"] == printed["metadata"]["name"] == M.rule_name("gold")
    exprs = [r["expr"] for g in obj["spec"]["groups"] for r in g["rules"]]
    # The bound services from status narrow the signals to them.
    assert any('service=~"chat|summarize"' in e for e in exprs)


def test_rule_is_owned_by_the_policy_for_garbage_collection() -> None:
    obj = M.managed_rule(policy(), {})
    assert obj["metadata"]["namespace"] == "team-a"
    assert obj["metadata"]["ownerReferences"] == [{
        "apiVersion": "inference.slo-operator.io/v1alpha1", "kind": "SLOPolicy",
        "name": "gold", "uid": UID, "controller": True}]


def test_policy_without_uid_gets_no_owner_reference() -> None:
    body = policy()
    del body["metadata"]["uid"]
    assert "ownerReferences" not in M.managed_rule(body, {})["metadata"]


def test_extra_labels_are_added_and_the_operators_own_labels_win() -> None:
    obj = M.managed_rule(policy(), {"release": "kube-prometheus-stack",
                                    "app.kubernetes.io/managed-by": "someone-else"})
    labels = obj["metadata"]["labels"]
    assert labels["release"] == "kube-prometheus-stack"
    assert labels["app.kubernetes.io/managed-by"] == "slo-operator"


def test_policy_without_bound_services_gets_no_groups() -> None:
    body = policy()
    body["status"] = {}
    obj = M.managed_rule(body, {})
    assert obj["spec"]["groups"] == []
    assert M.applied(obj).message.endswith("0 recording rules and 0 burn-rate alerts")


def test_objective_change_changes_the_rule_expressions() -> None:
    before = M.managed_rule(policy(), {})
    after = M.managed_rule(policy(objectives={"e2eLatencyMs": 500}), {})
    assert before != after
    exprs = [r["expr"] for g in after["spec"]["groups"] for r in g["rules"]]
    signal = 'slo_operator:e2e_latency_seconds:quantile{namespace="team-a",policy="gold"}'
    assert f"{signal} > bool 0.5" in exprs


def test_invalid_policy_raises_and_its_condition_names_the_field() -> None:
    with pytest.raises(RulesInputError, match="attainmentTarget") as err:
        M.managed_rule(policy(attainmentTarget=7), {})
    cond = M.invalid_spec(err.value)
    assert (cond.status, cond.reason) == (False, "InvalidSpec")
    assert cond.message.startswith("Alert rules not updated: SLOPolicy team-a/gold")
    assert "spec.attainmentTarget" in cond.message and "\n" not in cond.message


def test_promtool_accepts_the_managed_groups(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text(yaml.safe_dump({"groups": M.managed_rule(policy(), {})["spec"]["groups"]}))
    proc = subprocess.run([str(promtool()), "check", "rules", str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_condition_for_applied_rules_counts_rules_and_alerts() -> None:
    obj = M.managed_rule(policy(), {})
    recorded, alerts = M.count_rules(obj)
    cond = M.applied(obj)
    assert (cond.type, cond.status, cond.reason) == ("AlertRulesReady", True, "RulesApplied")
    assert recorded > 0 and alerts > 0
    assert f"{recorded} recording rules and {alerts} burn-rate alerts" in cond.message


@pytest.mark.parametrize(("status", "reason"), [
    (422, "RulesRejected"), (400, "RulesRejected"), (409, "RulesRejected"),
    (403, "Forbidden"), (500, "ApplyFailed"), (429, "ApplyFailed"),
])
def test_refusal_condition_names_reason_status_and_the_servers_message(
        status: int, reason: str) -> None:
    cond = M.rejected(ApiRejected("PrometheusRule", "slo-gold", status, "denied by policy X"))
    assert (cond.status, cond.reason) == (False, reason)
    assert "slo-gold" in cond.message and str(status) in cond.message
    assert "denied by policy X" in cond.message


def test_crd_missing_condition_names_the_crd_and_the_setting() -> None:
    cond = M.crd_missing()
    assert (cond.status, cond.reason) == (False, "CRDMissing")
    assert "prometheusrules.monitoring.coreos.com" in cond.message
    assert "--manage-alert-rules" in cond.message
