"""Managed alert rules: applied only when changed, refusals and a missing CRD as the
policy's AlertRulesReady condition with one Event, deleted with the policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from slo_operator.api.cluster import ApiRejected
from slo_operator.reconcile.alert_rules import AlertRules, remove_policy, sync_policy
from slo_operator.reconcile.ports import AppliedCache
from tests.operator.reconcile.fake import FakeKube

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


@dataclass
class Discovery:
    served: bool = True
    asked: list[tuple[str, str]] = field(default_factory=list)

    def serves(self, api_version: str, kind: str) -> bool:
        self.asked.append((api_version, kind))
        return self.served


@dataclass
class RefusingKube(FakeKube):
    """Refuses PrometheusRules with ``status`` while ``message`` is set."""

    status: int = 422
    message: str | None = None

    def apply(self, obj: Mapping[str, Any]) -> None:
        if obj["kind"] == "PrometheusRule" and self.message is not None:
            self.attempts.append((obj["kind"], obj["metadata"]["name"]))
            raise ApiRejected(obj["kind"], obj["metadata"]["name"], self.status, self.message)
        super().apply(obj)


def policy(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.slo-operator.io/v1alpha1", "kind": "SLOPolicy",
        "metadata": {"name": "gold", "namespace": "team-a", "uid": "u-1", "generation": 1},
        "spec": {"objectives": {"e2eLatencyMs": 900}, **spec},
        "status": {"boundServices": ["chat"], **(status or {})},
    }


def with_status(body: dict[str, Any], kube: FakeKube) -> dict[str, Any]:
    """``body`` as the next watch event brings it: with the last status patch merged."""
    return {**body, "status": {**body["status"], **kube.statuses[-1]}}


def cond(kube: FakeKube) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in kube.statuses[-1]["conditions"]
                                   if c["type"] == "AlertRulesReady"]
    assert len(found) == 1
    return found[0]


def setup(served: bool = True, kube: FakeKube | None = None
          ) -> tuple[FakeKube, Discovery, AlertRules, AppliedCache]:
    return (kube or FakeKube(), Discovery(served),
            AlertRules(enabled=True, labels={"release": "kps"}), AppliedCache())


def test_off_by_default_writes_nothing() -> None:
    kube, disc, _, applied = setup()
    assert sync_policy(kube, disc, AlertRules(), applied, policy(), NOW) is None
    assert kube.writes == 0 and disc.asked == []


def test_new_policy_gets_its_rule_and_a_true_condition_once() -> None:
    kube, disc, state, applied = setup()
    body = policy()
    got = sync_policy(kube, disc, state, applied, body, NOW)
    assert got is not None and got.status is True
    rule = kube.objects[("PrometheusRule", "team-a", "slo-gold")]
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert (cond(kube)["status"], cond(kube)["reason"]) == ("True", "RulesApplied")
    assert kube.events == [("Normal", "RulesApplied", got.message)]
    # The next event of the same policy (its own status patch) changes nothing.
    writes = kube.writes
    sync_policy(kube, disc, state, applied, with_status(body, kube), NOW + timedelta(seconds=5))
    assert kube.writes == writes


def test_edited_objective_reapplies_the_rule() -> None:
    kube, disc, state, applied = setup()
    sync_policy(kube, disc, state, applied, policy(), NOW)
    edited = policy(objectives={"e2eLatencyMs": 400})
    sync_policy(kube, disc, state, applied, edited, NOW + timedelta(seconds=5))
    assert kube.applies == [("PrometheusRule", "slo-gold")] * 2
    exprs = [r["expr"] for g in kube.objects[("PrometheusRule", "team-a", "slo-gold")]
             ["spec"]["groups"] for r in g["rules"]]
    assert any(e.endswith("> bool 0.4") for e in exprs)


def test_newly_bound_service_reapplies_the_rule() -> None:
    kube, disc, state, applied = setup()
    sync_policy(kube, disc, state, applied, policy(), NOW)
    sync_policy(kube, disc, state, applied, policy({"boundServices": ["chat", "rag"]}), NOW)
    assert len(kube.applies) == 2
    rule = kube.objects[("PrometheusRule", "team-a", "slo-gold")]
    assert 'service=~"chat|rag"' in rule["spec"]["groups"][0]["rules"][0]["expr"]


def test_missing_crd_sets_the_condition_and_warns_once() -> None:
    kube, disc, state, applied = setup(served=False)
    body = policy()
    sync_policy(kube, disc, state, applied, body, NOW)
    assert kube.applies == []
    assert (cond(kube)["status"], cond(kube)["reason"]) == ("False", "CRDMissing")
    assert "prometheusrules.monitoring.coreos.com" in cond(kube)["message"]
    sync_policy(kube, disc, state, applied, with_status(body, kube), NOW + timedelta(minutes=2))
    assert [e[:2] for e in kube.events] == [("Warning", "CRDMissing")]
    assert len(kube.statuses) == 1


def test_crd_installed_later_applies_and_turns_the_condition_true() -> None:
    kube, disc, state, applied = setup(served=False)
    body = policy()
    sync_policy(kube, disc, state, applied, body, NOW)
    disc.served = True
    sync_policy(kube, disc, state, applied, with_status(body, kube), NOW + timedelta(minutes=2))
    assert kube.applies == [("PrometheusRule", "slo-gold")]
    assert cond(kube)["reason"] == "RulesApplied"
    assert [e[:2] for e in kube.events] == [("Warning", "CRDMissing"), ("Normal", "RulesApplied")]


def test_rejected_rule_is_a_condition_with_the_servers_message_and_is_not_resent() -> None:
    kube, disc, state, applied = setup(
        kube=RefusingKube(status=403, message="admission webhook denied: no team label"))
    body = policy()
    got = sync_policy(kube, disc, state, applied, body, NOW)
    assert got is not None and got.reason == "Forbidden"
    c = cond(kube)
    assert (c["status"], c["reason"]) == ("False", "Forbidden")
    assert "admission webhook denied: no team label" in c["message"] and "403" in c["message"]
    assert [e[:2] for e in kube.events] == [("Warning", "Forbidden")]
    # Within the back-off the same object is not sent again, and nothing is re-posted.
    assert sync_policy(kube, disc, state, applied, with_status(body, kube),
                       NOW + timedelta(seconds=10)) is None
    assert len(kube.attempts) == 1 and len(kube.events) == 1


def test_rejected_rule_is_retried_after_the_back_off_and_recovers() -> None:
    refusing = RefusingKube(status=422, message="spec.groups[0].rules[3].expr: invalid")
    kube, disc, state, applied = setup(kube=refusing)
    body = policy()
    sync_policy(kube, disc, state, applied, body, NOW)
    assert cond(kube)["reason"] == "RulesRejected"
    refusing.message = None  # the admission policy was fixed
    sync_policy(kube, disc, state, applied, with_status(body, kube), NOW + timedelta(seconds=31))
    assert cond(kube)["reason"] == "RulesApplied"
    assert kube.applies == [("PrometheusRule", "slo-gold")]


def test_crd_removed_after_discovery_reads_as_missing() -> None:
    kube, disc, state, applied = setup(
        kube=RefusingKube(status=404, message="the server could not find the resource"))
    sync_policy(kube, disc, state, applied, policy(), NOW)
    assert cond(kube)["reason"] == "CRDMissing"


def test_invalid_policy_keeps_the_last_rule_and_says_so() -> None:
    kube, disc, state, applied = setup()
    sync_policy(kube, disc, state, applied, policy(), NOW)
    sync_policy(kube, disc, state, applied, policy(attainmentTarget=3), NOW)
    assert kube.applies == [("PrometheusRule", "slo-gold")] and kube.deletes == []
    assert cond(kube)["reason"] == "InvalidSpec"
    assert "spec.attainmentTarget" in cond(kube)["message"]


def test_condition_write_keeps_the_policys_other_conditions() -> None:
    kube, disc, state, applied = setup()
    ready = {"type": "Ready", "status": "True", "reason": "Valid", "message": "Policy is valid",
             "lastTransitionTime": "2025-06-01T11:00:00Z", "observedGeneration": 1}
    sync_policy(kube, disc, state, applied, policy({"conditions": [ready]}), NOW)
    types = [c["type"] for c in kube.statuses[-1]["conditions"]]
    assert types == ["Ready", "AlertRulesReady"]
    assert kube.statuses[-1]["conditions"][0] == ready


def test_latest_puts_the_written_condition_into_an_older_body() -> None:
    kube, disc, state, applied = setup()
    body = policy()
    sync_policy(kube, disc, state, applied, body, NOW)
    newer = state.latest(body)
    assert [c["type"] for c in newer["status"]["conditions"]] == ["AlertRulesReady"]
    assert newer["status"]["boundServices"] == ["chat"]
    assert AlertRules(enabled=True).latest(body) == body


def test_deleted_policy_deletes_its_rule_and_forgets_it() -> None:
    kube, disc, state, applied = setup()
    sync_policy(kube, disc, state, applied, policy(), NOW)
    remove_policy(kube, state, applied, "team-a", "gold")
    assert kube.deletes == [("PrometheusRule", "team-a", "slo-gold")]
    assert state.written == {} and state.announced == {} and applied.entries == {}
    # Created again under the same name: applied again, announced again.
    sync_policy(kube, disc, state, applied, policy(), NOW)
    assert len(kube.applies) == 2 and len(kube.events) == 2


def test_refused_delete_is_logged_not_raised() -> None:
    kube, _, state, applied = setup()
    kube.refuse_delete["PrometheusRule"] = "forbidden"
    remove_policy(kube, state, applied, "team-a", "gold")
    assert kube.deletes == []
