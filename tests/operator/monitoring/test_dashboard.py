"""The Grafana dashboard: committed JSON equals the generator's, and every PromQL
expression in it (panels and variables) parses in the real promtool."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from slo_operator.monitoring import dashboard
from tests.support.tools import ROOT, promtool

COMMITTED = ROOT / "deploy" / "grafana" / "slo-operator.json"

# What Grafana substitutes before sending a query, with values of the right shape.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                "$namespace": "team-a", "$service": "llama", "$tenant": "team-a"}


def expressions(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression: panel targets, and the selectors inside label_values()."""
    out = [t["expr"] for p in model["panels"] for t in p.get("targets", [])]
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", var["query"]["query"])
            assert m, var["query"]
            out.append(m.group(1))
    return out


def substitute(expr: str) -> str:
    for name, value in sorted(GRAFANA_VARS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr}"
    return expr


def test_committed_dashboard_is_generated() -> None:
    assert json.loads(COMMITTED.read_text()) == dashboard.dashboard(), (
        "deploy/grafana/slo-operator.json is stale: "
        "run `python -m slo_operator.monitoring.dashboard`")


def test_panels_have_unique_ids_and_cover_the_brief() -> None:
    model = dashboard.dashboard()
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    text = " ".join(e for e in expressions(model))
    for needle in ("e2e_latency_seconds", "ttft_seconds", "jitter", "num_requests_running",
                   "inflight_limit", "decisions", "attainment", "error_budget_remaining"):
        assert needle in text


def test_every_expression_parses_in_promtool(tmp_path: Path) -> None:
    tool = promtool()
    exprs = [substitute(e) for e in expressions(dashboard.dashboard())]
    assert len(exprs) >= 20
    # promtool parses rule expressions with the real PromQL parser: one rule per expression.
    rule_file = tmp_path / "dashboard-exprs.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    proc = subprocess.run([str(tool), "check", "rules", str(rule_file)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(exprs)} rules found" in proc.stdout


def test_a_broken_expression_is_caught(tmp_path: Path) -> None:
    # The check above would be worthless if promtool accepted anything.
    rule_file = tmp_path / "bad.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "x", "expr": "sum by (a (rate(x[5m]))"}]}]}))
    proc = subprocess.run([str(promtool()), "check", "rules", str(rule_file)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
