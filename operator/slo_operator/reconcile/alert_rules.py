"""Keep one PrometheusRule per SLOPolicy (``--manage-alert-rules``) and say how that went
in the policy's ``AlertRulesReady`` condition.

The rule is rendered by ``monitoring.managed_rules`` (the generator behind
``slo-operator rules``) and applied with server-side apply only when it differs from what
was applied lately (the :class:`AppliedCache` the owned Deployments use; its TTL
re-asserts it against other writers). A refusal (422 from validation or an admission
policy, 403 from RBAC or a webhook) becomes the condition and one Event, and is retried
after the cache's back-off; it never raises, so the policy's other handling and other
policies go on. Whether the API server serves the PrometheusRule kind comes from API
discovery (:class:`ApiDiscovery`; the adapter keeps each answer a minute, so a CRD
installed or removed later shows at the next policy event after that), and an apply that
finds the kind gone (404) says so too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slo_operator.api.cluster import ApiRejected
from slo_operator.api.conditions import Cond, merge_conditions
from slo_operator.api.models import Condition, SLOPolicyStatus, dump
from slo_operator.monitoring import managed_rules as M
from slo_operator.monitoring.rules import RulesInputError
from slo_operator.reconcile.ports import ApiDiscovery, AppliedCache, KubeWriter

log = logging.getLogger(__name__)

PolicyKey = tuple[str, str]


@dataclass
class AlertRules:
    """The managed-rules setting and what this replica knows of the rules it keeps."""

    enabled: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    # The AlertRulesReady condition last written per policy (kept while the watch cache
    # still serves an older status) and the (status, reason) last announced by an Event.
    written: dict[PolicyKey, Condition] = field(default_factory=dict)
    announced: dict[PolicyKey, tuple[str, str]] = field(default_factory=dict)

    def forget(self, key: PolicyKey) -> None:
        self.written.pop(key, None)
        self.announced.pop(key, None)

    def latest(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` with the AlertRulesReady condition last written for it, so a status
        computed from a body the cache served before that write keeps the condition."""
        mine = self.written.get(_key(body))
        if mine is None:
            return dict(body)
        status = dict(body.get("status") or {})
        others = [c for c in status.get("conditions") or []
                  if c.get("type") != M.ALERT_RULES_READY]
        return {**body, "status": {**status, "conditions": [*others, dump(mine)]}}


def _key(body: Mapping[str, Any]) -> PolicyKey:
    meta = body["metadata"]
    return (str(meta["namespace"]), str(meta["name"]))


def desired_condition(
    kube: KubeWriter, discovery: ApiDiscovery, state: AlertRules, applied: AppliedCache,
    body: Mapping[str, Any], now: datetime,
) -> Cond | None:
    """Apply the policy's PrometheusRule when it changed; the condition that says how it
    stands (None while a refusal of this very object is in its back-off: the condition
    written at the refusal still stands)."""
    stamp = now.timestamp()
    if not discovery.serves(M.API_GROUP_VERSION, M.KIND):
        return M.crd_missing()
    try:
        obj = M.managed_rule(body, state.labels)
    except RulesInputError as e:
        return M.invalid_spec(e)
    if applied.fresh(obj, stamp):
        return M.applied(obj)
    if applied.backoff(obj, stamp) is not None:
        return None  # refused lately; the condition written then still stands
    try:
        kube.apply(obj)
    except ApiRejected as e:
        if e.status == 404:  # the CRD was removed since discovery last answered
            return M.crd_missing()
        applied.reject(obj, stamp, str(e))
        log.warning("Refused %s %s/%s: %s", M.KIND, _key(body)[0], e.name, e.message)
        return M.rejected(e)
    applied.remember(obj, stamp)
    return M.applied(obj)


def write_condition(kube: KubeWriter, state: AlertRules, body: Mapping[str, Any], cond: Cond,
                    now: datetime) -> bool:
    """Patch the policy's status when its AlertRulesReady differs from ``cond``; post an
    Event when (status, reason) changed since the last one announced. Returns whether it
    patched."""
    key = _key(body)
    meta = body["metadata"]
    old = SLOPolicyStatus.model_validate(body.get("status") or {})
    conds = merge_conditions(old.conditions, [cond], now, meta.get("generation"))
    mine = next(c for c in conds if c.type == M.ALERT_RULES_READY)
    before = next((c for c in old.conditions if c.type == M.ALERT_RULES_READY), None)
    patched = False
    if before is None or (before.status, before.reason, before.message) != (
            mine.status, mine.reason, mine.message):
        kube.patch_status("SLOPolicy", key[0], key[1],
                          {"conditions": [dump(c) for c in conds]})
        patched = True
    state.written[key] = mine
    seen = state.announced.get(key) or (
        (before.status, before.reason) if before is not None else None)
    if seen != (mine.status, mine.reason):
        kube.event(body, "Warning" if cond.status is False else "Normal", cond.reason,
                   cond.message, now)
    state.announced[key] = (mine.status, mine.reason)
    return patched


def sync_policy(
    kube: KubeWriter, discovery: ApiDiscovery, state: AlertRules, applied: AppliedCache,
    body: Mapping[str, Any], now: datetime,
) -> Cond | None:
    """One policy's rules and condition (blocking: run it in a worker thread). Does
    nothing while managed alert rules are off."""
    if not state.enabled:
        return None
    cond = desired_condition(kube, discovery, state, applied, body, now)
    if cond is not None:
        write_condition(kube, state, body, cond, now)
    return cond


def remove_policy(kube: KubeWriter, state: AlertRules, applied: AppliedCache,
                  namespace: str, name: str) -> None:
    """A deleted policy: delete its PrometheusRule (the garbage collector would too, via
    the owner reference; this does not wait for it) and forget what was kept of it."""
    state.forget((namespace, name))
    applied.forget(M.KIND, namespace, M.rule_name(name))
    if not state.enabled:
        return
    try:
        kube.delete(M.KIND, namespace, M.rule_name(name))
    except ApiRejected as e:
        log.warning("Could not delete %s %s/%s (the garbage collector will): %s",
                    M.KIND, namespace, e.name, e.message)
