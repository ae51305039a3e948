"""Which tenant a policy runs for, and when it is refused one (reconcile.tenancy)."""

from __future__ import annotations

from typing import Any

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.cluster import Snapshot
from slo_operator.reconcile.tenancy import Tenancy


def tenancy(tenants: dict[str, dict[str, Any]], labels: dict[str, dict[str, str]] | None = None,
            require: bool = False) -> Tenancy:
    snap = Snapshot(tenants={n: {"metadata": {"name": n}, "spec": s} for n, s in tenants.items()},
                    namespace_labels=labels or {})
    return Tenancy.of(snap, require)


ACME = {"acme": {"namespaces": ["team-a"], "gpuBudget": 4, "maxPriority": 10}}


def test_a_policy_naming_a_tenant_that_does_not_bind_its_namespace_is_refused() -> None:
    t = tenancy(ACME)
    claim = t.claim("team-b", "acme")
    assert claim.refused and claim.reason == C.NAMESPACE_NOT_BOUND
    assert "acme" in claim.message and "team-b" in claim.message
    ok = t.claim("team-a", "acme")
    assert (ok.tenant, ok.reason) == ("acme", C.TENANT_BOUND_BY_OBJECT)
    assert ok.spec is not None and ok.spec.gpu_budget == 4


def test_without_spec_tenant_the_namespace_takes_the_tenant_that_binds_it() -> None:
    t = tenancy(ACME)
    assert t.claim("team-a", None).tenant == "acme"
    other = t.claim("team-z", None)
    assert (other.tenant, other.reason, other.spec) == ("team-z", C.TENANT_UNMANAGED, None)


def test_a_free_text_tenant_cannot_escape_the_tenant_that_binds_the_namespace() -> None:
    claim = tenancy(ACME).claim("team-a", "cheap")
    assert claim.refused and claim.reason == C.NAMESPACE_BOUND_ELSEWHERE
    assert "acme" in claim.message
    # Where no Tenant binds the namespace, free text keeps working as before Tenants.
    assert tenancy(ACME).claim("team-z", "cheap").tenant == "cheap"


def test_a_namespace_bound_by_two_tenants_needs_spec_tenant() -> None:
    t = tenancy({**ACME, "beta": {"namespaces": ["team-a"]}})
    claim = t.claim("team-a", None)
    assert claim.refused and claim.reason == C.TENANT_AMBIGUOUS
    assert "acme" in claim.message and "beta" in claim.message
    assert t.claim("team-a", "beta").tenant == "beta"


def test_required_tenants_refuse_unbound_namespaces() -> None:
    t = tenancy(ACME, require=True)
    for claimed in (None, "cheap"):
        claim = t.claim("team-z", claimed)
        assert claim.refused and claim.reason == C.TENANT_REQUIRED
        assert "--require-tenants" in claim.message
    assert t.claim("team-a", None).tenant == "acme"


@pytest.mark.parametrize(("selector", "labels", "bound"), [
    ({"matchLabels": {"team": "a"}}, {"team": "a"}, True),
    ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
     {"team": "b"}, True),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
     {}, True),  # NotIn holds where the label is absent, as in the label-selector API
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
     {"team": "a"}, False),
    ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, {"team": "x"}, True),
    ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, {"team": "x"}, False),
    ({"matchLabels": {"team": "a"},
      "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]},
     {"team": "a", "tier": "silver"}, False),  # every term must hold
    ({}, {"team": "a"}, False),  # an empty selector binds nothing
], ids=["labels", "labels-differ", "in", "notin-absent", "notin", "exists", "doesnotexist",
        "all-terms", "empty"])
def test_a_namespace_selector_binds_by_label(selector: dict[str, Any], labels: dict[str, str],
                                             bound: bool) -> None:
    t = tenancy({"acme": {"namespaceSelector": selector}}, {"ns": labels})
    assert (t.claim("ns", None).tenant == "acme") is bound


def test_a_namespace_the_cache_has_not_seen_matches_by_its_name_label() -> None:
    t = tenancy({"acme": {"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "fresh"}}}})
    assert t.claim("fresh", None).tenant == "acme"


def test_an_invalid_tenant_binds_nothing_and_refuses_policies_naming_it() -> None:
    t = tenancy({"acme": {"namespaces": ["team-a"], "gpuBudget": -1}})
    claim = t.claim("team-a", "acme")
    assert claim.refused and claim.reason == C.TENANT_INVALID and "gpuBudget" in claim.message
    assert t.claim("team-a", None).tenant == "team-a"


def test_the_tenants_priority_ceiling_lowers_a_higher_policy_priority() -> None:
    claim = tenancy(ACME).claim("team-a", None)
    assert (claim.priority(50), claim.priority(3)) == (10, 3)
    assert tenancy({}).claim("team-a", None).priority(50) == 50


def test_every_tenant_message_reads_as_pinned(golden: Any) -> None:
    t = tenancy({**ACME, "beta": {"namespaces": ["shared"]}, "gamma": {"namespaces": ["shared"]},
                 "broken": {"gpuBudget": -1}}, require=False)
    strict = tenancy(ACME, require=True)
    cases = {
        "bound-by-tenant": t.claim("team-a", None),
        "unmanaged-namespace": t.claim("team-z", None),
        "unmanaged-free-text": t.claim("team-z", "cheap"),
        "namespace-not-bound": t.claim("team-b", "acme"),
        "namespace-bound-elsewhere": t.claim("team-a", "cheap"),
        "ambiguous": t.claim("shared", None),
        "invalid": t.claim("team-a", "broken"),
        "required": strict.claim("team-z", None),
        "required-free-text": strict.claim("team-z", "cheap"),
    }
    for name, claim in cases.items():
        golden.check("tenancy", name, f"{claim.reason}: {claim.message}")
