"""`slo-operator render` and `crds`: what a GitOps reviewer runs before merging."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from slo_operator.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_8B = str(ROOT / "examples" / "llama-8b-h100.yaml")
EXAMPLE_70B = str(ROOT / "examples" / "llama-70b-a100.yaml")
FIXTURES = ROOT / "tests" / "fixtures"


def run(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, list(args), input=input)


def engine_args(output: str) -> list[str]:
    dep = json.loads(output)["items"][0]
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    value = next(e["value"] for e in env if e["name"] == "SLO_ENGINE_ARGS")
    args: list[str] = json.loads(value)
    return args


def opt(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize(
    ("gpu", "want_dtype", "want_quant", "want_kv"),
    [
        pytest.param(None, "bfloat16", "fp8", "fp8", id="h100-from-spec-gets-fp8"),
        pytest.param("A100", "bfloat16", None, "auto", id="a100-bf16-no-fp8-weights"),
        pytest.param("T4", "half", None, "auto", id="t4-fp16"),
        pytest.param("V100", "half", None, "auto", id="v100-fp16"),
        pytest.param("L40S", "bfloat16", "fp8", "fp8", id="ada-fp8"),
        pytest.param("MI300X", "bfloat16", "fp8", "fp8_e4m3", id="mi300x-fnuz-family"),
    ],
)
def test_render_engine_args_by_gpu(gpu: str | None, want_dtype: str, want_quant: str | None,
                                   want_kv: str) -> None:
    extra = ["--gpu-product", gpu] if gpu else []
    res = run("render", "-f", EXAMPLE_8B, "-o", "json", *extra)
    assert res.exit_code == 0, res.output
    args = engine_args(res.stdout)
    assert opt(args, "--dtype") == want_dtype
    assert opt(args, "--quantization") == want_quant
    assert opt(args, "--kv-cache-dtype") == want_kv


def test_render_yaml_has_deployment_service_pdb() -> None:
    res = run("render", "-f", EXAMPLE_70B)
    assert res.exit_code == 0, res.output
    kinds = [d["kind"] for d in yaml.safe_load_all(res.stdout)]
    assert kinds == ["Deployment", "Service", "PodDisruptionBudget"]


def test_render_from_real_node_labels(tmp_path: Path) -> None:
    labels = yaml.safe_load((FIXTURES / "hardware/node-labels.yaml").read_text())
    # Pick the first NVIDIA label set from the shared fixture that is an H100 without MIG.
    sets = labels if isinstance(labels, list) else list(labels.values())
    flat = []
    for s in sets:
        lab = s.get("labels", s) if isinstance(s, dict) else {}
        if "H100" in str(lab.get("nvidia.com/gpu.product", "")) and "MIG" not in str(lab):
            flat.append({k: str(v) for k, v in lab.items()})
    assert flat, "fixture has an H100 label set"
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(flat[0]))
    res = run("render", "-f", EXAMPLE_8B, "--node-labels", str(nodes), "-o", "json")
    assert res.exit_code == 0, res.output
    assert opt(engine_args(res.stdout), "--quantization") == "fp8"


@pytest.mark.parametrize(
    ("patch", "extra", "want"),
    [
        pytest.param({}, ["--gpu-product", "Z9000"], "--gpu-product: ", id="unknown-gpu"),
        pytest.param({"model": {"name": "m"}}, [], "spec.model.sizeBillions", id="missing-size"),
        pytest.param({"engine": {"precision": "fp4"}}, [], "spec.engine.precision",
                     id="unknown-precision"),
        pytest.param({"replicas": {"min": 3, "max": 1}}, [], "spec.replicas.min",
                     id="min-gt-max"),
        pytest.param({"engine": {"precision": "bf16"}}, ["--gpu-product", "T4"],
                     "spec.engine.precision", id="bf16-on-t4"),
        pytest.param({"engine": {"extraArgs": ["--no-such-flag"]}}, [],
                     "spec.engine.extraArgs[0]", id="unknown-extra-arg"),
    ],
)
def test_render_bad_input_names_the_field(patch: dict[str, Any], extra: list[str],
                                          want: str) -> None:
    docs = list(yaml.safe_load_all(Path(EXAMPLE_8B).read_text()))
    svc = docs[1]
    for k, v in patch.items():
        svc["spec"][k] = {**svc["spec"].get(k, {}), **v} if k != "model" else v
    res = run("render", "-f", "-", *extra, input=yaml.safe_dump_all(docs))
    assert res.exit_code == 2, res.output
    assert want in res.output


def test_policy_min_gt_max_in_render() -> None:
    docs = list(yaml.safe_load_all(Path(EXAMPLE_8B).read_text()))
    docs[0]["spec"]["scaling"] = {"minReplicas": 9, "maxReplicas": 2}
    res = run("render", "-f", "-", input=yaml.safe_dump_all(docs))
    assert res.exit_code == 2
    assert "spec.scaling.minReplicas (9) must be <= spec.scaling.maxReplicas (2)" in res.output


def test_crds_command_matches_committed_files() -> None:
    res = run("crds")
    assert res.exit_code == 0
    committed = sorted((ROOT / "crds").glob("*.yaml"))
    assert res.stdout == "---\n".join(p.read_text() for p in committed)
