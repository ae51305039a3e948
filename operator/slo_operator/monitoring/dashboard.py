"""The Grafana dashboard (deploy/grafana/slo-operator.json), built from the metric names'
one home (``monitoring.sli``, ``monitoring.rules``, ``monitoring.operator_metrics``, the
runtime contract).

``python -m slo_operator.monitoring.dashboard [OUT]`` rewrites the committed JSON; a test holds
the two equal and parses every expression with promtool. The per-service and per-tenant
series come from the rules ``slo-operator rules`` generates; replicas and the live limit
from the pods' own metrics; decisions and health from the operator's metrics.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from slo_operator.monitoring import rules, sli
from slo_runtime import contract as c

SVC = 'namespace=~"$namespace",service=~"$service"'
TENANT = 'tenant=~"$tenant"'
UID = "slo-operator"


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr,
            "legendFormat": legend, "refId": ref}


def _panel(pid: int, title: str, targets: list[tuple[str, str]], unit: str,
           grid: tuple[int, int, int, int], description: str,
           kind: str = "timeseries") -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "id": pid, "type": kind, "title": title, "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom"}},
        "targets": [_target(e, leg, chr(ord("A") + i)) for i, (e, leg) in enumerate(targets)],
    }


def _row(pid: int, title: str, y: int) -> dict[str, Any]:
    return {"id": pid, "type": "row", "title": title, "collapsed": False,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []}


def _vs_target(record: str, objective: str) -> list[tuple[str, str]]:
    return [
        (f"{record}{{{SVC}}}", "{{namespace}}/{{service}}"),
        (f'{rules.OBJECTIVE_TARGET}{{{SVC},objective="{objective}"}}',
         "target {{namespace}}/{{service}}"),
    ]


def panels() -> list[dict[str, Any]]:
    """Every panel, top to bottom: services, tenants, the operator itself."""
    pods = SVC
    out: list[dict[str, Any]] = [_row(1, "Per service", 0)]
    out += [
        _panel(2, "End-to-end latency at the policy percentile vs target",
               _vs_target(sli.E2E, "e2e"), "s", (0, 1, 12, 8),
               "P99 (or the policy's e2ePercentile) of request latency, gateway histograms "
               "first, vLLM's otherwise; dashed: the SLOPolicy target."),
        _panel(3, "Time to first token vs target", _vs_target(sli.TTFT, "ttft"), "s",
               (12, 1, 12, 8), "TTFT at the policy's ttftPercentile against its target."),
        _panel(4, "Jitter (decode-rate CV) vs target", _vs_target(sli.JITTER, "jitter"),
               "none", (0, 9, 8, 8),
               "Service instability: coefficient of variation of the per-request decode "
               "rate in each window."),
        _panel(5, "Replicas serving", [
            (f"count by (namespace, service) ({c.NUM_REQUESTS_RUNNING}{{{pods}}})",
             "{{namespace}}/{{service}}"),
        ], "none", (8, 9, 8, 8), "vLLM pods reporting metrics, per service."),
        _panel(6, "Live batch limit per replica", [
            (f"max by (namespace, service) ({c.GATEWAY_INFLIGHT_LIMIT}{{{pods}}})",
             "limit {{namespace}}/{{service}}"),
            (f"max by (namespace, service) ({c.GATEWAY_INFLIGHT}{{{pods}}})",
             "in flight (busiest pod) {{namespace}}/{{service}}"),
        ], "none", (16, 9, 8, 8),
            "The in-flight limit the gateway enforces (moved by the operator without "
            "restarts) and the busiest pod's in-flight requests."),
        _panel(7, "Request rate and queue", [
            (f"{sli.REQUEST_RATE}{{{SVC}}}", "req/s {{namespace}}/{{service}}"),
            (f"sum by (namespace, service) ({c.NUM_REQUESTS_WAITING}{{{pods}}})",
             "waiting in vLLM {{namespace}}/{{service}}"),
            (f"sum by (namespace, service) ({c.GATEWAY_QUEUE_DEPTH}{{{pods}}})",
             "waiting in gateway {{namespace}}/{{service}}"),
        ], "short", (0, 17, 12, 8), "Finished requests per second and requests queued."),
        _panel(8, "Bad windows (any objective missed)", [
            (f"{rules.WINDOW_BAD}{{{SVC}}}", "{{namespace}}/{{service}}"),
        ], "none", (12, 17, 12, 8), "1 when the last SLO window missed an objective."),
    ]
    out.append(_row(9, "Per tenant", 25))
    out += [
        _panel(10, "Attainment over the policy period vs target", [
            (f"{rules.ATTAINMENT}{{{TENANT}}}", "{{tenant}} {{namespace}}/{{service}}"),
            (f"{rules.ATTAINMENT_TARGET}{{{TENANT}}}", "target {{tenant}} {{service}}"),
        ], "percentunit", (0, 26, 12, 8),
            "Fraction of good windows over attainmentPeriod, per service of the tenant."),
        _panel(11, "Error budget remaining", [
            (f"min by (tenant, policy) ({rules.BUDGET_REMAINING}{{{TENANT}}})",
             "{{tenant}} / {{policy}}"),
        ], "percentunit", (12, 26, 12, 8),
            "Share of the error budget left (worst service of each policy); below 0: "
            "overspent."),
        _panel(12, "Burn-rate alerts firing", [
            (f'count by (tenant, severity) (ALERTS{{alertname="{rules.BURN_ALERT}",'
             f'alertstate="firing",{TENANT}}})', "{{tenant}} {{severity}}"),
        ], "none", (0, 34, 24, 6), "Multi-window burn-rate alerts from the generated rules."),
    ]
    out.append(_row(13, "Operator", 40))
    out += [
        _panel(14, "Decisions", [
            ("sum by (direction, reason) "
             "(increase(slo_operator_decisions_total[$__rate_interval]))",
             "{{direction}} ({{reason}})"),
        ], "none", (0, 41, 12, 8), "Scaling and batch-limit decisions, with their reasons."),
        _panel(15, "Reconciles and errors", [
            ("sum by (kind, result) (rate(slo_operator_reconciles_total[$__rate_interval]))",
             "{{kind}} {{result}}"),
            ("sum by (reason) (rate(slo_operator_errors_total[$__rate_interval]))",
             "error {{reason}}"),
            ("sum(slo_operator_pending_work)", "pending work"),
        ], "short", (12, 41, 12, 8), "Reconciles per second by result, errors, pending work."),
        _panel(16, "Prometheus query latency (P90) per signal", [
            ("histogram_quantile(0.9, sum by (signal, le) "
             "(rate(slo_operator_prometheus_query_duration_seconds_bucket[$__rate_interval])))",
             "{{signal}}"),
        ], "s", (0, 49, 12, 8), "Round trip of the SLO loop's PromQL queries."),
        _panel(17, "Acting replica", [
            ("slo_operator_peering_active", "{{pod}}"),
        ], "none", (12, 49, 12, 8), "1 for the replica that acts; standbys show 0."),
    ]
    return out


def _variable(name: str, query: str, label: str, multi: bool = True) -> dict[str, Any]:
    return {
        "name": name, "label": label, "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": f"{name}-var"}, "definition": query,
        "includeAll": True, "multi": multi, "refresh": 2, "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def dashboard() -> dict[str, Any]:
    """The whole dashboard as Grafana's JSON model."""
    return {
        "uid": UID, "title": "slo-operator: LLM inference SLOs",
        "description": "Per service latency against SLO targets, replicas, live batch limit; "
                       "per tenant attainment and error budget; the operator's decisions.",
        "tags": ["slo-operator", "vllm", "slo"], "timezone": "browser",
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}},
            _variable("namespace", f"label_values({sli.E2E}, namespace)", "Namespace"),
            _variable("service", f'label_values({sli.E2E}{{namespace=~"$namespace"}}, '
                                 "service)", "Service"),
            _variable("tenant", f"label_values({rules.ATTAINMENT}, tenant)", "Tenant"),
        ]},
        "annotations": {"list": []},
        "panels": panels(),
    }


def render() -> str:
    """The committed file's text."""
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else Path("deploy/grafana/slo-operator.json")
    out.write_text(render())
    print(f"Wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
