"""Prometheus recording and alerting rules derived from an SLOPolicy.

Pure: a policy (and the services bound to it) in, plain dicts out. The SLI is the
policy's own definition of a good window (``docs/slo-loop.md``): a window is bad when any
objective (end-to-end latency, time to first token, jitter, inter-token latency when set)
misses its target. ``slo_operator:window_bad`` records 1 for a bad window and 0 for a good
one, per service, once per window; its average over a period is the error ratio, so
attainment is ``1 - ratio`` and the error budget is ``1 - attainmentTarget``.

Alerts follow the multi-window, multi-burn-rate scheme of the Google SRE workbook, as
Sloth and Pyrra generate it: an alert fires when both a long and a short window burn the
budget faster than a factor; the short window makes it stop soon after the burn stops.
For a 30-day period the tiers are the workbook's (1h/5m at 14.4x and 6h/30m at 6x page;
1d/2h at 3x and 3d/6h at 1x open a ticket). Other periods scale the windows with the
period, keep the fraction of budget each tier spends, and never go below a few SLO
windows, because a ratio over fewer samples than that is noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from slo_operator.api.errors import field_problems
from slo_operator.api.models import API_VERSION, SLOPolicySpec, parse_duration
from slo_operator.monitoring import sli
from slo_operator.render.names import label_value, service_label

PROMETHEUS_RULE_API_VERSION = "monitoring.coreos.com/v1"
RECORD_PREFIX = "slo_operator"
WINDOW_BAD = f"{RECORD_PREFIX}:window_bad"
ATTAINMENT = f"{RECORD_PREFIX}:attainment:ratio"
BUDGET_REMAINING = f"{RECORD_PREFIX}:error_budget_remaining:ratio"
OBJECTIVE_TARGET = f"{RECORD_PREFIX}:objective_target"
ATTAINMENT_TARGET = f"{RECORD_PREFIX}:attainment:target"
BURN_ALERT = "SLOErrorBudgetBurn"

# A ratio over fewer than this many SLO windows is too noisy to page anyone on.
MIN_WINDOWS_LONG = 5
MIN_WINDOWS_SHORT = 2


@dataclass(frozen=True)
class Tier:
    """One multi-window burn-rate alert: both windows must burn faster than ``factor``."""

    long_s: int
    short_s: int
    factor: float
    severity: str


# (fraction of the period in the long window, fraction of the budget it may spend, severity);
# for 30 days these are the SRE workbook's 1h/5m 14.4x, 6h/30m 6x, 1d/2h 3x, 3d/6h 1x.
_WORKBOOK: tuple[tuple[float, float, str], ...] = (
    (1 / 720, 0.02, "page"),
    (1 / 120, 0.05, "page"),
    (1 / 30, 0.10, "ticket"),
    (1 / 10, 0.10, "ticket"),
)


def burn_tiers(period_s: int, window_s: int) -> list[Tier]:
    """The alert tiers for an attainment period and SLO window (seconds)."""
    tiers: list[Tier] = []
    for fraction, spend, severity in _WORKBOOK:
        long_s = max(_round_to(period_s * fraction, window_s), MIN_WINDOWS_LONG * window_s)
        long_s = min(long_s, period_s)
        short_s = max(_round_to(long_s / 12, window_s), MIN_WINDOWS_SHORT * window_s)
        if short_s >= long_s or any(t.long_s == long_s for t in tiers):
            continue  # the period is too short for this tier: an earlier one covers it
        # Spending `spend` of the budget within `long_s` means burning at this rate.
        factor = max(1.0, spend * period_s / long_s)
        tiers.append(Tier(long_s, short_s, round(factor, 2), severity))
    return tiers


def _round_to(seconds: float, step: int) -> int:
    return max(step, round(seconds / step) * step)


def duration(seconds: int) -> str:
    """Prometheus duration text: 5m, 1h, 3d, 90s."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True)
class PolicyRef:
    """Where a policy lives and which services are bound to it."""

    namespace: str
    name: str
    services: tuple[str, ...] = ()


