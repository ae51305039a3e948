"""SLO rules from policies: window arithmetic, the CLI, and the real promtool.

The promtool cases feed per-minute good/bad traffic (15 s scrapes) through the generated
rules and check which burn-rate alerts fire: a fast burn pages, a slow burn opens a
ticket, a short blip and healthy traffic stay silent.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from slo_operator.api.models import SLOPolicySpec
from slo_operator.cli import main
from slo_operator.monitoring import rules
from slo_operator.monitoring import sli as signals
from slo_operator.render.names import label_value, service_label
from slo_operator.slo import histogram as loop_histogram
from tests.support.tools import promtool

NS, SVC = "team-a", "llama"


@pytest.mark.parametrize(
    ("period_s", "window_s", "want"),
    [
        pytest.param(30 * 86400, 60, [(3600, 300, 14.4, "page"), (21600, 1800, 6.0, "page"),
                                      (86400, 7200, 3.0, "ticket"), (259200, 21600, 1.0, "ticket")],
                     id="30d-is-the-sre-workbook"),
        pytest.param(86400, 60, [(300, 120, 5.76, "page"), (720, 120, 6.0, "page"),
                                 (2880, 240, 3.0, "ticket"), (8640, 720, 1.0, "ticket")],
                     id="1d-scales-with-a-floor-of-five-windows"),
        pytest.param(3600, 60, [(300, 120, 1.0, "page"), (360, 120, 1.0, "ticket")],
                     id="1h-keeps-only-distinct-windows"),
    ],
)
def test_burn_tiers(period_s: int, window_s: int, want: list[tuple[int, int, float, str]]) -> None:
    got = [(t.long_s, t.short_s, t.factor, t.severity)
           for t in rules.burn_tiers(period_s, window_s)]
    assert got == want


def test_every_tier_burns_at_least_the_budget_and_short_is_shorter() -> None:
    for period in (3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400):
        for window in (15, 60, 300):
            for t in rules.burn_tiers(period, window):
                assert t.factor >= 1 and window * 2 <= t.short_s < t.long_s <= period


POLICY = f"""\
apiVersion: inference.slo-operator.io/v1alpha1
kind: SLOPolicy
metadata: {{name: gold, namespace: {NS}}}
spec:
  window: 60s
  attainmentPeriod: 24h
  attainmentTarget: 0.9
  objectives: {{e2eLatencyMs: 800, ttftMs: 300, throughputCVMax: 0.5,
               interTokenLatencyMs: 100}}
---
apiVersion: inference.slo-operator.io/v1alpha1
kind: InferenceService
metadata: {{name: {SVC}, namespace: {NS}}}
spec:
  model: {{name: meta-llama/Llama-3.1-8B-Instruct, sizeBillions: 8}}
  sloPolicyRef: {{name: gold}}
