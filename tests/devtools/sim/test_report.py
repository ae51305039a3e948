"""Report generation end to end on a tiny two-tenant trace."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from slo_devtools.sim.bench import candidates, run_workload, step_model
from slo_devtools.sim.policies import Objectives
from slo_devtools.sim.report import lower_bound, render
from slo_devtools.sim.run import Tenant, Workload
from slo_devtools.sim.traces import Request, Trace
from slo_operator.cli import main


def tiny() -> Workload:
    reqs = [Request(i * 0.25, 400, 30, "chat" if i % 2 else "code") for i in range(1200)]
    obj = Objectives(4000, 500, 100)
    m = step_model()
    return Workload("tiny", Trace("tiny", tuple(reqs), 300.0),
                    (Tenant("chat", m, obj, max_replicas=3), Tenant("code", m, obj,
                                                                    max_replicas=3)))


def test_report_has_every_policy_a_verdict_and_plots(tmp_path: Path) -> None:
    ticks: list[str] = []
    res = run_workload("tiny", "strict", wl=tiny(), tick=ticks.append)
    assert len(ticks) == len(candidates()) + 3
    # The light load needs one replica per tenant; the oracle meets every window.
    assert res.oracle.run.min_attainment == 1.0
    assert res.static_n == {"chat": 1, "code": 1}
    path = render([res], tmp_path, cpu_s=1.0)
    text = path.read_text()
    for fam in ("keda-waiting", "keda-outstanding", "knative-kpa", "llm-d-slo", "llm-d-wva",
                "aibrix-apa", "dynamo-planner", "slo-operator", "oracle", "static"):
        assert fam in text
    assert "Verdict" in text and ("MET" in text or "MISSED" in text)
    assert "faster than real time" in text
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["tiny-strict-chat.png", "tiny-strict-code.png"]
    assert all(f"]({p})" in text for p in pngs)


def test_cli_rejects_an_unknown_trace_without_a_traceback(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["bench", "--trace", "azure-chat", "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert "--trace" in r.output and "azure-chat" in r.output


def test_a_fleet_section_compares_with_the_reference_and_the_lower_bound(
        tmp_path: Path) -> None:
    res = run_workload("tiny", "strict", wl=tiny(), fleet="x1.3")
    assert res.fleet == "x1.3"
    assert all(t.true_model is not None for t in res.workload.tenants)
    text = render([res], tmp_path, cpu_s=1.0).read_text()
    assert "## tiny - strict targets - fleet x1.3" in text
    assert "x reference" in text and "x oracle" not in text
    # The oracle's lower bound is stated beside the reference, with the gap between them.
    lb = lower_bound(res)
    assert lb is not None and lb <= res.oracle.run.gpu_hours
    assert f"reference {res.oracle.run.gpu_hours / lb:.2f}x" in text
    assert "after warm-up" in text and "| tiny | strict | x1.3 |" in text
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "tiny-strict-x1.3-chat.png", "tiny-strict-x1.3-code.png"]


def test_plots_of_tenants_with_long_names_get_short_distinct_file_names(
        tmp_path: Path) -> None:
    long_a, long_b = "a" * 240 + "-chat", "a" * 240 + "-code"
    reqs = [Request(i * 0.5, 400, 30, long_a if i % 2 else long_b) for i in range(240)]
    obj = Objectives(4000, 500, 100)
    m = step_model()
    wl = Workload("t" * 200, Trace("t" * 200, tuple(reqs), 120.0),
                  (Tenant(long_a, m, obj, max_replicas=2), Tenant(long_b, m, obj,
                                                                   max_replicas=2)))
    text = render([run_workload("t" * 200, "strict", wl=wl)], tmp_path, cpu_s=1.0).read_text()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert len(pngs) == 2 and all(len(p) <= 120 for p in pngs)
    assert all(p.startswith("t" * 100) for p in pngs)
    assert all(f"]({p})" in text for p in pngs)
