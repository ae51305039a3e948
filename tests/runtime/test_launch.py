"""Launcher: final vLLM argv and the fallback decisions, checked against vLLM's own table."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import pytest

from slo_runtime.contract import VllmArgSpec, load_vllm_spec
from slo_runtime.launch import parse_engine_args, plan_launch, run_launch
from slo_runtime.probe import NO_GPU, GpuInfo
from tests.runtime.rt_support import FIXTURES_VLLM

H200 = GpuInfo("nvidia", "NVIDIA H200", "9.0", 143771, 1, "test")
H100X2 = GpuInfo("nvidia", "NVIDIA H100 80GB HBM3", "9.0", 81559, 2, "test")
A100 = GpuInfo("nvidia", "NVIDIA A100-SXM4-80GB", "8.0", 81920, 1, "test")
T4 = GpuInfo("nvidia", "Tesla T4", "7.5", 15360, 1, "test")
L4 = GpuInfo("nvidia", "NVIDIA L4", "8.9", 23034, 1, "test")
MI300X = GpuInfo("amd", "AMD Instinct MI300X", "gfx942", 196592, 8, "test")
MI250X = GpuInfo("amd", "AMD Instinct MI250X", "gfx90a", 65520, 1, "test")

BASE = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "llama",
        "--max-num-seqs", "128", "--max-num-batched-tokens", "8192"]


@pytest.fixture(scope="module")
def spec() -> VllmArgSpec:
    return load_vllm_spec()


def fixture_spec() -> dict:
    return json.loads((FIXTURES_VLLM / "serve-args-vllm-0.32.0.json").read_text())


def assert_valid_for_vllm(argv: list[str]) -> None:
    """Every option in argv is one vLLM 0.32.0's parser has, with a value it accepts."""
    fx = fixture_spec()
    by_flag = {f: a for a in fx["actions"] for f in a["flags"]}
    i = 3   # after the entrypoint: python -m module
    while i < len(argv):
        flag = argv[i]
        assert flag in by_flag, f"{flag} is not a vLLM 0.32.0 option"
        act = by_flag[flag]
        i += 1
        if act["takes_value"]:
            vals = []
            while i < len(argv) and not argv[i].startswith("--"):
                vals.append(argv[i])
                i += 1
            assert vals, flag
            if act["nargs"] is None:
                assert len(vals) == 1, flag
            if act["choices"]:
                assert all(v in act["choices"] for v in vals), (flag, vals)
            if flag == "--quantization":
                assert vals[0] in fx["quantization_methods"]


def test_builtin_spec_is_vllm_0_32_0_argument_table() -> None:
    fx = fixture_spec()
    spec = load_vllm_spec()
    assert spec.quantization_methods == tuple(fx["quantization_methods"])
    for act in fx["actions"]:
        for f in act["flags"]:
            ent = spec.action(f)
            assert ent is not None, f
            want_choices = None if act["choices"] is None else \
                tuple(str(x) for x in act["choices"] if x is not None)
            assert (ent.dest, ent.nargs, ent.takes_value, ent.choices) == \
                (act["dest"], act["nargs"], act["takes_value"], want_choices), f


@dataclass
class Case:
    id: str
    args: list[str]
    gpu: GpuInfo
    profile: dict | None = None
    policy: str = "auto"
    want_present: dict[str, str | None] = field(default_factory=dict)
    want_absent: list[str] = field(default_factory=list)
    want_changed: list[str] = field(default_factory=list)