"""


def cli(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, ["rules", *args], input=input)


def test_cli_prints_a_prometheus_rule_per_policy() -> None:
    res = cli("-f", "-", input=POLICY)
    assert res.exit_code == 0, res.output
    (doc,) = list(yaml.safe_load_all(res.output))
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["namespace"] == NS
    exprs = [r["expr"] for g in doc["spec"]["groups"] for r in g["rules"]]
    # Only the bound service, only in the policy's namespace.
    assert all(f'namespace="{NS}"' in e for e in exprs)
    assert any(f'service=~"{SVC}"' in e for e in exprs)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("kind: InferenceService\nmetadata: {name: x}\n", "no SLOPolicy",
                     id="no-policy"),
        pytest.param("kind: SLOPolicy\nmetadata: {name: p}\nspec: {window: 5x}\n",
                     "spec.window", id="bad-window-names-the-field"),
        pytest.param("kind: SLOPolicy\nmetadata: {name: p}\nspec: {attainmentTarget: 2}\n",
                     "spec.attainmentTarget", id="target-above-one"),
        pytest.param("kind: SLOPolicy\nspec: {}\n", "metadata.name", id="unnamed"),
        pytest.param("kind: [\n", "not valid YAML", id="not-yaml"),
    ],
)
def test_cli_rejects_bad_input_naming_the_field(text: str, want: str) -> None:
    res = cli("-f", "-", input=text)
    assert res.exit_code == 2
    assert want in res.output
    assert "Traceback" not in res.output


def test_status_bound_services_are_selected() -> None:
    docs = [{"kind": "SLOPolicy", "metadata": {"name": "p", "namespace": "n"},
             "status": {"boundServices": ["b", "a.x"]}}]
    ((ref, _),) = rules.policies_from_documents(docs)
    assert ref.services == ("a.x", "b")
    groups = rules.rule_groups(ref, SLOPolicySpec())
    assert 'service=~"a\\\\.x|b"' in groups[0]["rules"][0]["expr"]


def test_jitter_is_recorded_but_judges_windows_only_where_the_policy_sets_it() -> None:
    docs = [{"kind": "SLOPolicy", "metadata": {"name": "p", "namespace": "n"}}]
    ((ref, _),) = rules.policies_from_documents(docs)

    def judged(spec: SLOPolicySpec) -> set[str]:
        (group,) = rules.rule_groups(ref, spec)
        assert any(r.get("record") == signals.JITTER for r in group["rules"])
        return {r["labels"]["objective"] for r in group["rules"]
                if r.get("record") == f"{rules.RECORD_PREFIX}:objective_violated"}

    assert judged(SLOPolicySpec()) == {"e2e", "ttft"}
    bounded = SLOPolicySpec.model_validate({"objectives": {"throughputCVMax": 0.5}})
    assert judged(bounded) == {"e2e", "ttft", "jitter"}


def test_long_policy_and_service_names_match_the_pods_label_values() -> None:
    policy, service = "p" * 100, "s" * 100
    docs = [{"kind": "SLOPolicy", "metadata": {"name": policy, "namespace": "n"},
             "status": {"boundServices": [service]}}]
    ((ref, _),) = rules.policies_from_documents(docs)
    all_rules = [r for g in rules.rule_groups(ref, SLOPolicySpec()) for r in g["rules"]]
    exprs = "\n".join(r["expr"] for r in all_rules)
    # The service matcher is a regex alternative ("-" escaped there): check both halves.
    prefix, _, digest = service_label(service).rpartition("-")
    assert f"{prefix}\\\\-{digest}" in exprs
    assert service not in exprs
    assert f'policy="{label_value(policy)}"' in exprs
    assert f'policy="{policy}"' not in exprs
    assert {r["labels"]["policy"] for r in all_rules if "policy" in r.get("labels", {})} == {
        label_value(policy)
    }


# ------------------------------------------------------------------ promtool


def rule_file(tmp_path: Path) -> Path:
    res = cli("-f", "-", "--format", "file", input=POLICY)
    assert res.exit_code == 0, res.output
    path = tmp_path / "rules.yaml"
    path.write_text(res.output)
    return path


def test_promtool_check_rules_accepts_generated_rules(tmp_path: Path) -> None:
    proc = subprocess.run([str(promtool()), "check", "rules", str(rule_file(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_check_rules_accepts_the_prometheus_rule_spec(tmp_path: Path) -> None:
    doc = yaml.safe_load(cli("-f", "-", input=POLICY).output)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc["spec"]))
    proc = subprocess.run([str(promtool()), "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


STEP = 15  # seconds between scrapes
PER_STEP = 15  # requests finished per scrape interval


def minutes_to_samples(bad: Sequence[bool]) -> list[int]:
    """Which minute each 15 s sample's increment belongs to (sample t covers (t-15, t])."""
    return [((i * STEP) - 1) // 60 if i else 0 for i in range(len(bad) * 60 // STEP + 1)]


def cumulative(increments: Sequence[float]) -> str:
    total, out = 0.0, []
    for inc in increments:
        total += inc
        out.append(f"{total:g}")
    return " ".join(out)


def histogram(metric: str, labels: str, bounds: Sequence[str], bad: Sequence[bool],
              good_le: str) -> list[dict[str, str]]:
    """Bucket series: good minutes land in bucket ``good_le``, bad ones above every bound."""
    minute = minutes_to_samples(bad)
    series = []
    for le in bounds:
        incs = [0.0 if i == 0 else (PER_STEP if (le == "+Inf" or (
            not bad[minute[i]] and float(le) >= float(good_le))) else 0.0)
            for i in range(len(minute))]
        series.append({"series": f'{metric}_bucket{{{labels},le="{le}"}}',
                       "values": cumulative(incs)})
    return series


def traffic(bad_e2e: Sequence[bool], bad_ttft: Sequence[bool] | None = None,
            source: str = "vllm:") -> list[dict[str, str]]:
    labels = f'namespace="{NS}",service="{SVC}"'
    e2e = ("slo_gateway_e2e_request_latency_seconds" if source == "slo_gateway_"
           else "vllm:e2e_request_latency_seconds")
    ttft = ("slo_gateway_time_to_first_token_seconds" if source == "slo_gateway_"
            else "vllm:time_to_first_token_seconds")
    return (histogram(e2e, labels, ["0.5", "1", "+Inf"], bad_e2e, "0.5")
            + histogram(ttft, labels, ["0.1", "0.5", "+Inf"],
                        bad_ttft or [False] * len(bad_e2e), "0.1"))


def good(n: int) -> list[bool]:
    return [False] * n


def bad(n: int) -> list[bool]:
    return [True] * n


def alerts_at(rule_path: Path, tiers: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Expected alerts: labels and annotations as the rule file renders them for SVC."""
    alerts = [r for g in yaml.safe_load(rule_path.read_text())["groups"] for r in g["rules"]
              if r.get("alert") == rules.BURN_ALERT]
    out = []
    for long_d, short_d in tiers:
        (rule,) = [a for a in alerts if (a["labels"]["long_window"], a["labels"]["short_window"])
                   == (long_d, short_d)]
        annotations = {k: v.replace("{{ $labels.namespace }}", NS)
                       .replace("{{ $labels.service }}", SVC)
                       for k, v in rule["annotations"].items()}
        out.append({"exp_labels": {**rule["labels"], "namespace": NS, "service": SVC,
                                   "policy": "gold", "tenant": NS},
                    "exp_annotations": annotations})
    return out


PAGE = [("5m", "2m"), ("12m", "2m")]
TICKET_FAST = ("48m", "4m")
TICKET_SLOW = ("144m", "12m")


def every(n: int, bad_of_n: int, minutes: int) -> list[bool]:
    return [(m % n) < bad_of_n for m in range(minutes)]


# (id, traffic pattern per minute, minute to evaluate at, tiers that must fire)
SCENARIOS = [
    ("healthy-traffic-stays-silent", traffic(good(200)), 200, []),
    ("fast-burn-pages", traffic(good(180) + bad(12)), 192, PAGE),
    ("a-blip-after-recovery-stays-silent", traffic(good(180) + bad(12) + good(10)), 202, []),
    ("slow-burn-opens-a-ticket-only", traffic(every(5, 1, 200)), 199, [TICKET_SLOW]),
    # Evaluated where both the left-open (Prometheus 3) and closed (2.x) 4m range hold 2 bad.
    ("medium-burn-opens-both-tickets", traffic(every(5, 2, 200)), 197,
     [TICKET_FAST, TICKET_SLOW]),
    ("ttft-alone-burns-the-budget", traffic(good(192), good(180) + bad(12)), 192, PAGE),
    ("gateway-histograms-are-read", traffic(good(180) + bad(12), source="slo_gateway_"), 192,
     PAGE),
]


def test_promtool_test_rules_fire_and_stay_silent(tmp_path: Path) -> None:
    tool = promtool()
    rules_path = rule_file(tmp_path)
    tests = []
    for name, series, at, want in SCENARIOS:
        tests.append({
            "name": name,
            "interval": f"{STEP}s",
            "input_series": series,
            "alert_rule_test": [{"eval_time": f"{at}m", "alertname": rules.BURN_ALERT,
                                 "exp_alerts": alerts_at(rules_path, want)}],
        })
    # Every objective on its own makes a window bad; the gateway wins over vLLM's histograms.
    labels = f'namespace="{NS}",service="{SVC}"'
    decode = "vllm:request_time_per_output_token_seconds"

    def decode_hist(values: list[float], steps: int = 40) -> list[dict[str, str]]:
        """A decode-time histogram observing ``values`` every scrape (le as the client
        writes it, "1.0"; Prometheus 3 would store "1": the rules match both)."""
        out = []
        for le in [*signals.DECODE_BUCKETS, math.inf]:
            n = sum(v <= le for v in values)
            name = "+Inf" if math.isinf(le) else repr(float(le))
            out.append({"series": f'{decode}_bucket{{{labels},le="{name}"}}',
                        "values": f"0+{n}x{steps}"})
        out.append({"series": f"{decode}_sum{{{labels}}}", "values": f"0+{sum(values):g}x{steps}"})
        out.append({"series": f"{decode}_count{{{labels}}}", "values": f"0+{len(values)}x{steps}"})
        return out

    steady_decode = decode_hist([0.02] * 20)
    jumpy_decode = decode_hist([0.005] * 10 + [0.9] * 10)
    itl_bad = histogram("vllm:inter_token_latency_seconds", labels, ["0.05", "0.2", "+Inf"],
                        bad(10), "0.05")
    window_cases = [
        ("every-objective-met", traffic(good(10)) + steady_decode, "0"),
        ("jitter-alone", traffic(good(10)) + jumpy_decode, "1"),
        ("inter-token-latency-alone", traffic(good(10)) + itl_bad, "1"),
        ("gateway-good-wins-over-vllm-bad",
         traffic(good(10), source="slo_gateway_") + traffic(bad(10)), "0"),
    ]
    for name, series, want in window_cases:
        tests.append({
            "name": name, "interval": f"{STEP}s", "input_series": series,
            "promql_expr_test": [{
                "expr": f'{rules.WINDOW_BAD}{{namespace="{NS}"}}', "eval_time": "6m",
                "exp_samples": [{"labels": f'{rules.WINDOW_BAD}{{{labels},policy="gold",'
                                           f'tenant="{NS}"}}', "value": float(want)}],
            }],
        })
    # The rule's jitter is the loop's own estimate (slo.histogram.cv_lower_bound).
    jumpy = [0.005] * 10 + [0.9] * 10
    cumulative_counts = [(le, float(sum(v <= le for v in jumpy)))
                         for le in [*signals.DECODE_BUCKETS, math.inf]]
    want_cv = loop_histogram.cv_lower_bound(cumulative_counts, sum(jumpy))
    assert want_cv is not None and want_cv > 0.5
    tests.append({
        "name": "jitter-equals-the-loop-estimate", "interval": f"{STEP}s",
        "input_series": jumpy_decode,
        "promql_expr_test": [{
            # Equal up to float rounding (promtool 2.x compares values exactly).
            "expr": f"abs({signals.JITTER} - {want_cv!r}) < bool 1e-9", "eval_time": "6m",
            "exp_samples": [{"labels": f'{{{labels},policy="gold",tenant="{NS}"}}',
                             "value": 1}],
        }],
    })
    # Targets are series beside the signals (for dashboards), one per service.
    target_labels = f'{labels},objective="e2e",policy="gold",tenant="{NS}"'
    tests.append({
        "name": "targets-recorded-per-service", "interval": f"{STEP}s",
        "input_series": traffic(good(10)),
        "promql_expr_test": [{
            "expr": f'{rules.OBJECTIVE_TARGET}{{objective="e2e"}}', "eval_time": "6m",
            "exp_samples": [{"labels": f"{rules.OBJECTIVE_TARGET}{{{target_labels}}}",
                             "value": 0.8}],
        }],
    })
    test_file = tmp_path / "tests.yaml"
    test_file.write_text(yaml.safe_dump({
        "rule_files": [str(rules_path)], "evaluation_interval": "1m", "tests": tests}))
    proc = subprocess.run([str(tool), "test", "rules", str(test_file)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
