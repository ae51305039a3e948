"""The PrometheusRule the operator keeps for one SLOPolicy, and its ``AlertRulesReady``
condition (pure: a policy in, a dict or a condition out).

The object is what ``slo-operator rules -f`` prints for the same SLOPolicy object (the
same :func:`rules.policies_from_documents` and :func:`rules.rule_groups`, so the groups and
every rule expression are byte-for-byte the same, including the bound services it reads
from ``status.boundServices``; no groups while no service is bound), plus an owner
reference to the policy, so the garbage collector deletes it with the policy, and the
extra labels a Prometheus's ``ruleSelector`` picks it by.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slo_operator.api import conditions as C
from slo_operator.api.cluster import ApiRejected
from slo_operator.api.conditions import Cond
from slo_operator.api.models import API_VERSION
from slo_operator.monitoring import rules

KIND = "PrometheusRule"
API_GROUP_VERSION = rules.PROMETHEUS_RULE_API_VERSION
CRD_NAME = "prometheusrules.monitoring.coreos.com"

# The condition on the SLOPolicy (only while the operator manages alert rules).
ALERT_RULES_READY = C.ALERT_RULES_READY
RULES_APPLIED = C.RULES_APPLIED
CRD_MISSING = C.CRD_MISSING
RULES_REJECTED = C.RULES_REJECTED
FORBIDDEN = C.FORBIDDEN
# False: another refusal (5xx, 429); retried after the back-off.
APPLY_FAILED = C.APPLY_FAILED
INVALID_SPEC = C.INVALID_SPEC  # False: the policy is invalid; the last good rules stay


def rule_name(policy_name: str) -> str:
    """The PrometheusRule's name for a policy (the one ``slo-operator rules`` prints)."""
    return str(rules.prometheus_rule(rules.PolicyRef("", policy_name), [])["metadata"]["name"])


def managed_rule(policy: Mapping[str, Any], extra_labels: Mapping[str, str]) -> dict[str, Any]:
    """The PrometheusRule for one SLOPolicy as the API server returned it (with ``uid``).

    Raises :class:`rules.RulesInputError` for a policy whose spec is invalid.
    """
    meta = policy["metadata"]
    doc = {**policy, "kind": "SLOPolicy"}  # kopf bodies carry it; be explicit anyway
    [(ref, spec)] = rules.policies_from_documents([doc], "Alert rules not updated")
    # No bound service yet: no groups. The generator's reading of an empty list (every
    # service of the namespace, for a file written by hand) would record the services of
    # the namespace's other policies under this one and page for their burns.
    groups = rules.rule_groups(ref, spec) if ref.services else []
    obj = rules.prometheus_rule(ref, groups)
    out_meta = obj["metadata"]
    # The operator's own labels win over extra ones of the same key.
    out_meta["labels"] = {**dict(extra_labels), **out_meta["labels"]}
    if meta.get("uid"):
        # Without a UID (a policy not read from the API server) no owner reference: one
        # with a made-up UID makes the garbage collector delete the object at once.
        out_meta["ownerReferences"] = [{
            "apiVersion": API_VERSION,
            "kind": "SLOPolicy",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            # No blockOwnerDeletion: it would need update on slopolicies/finalizers where
            # the OwnerReferencesPermissionEnforcement admission plugin runs, and nothing
            # must wait for the rules before a policy is gone.
        }]
    return obj


def count_rules(obj: Mapping[str, Any]) -> tuple[int, int]:
    """(recording rules, alerts) in a rendered PrometheusRule."""
    all_rules = [r for g in obj["spec"]["groups"] for r in g["rules"]]
    return (sum(1 for r in all_rules if "record" in r), sum(1 for r in all_rules if "alert" in r))


def applied(obj: Mapping[str, Any]) -> Cond:
    """AlertRulesReady=True for a PrometheusRule the API server took."""
    recorded, alerts = count_rules(obj)
    return Cond(ALERT_RULES_READY, True, RULES_APPLIED,
                f"PrometheusRule {obj['metadata']['name']} holds {recorded} recording rules "
                f"and {alerts} burn-rate alerts")


def crd_missing() -> Cond:
    """AlertRulesReady=False: managed alert rules are on, the CRD is not installed."""
    return Cond(ALERT_RULES_READY, False, CRD_MISSING,
                f"The CustomResourceDefinition {CRD_NAME} ({API_GROUP_VERSION} {KIND}) is not "
                "installed: install the prometheus-operator CRDs, or turn off "
                "--manage-alert-rules (SLO_MANAGE_ALERT_RULES)")


def rejected(err: ApiRejected) -> Cond:
    """AlertRulesReady=False with the API server's (or the admission's) own message."""
    if err.status == 403:
        reason = FORBIDDEN
    elif err.status in (400, 409, 422):
        reason = RULES_REJECTED
    else:
        reason = APPLY_FAILED
    return Cond(ALERT_RULES_READY, False, reason,
                f"The API server refused {KIND} {err.name} ({err.status}): {err.message}")


def invalid_spec(err: rules.RulesInputError) -> Cond:
    """AlertRulesReady=False: no rules come from an invalid policy; the message names the
    field (the rules applied before stay)."""
    return Cond(ALERT_RULES_READY, False, INVALID_SPEC,
                " ".join(str(err).split())[:1024])