CASES = [
    Case("fp8-on-hopper-kept", [*BASE, "--quantization", "fp8", "--dtype", "bfloat16"], H200,
         want_present={"--quantization": "fp8", "--dtype": "bfloat16"}),
    Case("fp8-on-ada-kept", [*BASE, "--quantization", "fp8"], L4,
         want_present={"--quantization": "fp8"}),
    Case("fp8-on-ampere-falls-back", [*BASE, "--quantization", "fp8"], A100,
         want_absent=["--quantization"], want_changed=["--quantization"]),
    Case("fp8-without-gpu-falls-back", [*BASE, "--quantization", "fp8"], NO_GPU,
         want_absent=["--quantization"], want_changed=["--quantization"]),
    Case("fp8-profile-says-slower", [*BASE, "--quantization", "fp8"], H200,
         profile={"fp8_recommended": False}, want_absent=["--quantization"],
         want_changed=["--quantization"]),
    Case("fp8-profile-says-faster", [*BASE, "--quantization", "fp8"], H200,
         profile={"fp8_recommended": True}, want_present={"--quantization": "fp8"}),
    Case("fp8-forced-despite-profile", [*BASE, "--quantization", "fp8"], H200,
         profile={"fp8_recommended": False}, policy="force",
         want_present={"--quantization": "fp8"}),
    Case("fp8-on-mi300x-kept", [*BASE, "-q", "fp8"], MI300X,
         want_present={"--quantization": "fp8"}),
    Case("fp8-on-mi250x-falls-back", [*BASE, "--quantization", "fp8"], MI250X,
         want_absent=["--quantization"], want_changed=["--quantization"]),
    Case("awq-untouched-on-ampere", [*BASE, "--quantization", "awq"], A100,
         want_present={"--quantization": "awq"}),
    Case("unknown-quantization-dropped", [*BASE, "--quantization", "fp9"], H200,
         want_absent=["--quantization"], want_changed=["--quantization"]),
    Case("fp8-kv-cache-on-ampere-to-auto", [*BASE, "--kv-cache-dtype", "fp8"], A100,
         want_present={"--kv-cache-dtype": "auto"}, want_changed=["--kv-cache-dtype"]),
    Case("fp8-kv-cache-on-hopper-kept", [*BASE, "--kv-cache-dtype", "fp8_e4m3"], H200,
         want_present={"--kv-cache-dtype": "fp8_e4m3"}),
    Case("bf16-on-turing-to-fp16", [*BASE, "--dtype", "bfloat16"], T4,
         want_present={"--dtype": "float16"}, want_changed=["--dtype"]),
    Case("tp-larger-than-gpus-reduced", [*BASE, "--tensor-parallel-size", "4"], H100X2,
         want_present={"--tensor-parallel-size": "2"},
         want_changed=["--tensor-parallel-size"]),
    Case("tp-short-flag-fits", [*BASE, "-tp", "2"], H100X2,
         want_present={"--tensor-parallel-size": "2"}),
    Case("unknown-flag-dropped-with-its-value", [*BASE, "--speculative-magic", "7"], H200,
         want_absent=["--speculative-magic"], want_changed=["--speculative-magic"]),
    Case("bad-choice-dropped", [*BASE, "--dtype", "bfloat17"], H200,
         want_absent=["--dtype"], want_changed=["--dtype"]),
    Case("port-and-host-forced-behind-gateway", [*BASE, "--port", "8000", "--host", "0.0.0.0"],
         H200, want_present={"--port": "8001", "--host": "127.0.0.1"},
         want_changed=["--port", "--host"]),
    Case("positional-model-becomes-flag", ["meta-llama/Llama-3.1-8B-Instruct",
                                           "--max-num-seqs", "64"], H200,
         want_present={"--model": "meta-llama/Llama-3.1-8B-Instruct"}),
    Case("equals-form-parsed", [*BASE, "--quantization=fp8", "--kv-cache-dtype=fp8"], A100,
         want_absent=["--quantization"], want_present={"--kv-cache-dtype": "auto"},
         want_changed=["--quantization", "--kv-cache-dtype"]),
]


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_launch(case: Case, spec: VllmArgSpec) -> None:
    plan = plan_launch(case.args, case.gpu, spec, profile=case.profile,
                       fp8_policy=case.policy)
    for flag, want in case.want_present.items():
        assert _value(plan.argv, flag) == want, flag
    for flag in case.want_absent:
        assert flag not in plan.argv
    assert sorted({c.setting for c in plan.changes}) == sorted(case.want_changed)
    for c in plan.changes:
        assert c.reason, c
    # Whatever was asked, what is launched is something vLLM 0.32.0 accepts.
    assert_valid_for_vllm(plan.argv)
    assert _value(plan.argv, "--port") == "8001"


def test_served_model_name_keeps_all_its_values(spec: VllmArgSpec) -> None:
    args, changes = parse_engine_args(["--served-model-name", "a", "b", "--max-num-seqs", "8"],
                                      spec)
    assert [(a.flag, a.values) for a in args] == [("--served-model-name", ["a", "b"]),
                                                  ("--max-num-seqs", ["8"])]
    assert changes == []


def test_run_launch_reads_env_probes_and_execs(tmp_path, caplog: pytest.LogCaptureFixture
                                               ) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"fp8_recommended": True}))
    probe_file = tmp_path / "probe.json"
    env = {
        "SLO_ENGINE_ARGS": json.dumps([*BASE, "--quantization", "fp8", "--kv-cache-dtype",
                                              "fp8"]),
        "SLO_EXPECTED_GPU_PRODUCT": "NVIDIA-H100-80GB-HBM3",
        "SLO_EXPECTED_COMPUTE_CAPABILITY": "9.0",
        "SLO_PROFILE_FILE": str(profile),
        "SLO_PROBE_FILE": str(probe_file),
        "SLO_VLLM_ENTRYPOINT": json.dumps(["vllm-entry"]),
    }
    execs: list[tuple[str, list[str]]] = []
    with caplog.at_level(logging.INFO, logger="slo_runtime.launch"):
        plan = run_launch(env, gpu=A100, exec_fn=lambda f, a: execs.append((f, a)))
    assert execs == [("vllm-entry", plan.argv)]
    assert "--quantization" not in plan.argv
    assert _value(plan.argv, "--kv-cache-dtype") == "auto"
    probe = json.loads(probe_file.read_text())
    assert probe["matches"] is False
    assert any("product" in m for m in probe["mismatches"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("--quantization" in w and "no native FP8" in w for w in warnings)
    assert any(r.levelno == logging.ERROR and "differ from the node labels" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("raw", ["not json", '{"model": "x"}', '["--model", 3]'],
                         ids=["not-json", "object-not-list", "non-string-item"])
def test_run_launch_rejects_malformed_engine_args(raw: str) -> None:
    with pytest.raises(ValueError, match="SLO_ENGINE_ARGS"):
        run_launch({"SLO_ENGINE_ARGS": raw}, gpu=H200, exec_fn=lambda f, a: None)
