"""The development commands: reachable as ``slo-devtools`` and, through the entry points of
this distribution, as ``slo-operator demo`` / ``slo-operator bench``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slo_devtools.commands import main as devtools_main
from slo_operator.cli import main as operator_main


@pytest.mark.parametrize("cmd", ["replica", "demo", "bench"])
def test_every_devtools_command_has_help(cmd: str) -> None:
    r = CliRunner().invoke(devtools_main, [cmd, "--help"])
    assert r.exit_code == 0, r.output
    assert "Usage:" in r.output


@pytest.mark.parametrize("cmd", ["demo", "bench"])
def test_operator_cli_offers_the_installed_devtools_commands(cmd: str) -> None:
    r = CliRunner().invoke(operator_main, [cmd, "--help"])
    assert r.exit_code == 0, r.output
    assert "needs slo-devtools" not in r.output
    assert "--out" in r.output


def test_bench_rejects_an_unknown_trace_with_exit_status_2() -> None:
    r = CliRunner().invoke(operator_main, ["bench", "--trace", "no-such-trace", "--out", "x"])
    assert r.exit_code == 2
    assert "no-such-trace" in r.output


def _small_trace(path: Path) -> Path:
    """Two minutes of requests at 1 req/s, and one prompt longer than any replica takes."""
    rows = [{"timestamp": i * 1.0, "prompt_tokens": 300 + 7 * i, "output_tokens": 40}
            for i in range(120)]
    rows.insert(50, {"timestamp": 50.5, "prompt_tokens": 150_000, "output_tokens": 10})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bench_on_a_trace_file_writes_the_report_and_reports_what_it_dropped(
        tmp_path: Path) -> None:
    trace = _small_trace(tmp_path / "mine.jsonl")
    out = tmp_path / "report"
    r = CliRunner().invoke(operator_main, ["bench", "--trace-file", str(trace), "--objectives",
                                           "20000,3000,100", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"Wrote {out / 'report.md'}" in r.stdout
    assert "1 of 121 requests dropped" in r.stderr and str(trace) in r.stderr
    text = (out / "report.md").read_text()
    assert "## mine - custom targets" in text
    assert "your trace file mine.jsonl" in text
    assert "1 of 121 requests dropped" in text and "max-model-len 131,072" in text
    assert "120 requests over" in text
    assert "P99 e2e <= 20 s, P95 TTFT <= 3000 ms, P99 ITL <= 100 ms" in text
    assert "slo-operator" in text and "oracle" in text
    assert (out / "mine-custom-mine.png").exists()


def test_bench_runs_your_trace_on_the_fleet_asked_for(tmp_path: Path) -> None:
    trace = _small_trace(tmp_path / "mine.jsonl")
    out = tmp_path / "report"
    r = CliRunner().invoke(operator_main, ["bench", "--trace-file", str(trace), "--objectives",
                                           "20000,3000,100", "--fleet", "x1.3", "--out",
                                           str(out)])
    assert r.exit_code == 0, r.output
    text = (out / "report.md").read_text()
    assert "## mine - custom targets - fleet x1.3" in text
    assert "every step time x1.3 of the profile" in text
    assert "custom targets - fleet x1.0" not in text


@pytest.mark.parametrize(("args", "where"), [
    (["--gpu", "B999"], "--gpu: GPU product 'B999' is not in the catalogue"),
    (["--model", "llama-2"], "--model: unknown model 'llama-2'"),
    (["--objectives", "20000,3000"], "--objectives: expected three positive numbers"),
    (["--objectives", "20000,0,100"], "--objectives: expected three positive numbers"),
    (["--objectives", "20000,0.5,100"], "--objectives: the SLOPolicy takes whole milliseconds"),
    (["--rate-scale", "0"], "'--rate-scale'"),
    (["--rate-scale", "-2"], "'--rate-scale'"),
    (["--trace", "ramp"], "--trace: give --trace or --trace-file"),
    (["--cv", "2"], "--cv: only with --rate-file"),
    (["--fleet", "x2"], "--fleet: unknown fleet 'x2'"),
    (["--targets", "strict", "--objectives", "20000,3000,100"],
     "--targets: --objectives gives the targets to judge by"),
])
def test_bench_rejects_a_bad_option_with_a_trace_file_naming_it(
        tmp_path: Path, args: list[str], where: str) -> None:
    trace = _small_trace(tmp_path / "mine.jsonl")
    r = CliRunner().invoke(operator_main, ["bench", "--trace-file", str(trace), *args,
                                           "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert where in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("args", "where"), [
    (["--trace-file", "no-such.jsonl"], "'--trace-file'"),
    (["--rate-file", "no-such.csv"], "'--rate-file'"),
    (["--gpu", "L4"], "--gpu: only with --trace-file or --rate-file"),
    (["--objectives", "1,2,3"], "--objectives: only with --trace-file or --rate-file"),
])
def test_bench_rejects_a_missing_file_or_a_traffic_option_alone(
        tmp_path: Path, args: list[str], where: str) -> None:
    r = CliRunner().invoke(operator_main, ["bench", *args, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert where in r.output


def test_bench_rejects_a_malformed_trace_file_with_its_line_without_a_traceback(
        tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_time,input_length,output_length\n1,10,5\n2,ten,5\n")
    r = CliRunner().invoke(operator_main, ["bench", "--trace-file", str(bad), "--out",
                                           str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert f"{bad}, line 3, field 'input_length': must be a whole number >= 0, got 'ten'" \
        in r.output
    assert isinstance(r.exception, SystemExit)


@pytest.mark.parametrize("traffic", [True, False])
def test_bench_refuses_an_out_it_cannot_create_before_simulating(
        tmp_path: Path, traffic: bool) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    args = (["--trace-file", str(_small_trace(tmp_path / "mine.jsonl"))] if traffic
            else ["--trace", "ramp", "--targets", "strict", "--fleet", "x1.0"])
    r = CliRunner().invoke(operator_main, ["bench", *args, "--out", str(blocker / "report")])
    assert r.exit_code == 2, r.output
    assert f"--out: cannot create {blocker / 'report'}" in r.output
    assert "Traceback" not in r.output and "replayed" not in r.output


def test_demo_refuses_an_out_it_cannot_create_before_starting_anything(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = CliRunner().invoke(operator_main, ["demo", "--out", str(blocker / "results"),
                                           "--duration", "1"])
    assert r.exit_code == 2, r.output
    assert f"--out: cannot create {(blocker / 'results').resolve()}" in r.output
    assert "Traceback" not in r.output