def _labels(ref: PolicyRef, spec: SLOPolicySpec) -> dict[str, str]:
    return {
        "namespace": ref.namespace,
        # Pods carry these as label values (shortened with a hash beyond 63 characters).
        "policy": label_value(ref.name),
        "tenant": label_value(spec.tenant or ref.namespace),
    }


def _policy_matcher(ref: PolicyRef) -> str:
    return (f'namespace="{sli.escape(ref.namespace)}",'
            f'policy="{sli.escape(label_value(ref.name))}"')


def rule_groups(ref: PolicyRef, spec: SLOPolicySpec) -> list[dict[str, Any]]:
    """The rule groups for one policy: signals, window SLI, ratios and burn-rate alerts."""
    window_s = parse_duration(spec.window)
    period_s = max(parse_duration(spec.attainment_period), window_s)
    budget = 1.0 - spec.attainment_target
    labels = _labels(ref, spec)
    # Series carry the pod label value of each service (names over 63 characters are shortened).
    selector = sli.service_selector(
        ref.namespace, tuple(service_label(s) for s in ref.services)
    )
    mine = _policy_matcher(ref)
    rules: list[dict[str, Any]] = []

    objectives = sli.objectives(spec)
    for sig in sli.recorded(spec):
        rules.append({
            "record": sig.record,
            "expr": sig.expr(selector, duration(window_s)),
            "labels": {**labels, **sig.labels},
        })
    # Jitter from the decode-time histogram recorded just above (rules run in order).
    rules.append({
        "record": sli.JITTER,
        "expr": sli.jitter_expr(mine, sli.DECODE_BUCKETS),
    })
    # Targets as series beside the signals, so dashboards draw "P99 against target" from
    # Prometheus alone; count() keeps one series per service even when the signal is NaN.
    by = "namespace, service, policy, tenant"
    for obj in objectives:
        rules.append({
            "record": OBJECTIVE_TARGET,
            "expr": f"count by ({by}) ({obj.record}{{{mine}}}) * 0 + {_num(obj.target)}",
            "labels": {"objective": obj.name},
        })
    # One 0/1 series per objective, then the window is bad when any objective is.
    for obj in objectives:
        rules.append({
            "record": f"{RECORD_PREFIX}:objective_violated",
            "expr": f"{obj.record}{{{mine}}} > bool {_num(obj.target)}",
            "labels": {"objective": obj.name},
        })
    rules.append({
        "record": WINDOW_BAD,
        "expr": (f"max by (namespace, service, policy, tenant) "
                 f"({RECORD_PREFIX}:objective_violated{{{mine}}})"),
    })

    ratio_windows = sorted({t.long_s for t in burn_tiers(period_s, window_s)}
                           | {t.short_s for t in burn_tiers(period_s, window_s)} | {period_s})
    for w in ratio_windows:
        rules.append({
            "record": f"{WINDOW_BAD}:ratio_rate{duration(w)}",
            "expr": f"avg_over_time({WINDOW_BAD}{{{mine}}}[{duration(w)}])",
        })
    period_ratio = f"{WINDOW_BAD}:ratio_rate{duration(period_s)}{{{mine}}}"
    rules.append({"record": ATTAINMENT, "expr": f"1 - {period_ratio}"})
    rules.append({"record": ATTAINMENT_TARGET,
                  "expr": f"count by ({by}) ({period_ratio}) * 0 + "
                          f"{_num(spec.attainment_target)}"})
    rules.append({
        "record": BUDGET_REMAINING,
        "expr": f"1 - {period_ratio} / {_num(budget)}",
    })

    alerts: list[dict[str, Any]] = []
    for tier in burn_tiers(period_s, window_s):
        # A threshold above 1 could never be reached; at 1 every window in both is bad.
        threshold = min(tier.factor * budget, 1.0)
        long_d, short_d = duration(tier.long_s), duration(tier.short_s)
        alerts.append({
            "alert": BURN_ALERT,
            "expr": (f"{WINDOW_BAD}:ratio_rate{long_d}{{{mine}}} >= {_num(threshold)}\n"
                     f"and\n"
                     f"{WINDOW_BAD}:ratio_rate{short_d}{{{mine}}} >= {_num(threshold)}"),
            "labels": {"severity": tier.severity, "long_window": long_d,
                       "short_window": short_d, "burn_rate": _num(tier.factor)},
            "annotations": {
                "summary": ("{{ $labels.namespace }}/{{ $labels.service }} burns the error "
                            f"budget of SLOPolicy {ref.name} at {_num(tier.factor)}x or faster"),
                "description": (
                    f"At least {_num(threshold * 100)}% of the {duration(window_s)} windows in "
                    f"both the last {long_d} and {short_d} missed an objective of SLOPolicy "
                    f"{ref.namespace}/{ref.name} (error budget {_num(budget)} over "
                    f"{duration(period_s)}). kubectl describe infsvc -n "
                    "{{ $labels.namespace }} {{ $labels.service }} shows the last decisions."
                ),
            },
        })
    # One group: Prometheus evaluates a group's rules in order, so the alerts read this
    # evaluation's ratios rather than the previous interval's.
    return [{"name": f"slo-operator.{ref.namespace}.{ref.name}", "interval": duration(window_s),
             "rules": rules + alerts}]


