"""The slo-runtime command line."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from slo_runtime import probe as probe_mod
from slo_runtime.cli import main
from slo_runtime.probe import GpuInfo

H200 = GpuInfo("nvidia", "NVIDIA H200", "9.0", 143771, 1, "test", "580.159.04")


def test_probe_writes_result_and_exits_3_on_mismatch(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(probe_mod, "probe", lambda use_torch=True: H200)
    out = tmp_path / "probe.json"
    r = CliRunner().invoke(main, ["probe", "--expected-product", "NVIDIA-H200",
                                  "--expected-cc", "9.0", "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["matches"] is True
    r = CliRunner().invoke(main, ["probe", "--no-torch"],
                           env={"SLO_EXPECTED_GPU_PRODUCT": "NVIDIA-A100-SXM4-80GB"})
    assert r.exit_code == 3
    assert json.loads(r.output)["mismatches"]


def test_launch_execs_the_planned_vllm_command(monkeypatch) -> None:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(os, "execvp", lambda f, a: calls.append((f, a)))
    monkeypatch.setattr("slo_runtime.launch.probe", lambda: H200)
    env = {"SLO_ENGINE_ARGS": json.dumps(["--model", "m", "--quantization", "fp8"]),
           "SLO_EXPECTED_GPU_PRODUCT": "NVIDIA-H200", "SLO_PROFILE_FILE": ""}
    r = CliRunner().invoke(main, ["launch"], env=env)
    assert r.exit_code == 0, r.output
    ((_, argv),) = calls
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--quantization") + 1] == "fp8"
    assert argv[argv.index("--port") + 1] == "8001"


def test_launch_reports_malformed_input_without_a_traceback(monkeypatch) -> None:
    monkeypatch.setattr("slo_runtime.launch.probe", lambda: H200)
    r = CliRunner().invoke(main, ["launch"], env={"SLO_ENGINE_ARGS": "--model m"})
    assert r.exit_code == 1
    assert "SLO_ENGINE_ARGS is not JSON" in r.output


def test_profile_needs_a_model_or_plan() -> None:
    pytest.importorskip("torch")
    r = CliRunner().invoke(main, ["profile", "--out", "x"])
    assert r.exit_code == 2
    assert "--plan or at least one --model" in r.output


@pytest.mark.parametrize("cmd", ["probe", "profile", "launch", "gateway"])
def test_every_command_has_help(cmd: str) -> None:
    r = CliRunner().invoke(main, [cmd, "--help"])
    assert r.exit_code == 0
    assert "Usage:" in r.output
