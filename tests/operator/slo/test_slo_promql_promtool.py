"""The built queries in the real PromQL engine (promtool): they parse, and on synthetic
scrapes they return what slo.signals expects (labels, sources, windows, rates)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from slo_operator.slo.promql import build_queries
from tests.support.tools import promtool

HOSTILE = ['team"} or vector(1) or {a="', "back\\slash", "new\nline", "a"]


def run_promtool(tmp_path: Path, args: list[str], doc: dict[str, Any], name: str) -> str:
    f = tmp_path / name
    f.write_text(yaml.safe_dump(doc))
    proc = subprocess.run([str(promtool()), *args, str(f)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_every_query_parses_with_many_windows_and_hostile_scopes(tmp_path: Path) -> None:
    plan = build_queries([60, 300, 120, 3600, 90], namespaces=HOSTILE)
    rules = [{"record": f"slo:q_{q.name}", "expr": q.expr} for q in plan.queries]
    out = run_promtool(tmp_path, ["check", "rules"], {"groups": [{"name": "slo",
                                                                  "rules": rules}]},
                       "rules.yaml")
    assert f"{len(rules)} rules found" in out


def series(name: str, labels: dict[str, str], per_step: float) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{body}}}", "values": f"0+{per_step}x40"}


def test_queries_return_tagged_per_service_series(tmp_path: Path) -> None:
    """Two pods of one service (gateway and engine views), one pod of another service;
    counters grow at fixed rates every 15 s, so each expected rate is exact."""
    a0 = {"namespace": "a", "service": "s", "pod": "s-0", "tenant": "a"}
    a1 = {**a0, "pod": "s-1"}
    b0 = {"namespace": "b", "service": "t", "pod": "t-0", "tenant": "b"}
    inputs = []
    for pod in (a0, a1):
        for le, per in (("0.5", 15), ("1.0", 30), ("+Inf", 45)):  # 1, 2, 3 per second
            inputs.append(series("slo_gateway_e2e_request_latency_seconds_bucket",
                                 {**pod, "le": le, "exported_tenant": "x"}, per))
            inputs.append(series("vllm:e2e_request_latency_seconds_bucket",
                                 {**pod, "le": le, "engine": "0", "model_name": "m"}, per))
        inputs.append(series("vllm:request_success_total",
                             {**pod, "engine": "0", "model_name": "m",
                              "finished_reason": "length"}, 15))
        inputs.append(series("vllm:num_requests_running",
                             {**pod, "engine": "0", "model_name": "m"}, 0))
    inputs.append(series("vllm:e2e_request_latency_seconds_bucket",
                         {**b0, "le": "+Inf", "engine": "0", "model_name": "m"}, 30))
    inputs.append(series("vllm:request_success_total",
                         {**b0, "engine": "0", "model_name": "m",
                          "finished_reason": "stop"}, 30))
    plan = build_queries([60], namespaces=["a", "b", *HOSTILE])
    q = {x.name: x.expr for x in plan.queries}

    def sample(labels: dict[str, str], value: float) -> dict[str, Any]:
        body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return {"labels": "{" + body + "}", "value": value}

    a, b = {"namespace": "a", "service": "s"}, {"namespace": "b", "service": "t"}
    w = {"window": "60s"}
    e2e = [sample({**a, **w, "source": src, "le": le}, 2 * per)
           for src in ("gateway", "engine") for le, per in (("0.5", 1), ("1.0", 2), ("+Inf", 3))]
    e2e.append(sample({**b, **w, "source": "engine", "le": "+Inf"}, 2))
    tests = {"fuzzy_compare": True, "tests": [{
        "interval": "15s",
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": q["e2e"], "eval_time": "8m", "exp_samples": e2e},
            {"expr": f'{q["throughput"]}', "eval_time": "8m", "exp_samples": [
                sample({**a, **w, "signal": "requests"}, 2),
                sample({**b, **w, "signal": "requests"}, 2)]},
            {"expr": q["running"], "eval_time": "8m", "exp_samples": [
                sample({**a, "stat": "sum"}, 0), sample({**a, "stat": "pods"}, 2),
                sample({**a, "stat": "newest"}, 480)]},
        ],
    }]}
    run_promtool(tmp_path, ["test", "rules"], tests, "test.yaml")