def _num(value: float) -> str:
    if math.isclose(value, round(value)):
        return str(round(value))
    return f"{value:.6g}"


def rule_file(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """A plain Prometheus rule file (``rule_files:``)."""
    return {"groups": groups}


def prometheus_rule(ref: PolicyRef, groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule owned by nothing but Git."""
    return {
        "apiVersion": PROMETHEUS_RULE_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": {
            "name": f"slo-{ref.name}",
            "namespace": ref.namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "slo-operator",
                "app.kubernetes.io/part-of": "slo-operator",
            },
            "annotations": {"inference.slo-operator.io/policy": f"{API_VERSION}/{ref.name}"},
        },
        "spec": {"groups": groups},
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line expressions as literal blocks, the way people write rule files."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(doc: dict[str, Any]) -> str:
    """YAML as promtool and kubectl read it."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)


class RulesInputError(ValueError):
    """Input that cannot become rules; the message names the document and field."""


def policies_from_documents(
    docs: list[Any], source: str = "input"
) -> list[tuple[PolicyRef, SLOPolicySpec]]:
    """SLOPolicies in parsed YAML documents, with the services that reference each.

    Services bound to a policy are the InferenceServices in the same input whose
    ``spec.sloPolicyRef.name`` names it, plus ``status.boundServices`` when present.
    """
    policies = [d for d in docs if isinstance(d, dict) and d.get("kind") == "SLOPolicy"]
    if not policies:
        raise RulesInputError(f"{source}: no SLOPolicy found (kind: SLOPolicy)")
    bound: dict[tuple[str, str], set[str]] = {}
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "InferenceService":
            meta = d.get("metadata") or {}
            ref = ((d.get("spec") or {}).get("sloPolicyRef") or {}).get("name")
            if ref and meta.get("name"):
                key = (meta.get("namespace") or "default", str(ref))
                bound.setdefault(key, set()).add(str(meta["name"]))
    out = []
    for i, doc in enumerate(policies):
        meta = doc.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise RulesInputError(f"{source}: SLOPolicy #{i + 1}: metadata.name is required")
        namespace = str(meta.get("namespace") or "default")
        try:
            spec = SLOPolicySpec.model_validate(doc.get("spec") or {})
        except ValidationError as err:
            problems = "\n".join(f"  {p}" for p in field_problems(err))
            raise RulesInputError(
                f"{source}: SLOPolicy {namespace}/{name}: invalid spec\n{problems}") from err
        status_bound = (doc.get("status") or {}).get("boundServices") or []
        services = bound.get((namespace, name), set()) | {str(s) for s in status_bound}
        out.append((PolicyRef(namespace, name, tuple(sorted(services))), spec))
    return out
