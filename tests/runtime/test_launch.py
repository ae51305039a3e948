"""Launcher: final vLLM argv and the fallback decisions, checked against vLLM's own table."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slo_runtime import contract as c
from slo_runtime.contract import VllmArgSpec, load_vllm_spec
from slo_runtime.gateway import EngineInfoExport
from slo_runtime.launch import engine_info, parse_engine_args, plan_launch, run_launch
from slo_runtime.probe import NO_GPU, GpuInfo
from tests.runtime.rt_support import FIXTURES_VLLM, Servers

H200 = GpuInfo("nvidia", "NVIDIA H200", "9.0", 143771, 1, "test")
H100X2 = GpuInfo("nvidia", "NVIDIA H100 80GB HBM3", "9.0", 81559, 2, "test")
A100 = GpuInfo("nvidia", "NVIDIA A100-SXM4-80GB", "8.0", 81920, 1, "test")
T4 = GpuInfo("nvidia", "Tesla T4", "7.5", 15360, 1, "test")
L4 = GpuInfo("nvidia", "NVIDIA L4", "8.9", 23034, 1, "test")
MI300X = GpuInfo("amd", "AMD Instinct MI300X", "gfx942", 196592, 8, "test")
MI250X = GpuInfo("amd", "AMD Instinct MI250X", "gfx90a", 65520, 1, "test")
AMD_NO_TARGET = GpuInfo("amd", "AMD Instinct MI300X", "", 196592, 1, "test")
GAUDI3 = GpuInfo("intel", "HL-325L", "gaudi3", 131072, 1, "test")

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
    # The GPU is the one the plan was made for (the probe matched the node labels).
    as_planned: bool = False
    want_codes: list[str] = field(default_factory=list)
    want_note: str | None = None


CASES = [
    Case("fp8-on-hopper-kept", [*BASE, "--quantization", "fp8", "--dtype", "bfloat16"], H200,
         want_present={"--quantization": "fp8", "--dtype": "bfloat16"}),
    Case("fp8-on-ada-kept", [*BASE, "--quantization", "fp8"], L4,
         want_present={"--quantization": "fp8"}),
    # The operator plans --quantization fp8 on Ampere only for precision: fp8 (FP8WeightOnly)
    # and sizes 8-bit weights; vLLM runs it weight-only through Marlin, so it stays.
    Case("fp8-on-ampere-kept-weight-only", [*BASE, "--quantization", "fp8"], A100,
         policy="force", want_present={"--quantization": "fp8"}, want_note="Marlin"),
    # Under auto, only when the operator planned it for this GPU (extraArgs on an A100).
    Case("fp8-on-ampere-kept-when-planned-for-it", [*BASE, "--quantization", "fp8"], A100,
         as_planned=True, want_present={"--quantization": "fp8"}, want_note="weight-only"),
    Case("fp8-on-ampere-kept-whatever-the-profile", [*BASE, "--quantization", "fp8"], A100,
         as_planned=True, profile={"fp8_recommended": False},
         want_present={"--quantization": "fp8"}),
    # Planned for a native-FP8 GPU (auto), landed on Ampere: 16-bit weights, reported.
    Case("fp8-on-ampere-dropped-when-planned-for-another-gpu", [*BASE, "--quantization", "fp8"],
         A100, want_absent=["--quantization"], want_changed=["--quantization"],
         want_codes=["FP8NotNative"]),
    Case("fp8-per-tensor-on-ampere-has-no-marlin-fallback",
         [*BASE, "--quantization", "fp8_per_tensor"], A100, want_absent=["--quantization"],
         want_changed=["--quantization"], want_codes=["NoFP8"]),
    Case("fp8-on-turing-falls-back", [*BASE, "--quantization", "fp8"], T4,
         want_absent=["--quantization"], want_changed=["--quantization"], want_codes=["NoFP8"]),
    Case("fp8-without-gpu-falls-back", [*BASE, "--quantization", "fp8"], NO_GPU,
         want_absent=["--quantization"], want_changed=["--quantization"], want_codes=["NoFP8"]),
    Case("fp8-profile-says-slower", [*BASE, "--quantization", "fp8"], H200,
         profile={"fp8_recommended": False}, want_absent=["--quantization"],
         want_changed=["--quantization"], want_codes=["FP8NotFaster"]),
    Case("fp8-profile-says-faster", [*BASE, "--quantization", "fp8"], H200,
         profile={"fp8_recommended": True}, want_present={"--quantization": "fp8"}),
    Case("fp8-forced-despite-profile", [*BASE, "--quantization", "fp8"], H200,
         profile={"fp8_recommended": False}, policy="force",
         want_present={"--quantization": "fp8"}),
    Case("fp8-on-mi300x-kept", [*BASE, "-q", "fp8"], MI300X,
         want_present={"--quantization": "fp8"}),
    Case("fp8-on-mi250x-falls-back", [*BASE, "--quantization", "fp8"], MI250X,
         want_absent=["--quantization"], want_changed=["--quantization"], want_codes=["NoFP8"]),
    Case("fbgemm-fp8-on-mi300x-kept", [*BASE, "--quantization", "fbgemm_fp8"], MI300X,
         want_present={"--quantization": "fbgemm_fp8"}),
    Case("modelopt-on-mi300x-not-a-rocm-method", [*BASE, "--quantization", "modelopt"], MI300X,
         want_absent=["--quantization"], want_changed=["--quantization"], want_codes=["NoFP8"]),
    Case("fp8-on-gaudi-only-through-inc", [*BASE, "--quantization", "fp8"], GAUDI3,
         want_absent=["--quantization"], want_changed=["--quantization"], want_codes=["NoFP8"]),
    Case("gaudi-inc-fp8-kv-and-bf16-kept", [*BASE, "--dtype", "bfloat16", "--quantization",
                                            "inc", "--kv-cache-dtype", "fp8_inc"], GAUDI3,
         want_present={"--dtype": "bfloat16", "--quantization": "inc",
                       "--kv-cache-dtype": "fp8_inc"}),
    Case("bf16-on-mi250x-kept", [*BASE, "--dtype", "bfloat16"], MI250X,
         want_present={"--dtype": "bfloat16"}),
    Case("bf16-on-amd-without-a-target-to-fp16", [*BASE, "--dtype", "bfloat16"], AMD_NO_TARGET,
         want_present={"--dtype": "float16"}, want_changed=["--dtype"], want_codes=["NoBF16"]),
    Case("awq-untouched-on-ampere", [*BASE, "--quantization", "awq"], A100,
         want_present={"--quantization": "awq"}),
    Case("unknown-quantization-dropped", [*BASE, "--quantization", "fp9"], H200,
         want_absent=["--quantization"], want_changed=["--quantization"],
         want_codes=["UnknownQuantization"]),
    # A plan made for another GPU (probe differs from the labels): the safe default.
    Case("fp8-kv-cache-on-ampere-to-auto", [*BASE, "--kv-cache-dtype", "fp8"], A100,
         want_present={"--kv-cache-dtype": "auto"}, want_changed=["--kv-cache-dtype"],
         want_codes=["FP8KVCacheRisk"]),
    # The operator planned it for this GPU (explicit kvCacheDtype, FP8KVCacheRisk note) and
    # sized the KV cache for 8 bits: vLLM accepts it, so it stays.
    Case("fp8-kv-cache-on-ampere-kept-as-planned", [*BASE, "--kv-cache-dtype", "fp8"], A100,
         as_planned=True, want_present={"--kv-cache-dtype": "fp8"}, want_note="known risk"),
    Case("fp8-kv-cache-on-turing-kept-as-planned", [*BASE, "--kv-cache-dtype", "fp8_e4m3"], T4,
         as_planned=True, want_present={"--kv-cache-dtype": "fp8_e4m3"}),
    Case("fp8-kv-cache-on-hopper-kept", [*BASE, "--kv-cache-dtype", "fp8_e4m3"], H200,
         want_present={"--kv-cache-dtype": "fp8_e4m3"}),
    Case("e5m2-kv-cache-on-rocm-to-auto", [*BASE, "--kv-cache-dtype", "fp8_e5m2"], MI300X,
         as_planned=True, want_present={"--kv-cache-dtype": "auto"},
         want_changed=["--kv-cache-dtype"], want_codes=["NoFP8KVCache"]),
    Case("fp8-kv-cache-on-mi250x-to-auto", [*BASE, "--kv-cache-dtype", "fp8"], MI250X,
         as_planned=True, want_present={"--kv-cache-dtype": "auto"},
         want_changed=["--kv-cache-dtype"], want_codes=["NoFP8KVCache"]),
    Case("gaudi-kv-cache-on-hopper-to-auto", [*BASE, "--kv-cache-dtype", "fp8_inc"], H200,
         as_planned=True, want_present={"--kv-cache-dtype": "auto"},
         want_changed=["--kv-cache-dtype"], want_codes=["NoFP8KVCache"]),
    Case("bf16-on-turing-to-fp16", [*BASE, "--dtype", "bfloat16"], T4,
         want_present={"--dtype": "float16"}, want_changed=["--dtype"], want_codes=["NoBF16"]),
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
                       fp8_policy=case.policy, gpu_as_planned=case.as_planned)
    for flag, want in case.want_present.items():
        assert _value(plan.argv, flag) == want, flag
    for flag in case.want_absent:
        assert flag not in plan.argv
    assert sorted({ch.setting for ch in plan.changes}) == sorted(case.want_changed)
    for ch in plan.changes:
        assert ch.reason, ch
        assert ch.code in c.ENGINE_CHANGE_REASONS, ch
    if case.want_codes:
        assert [ch.code for ch in plan.changes] == case.want_codes
    if case.want_note:
        assert any(case.want_note in n for n in plan.notes), plan.notes
    # The options alone follow the entrypoint.
    assert plan.argv[-len(plan.args):] == plan.args
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
    # A plan made for an H100 (precision auto: native FP8 weights and KV cache) lands on an
    # A100 whose labels said H100.
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"fp8_recommended": True}))
    probe_file = tmp_path / "probe.json"
    planned = [*BASE, "--quantization", "fp8", "--kv-cache-dtype", "fp8"]
    env = {
        "SLO_ENGINE_ARGS": json.dumps(planned),
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
    # Not planned for this GPU: no weight-only FP8 (policy auto), no risky FP8 KV cache.
    assert "--quantization" not in plan.argv
    assert _value(plan.argv, "--kv-cache-dtype") == "auto"
    probe = json.loads(probe_file.read_text())
    assert probe["matches"] is False
    assert any("product" in m for m in probe["mismatches"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("--quantization" in w and "no native FP8" in w for w in warnings)
    assert any("--kv-cache-dtype" in w and "not the GPU the plan was made for" in w
               for w in warnings)
    assert any(r.levelno == logging.ERROR and "differ from the node labels" in r.getMessage()
               for r in caplog.records)
    # What runs, next to the probe file, for the gateway to export.
    info = json.loads((tmp_path / c.ENGINE_INFO_FILE_NAME).read_text())
    assert info["argv"] == plan.argv
    assert info["planned_args"] == planned
    assert info["settings"]["quantization"] == ""
    assert info["settings"]["kv_cache_dtype"] == "auto"
    assert info["planned_settings"]["quantization"] == "fp8"
    assert info["planned_settings"]["kv_cache_dtype"] == "fp8"
    assert [(ch["setting"], ch["requested"], ch["applied"], ch["code"])
            for ch in info["changes"]] == [
        ("--quantization", "fp8", None, "FP8NotNative"),
        ("--kv-cache-dtype", "fp8", "auto", "FP8KVCacheRisk")]
    assert info["notes"] == []


def test_run_launch_keeps_what_was_planned_for_this_gpu(tmp_path) -> None:
    # precision: fp8 and kvCacheDtype: fp8 on an A100, planned for an A100.
    planned = [*BASE, "--dtype", "bfloat16", "--quantization", "fp8", "--kv-cache-dtype", "fp8"]
    env = {
        "SLO_ENGINE_ARGS": json.dumps(planned),
        "SLO_EXPECTED_GPU_PRODUCT": "NVIDIA-A100-SXM4-80GB",
        "SLO_EXPECTED_COMPUTE_CAPABILITY": "8.0",
        "SLO_EXPECTED_GPU_COUNT": "1",
        "SLO_FP8_POLICY": "force",
        "SLO_PROBE_FILE": str(tmp_path / "probe.json"),
        "SLO_VLLM_ENTRYPOINT": json.dumps(["vllm-entry"]),
    }
    plan = run_launch(env, gpu=A100, exec_fn=lambda f, a: None)
    assert plan.changes == []
    info = json.loads((tmp_path / c.ENGINE_INFO_FILE_NAME).read_text())
    assert info["settings"] == info["planned_settings"] == {
        "quantization": "fp8", "kv_cache_dtype": "fp8", "dtype": "bfloat16",
        "tensor_parallel_size": "1", "max_num_seqs": "128", "max_num_batched_tokens": "8192"}


def test_run_launch_without_a_probe_file_writes_no_engine_info(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_launch({"SLO_ENGINE_ARGS": json.dumps(BASE)}, gpu=H200, exec_fn=lambda f, a: None)
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_engine_info_does_not_stop_the_launch(tmp_path, caplog) -> None:
    env = {"SLO_ENGINE_ARGS": json.dumps(BASE),
           "SLO_PROBE_FILE": str(tmp_path / "probe.json")}
    (tmp_path / c.ENGINE_INFO_FILE_NAME).mkdir()     # a directory where the file goes
    execs: list[str] = []
    with caplog.at_level(logging.WARNING, logger="slo_runtime.launch"):
        run_launch(env, gpu=H200, exec_fn=lambda f, a: execs.append(f))
    assert execs
    assert any("engine info" in r.getMessage() for r in caplog.records)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".engine-")] == []


def test_engine_info_reports_settings_in_any_spelling(spec: VllmArgSpec) -> None:
    planned = ["meta-llama/x", "-q", "fp8", "--dtype=half", "-tp", "4", "--max_num_seqs", "64",
               "--max-num-batched-tokens", "8k"]
    plan = plan_launch(planned, H100X2, spec)
    doc = engine_info(plan, planned, H100X2, spec)
    assert doc["planned_settings"] == {
        "quantization": "fp8", "kv_cache_dtype": "auto", "dtype": "float16",
        "tensor_parallel_size": "4", "max_num_seqs": "64", "max_num_batched_tokens": "8000"}
    assert doc["settings"]["tensor_parallel_size"] == "2"
    assert [(ch["setting"], ch["code"]) for ch in doc["changes"]] == [
        ("--tensor-parallel-size", "FewerGPUs")]
    assert doc["vllm"] == spec.distribution
    assert doc["gpu"]["count"] == 2


def _engine_series(text: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in (c.RUNTIME_ENGINE_INFO, c.RUNTIME_ENGINE_CHANGE):
            out[fam.name] = [dict(smp.labels) for smp in fam.samples if smp.value == 1]
    return out


@pytest.mark.timeout(60)
async def test_the_gateway_exports_what_the_launcher_started(tmp_path, servers: Servers) -> None:
    """The gateway may start before the launcher writes; it reads the file on every change
    (a restarted vLLM container writes it again)."""
    probe_file = tmp_path / "probe.json"
    _, url = await servers.gateway("http://127.0.0.1:9", probe_file=str(probe_file))

    async def scrape() -> dict[str, list[dict[str, str]]]:
        async with aiohttp.ClientSession() as s, s.get(url + c.GATEWAY_METRICS_PATH) as r:
            assert r.status == 200
            return _engine_series(await r.text())

    assert await scrape() == {}
    env = {"SLO_ENGINE_ARGS": json.dumps([*BASE, "--dtype", "bfloat16", "--quantization", "fp8",
                                          "--kv-cache-dtype", "fp8", "-tp", "2"]),
           "SLO_EXPECTED_GPU_PRODUCT": "NVIDIA-H100-80GB-HBM3",
           "SLO_EXPECTED_COMPUTE_CAPABILITY": "9.0",
           "SLO_PROBE_FILE": str(probe_file), "SLO_VLLM_ENTRYPOINT": json.dumps(["v"])}
    run_launch(env, gpu=A100, exec_fn=lambda f, a: None)
    got = await scrape()
    assert got[c.RUNTIME_ENGINE_INFO] == [{
        "quantization": "", "kv_cache_dtype": "auto", "dtype": "bfloat16",
        "tensor_parallel_size": "1", "max_num_seqs": "128", "max_num_batched_tokens": "8192"}]
    assert sorted(got[c.RUNTIME_ENGINE_CHANGE], key=lambda d: d["setting"]) == [
        {"setting": "--kv-cache-dtype", "requested": "fp8", "applied": "auto",
         "reason": "FP8KVCacheRisk"},
        {"setting": "--quantization", "requested": "fp8", "applied": "",
         "reason": "FP8NotNative"},
        {"setting": "--tensor-parallel-size", "requested": "2", "applied": "1",
         "reason": "FewerGPUs"}]
    # The vLLM container restarts on an H100x2: the file is rewritten, the metric follows.
    run_launch(env, gpu=H100X2, exec_fn=lambda f, a: None)
    got = await scrape()
    assert got[c.RUNTIME_ENGINE_INFO][0]["kv_cache_dtype"] == "fp8"
    assert got[c.RUNTIME_ENGINE_INFO][0]["tensor_parallel_size"] == "2"
    assert got[c.RUNTIME_ENGINE_CHANGE] == []


@pytest.mark.parametrize("content", ["not json", "[]", '{"settings": 3}', "{}"],
                         ids=["not-json", "a-list", "settings-not-an-object", "no-settings"])
def test_a_broken_engine_info_file_exports_nothing(tmp_path, content: str) -> None:
    path = tmp_path / c.ENGINE_INFO_FILE_NAME
    path.write_text(content)
    export = EngineInfoExport(str(path))
    assert export.text() == b""
    path.unlink()
    assert export.text() == b""


@pytest.mark.parametrize("raw", ["not json", '{"model": "x"}', '["--model", 3]'],
                         ids=["not-json", "object-not-list", "non-string-item"])
def test_run_launch_rejects_malformed_engine_args(raw: str) -> None:
    with pytest.raises(ValueError, match="SLO_ENGINE_ARGS"):
        run_launch({"SLO_ENGINE_ARGS": raw}, gpu=H200, exec_fn=lambda f, a: None)
