"""User overrides: merging extra args, and the effective settings each override gives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slo_operator.engine.overrides import (
    RESERVED_DESTS,
    EngineSettings,
    apply_overrides,
    merge_extra,
)
from slo_operator.engine.types import EngineError, GpuSharing, ModelFacts, Note
from slo_operator.engine.vllm_args import VllmArgSpec
from slo_operator.hardware import resolve_product

SPEC = VllmArgSpec.load()
_H100 = resolve_product("H100").hardware
assert _H100 is not None
H100 = _H100
GATEWAY = ("leave it out: the in-pod gateway serves the pod's port and reaches vLLM on "
           "loopback")
PLANNED = EngineSettings(
    dtype="bfloat16", quantization="fp8", weight_bytes=1.0, kv_cache_dtype="fp8", kv_bytes=1.0,
    tensor_parallel_size=1, max_num_seqs=256, max_num_batched_tokens=8192,
    gpu_memory_utilization=0.9, max_model_len=8192, cudagraph_capture_sizes=(1, 2, 4, 8),
)
MODEL = ModelFacts(name="m", params_billion=8, num_attention_heads=28, num_kv_heads=4)
WHOLE = GpuSharing()


def test_reserved_options() -> None:
    assert RESERVED_DESTS == {"model": "use spec.model.name", "host": GATEWAY, "port": GATEWAY,
                              "uds": GATEWAY, "headless": GATEWAY}


def merge_error(generated: list[str], extra: list[str]) -> tuple[str, str]:
    with pytest.raises(EngineError) as err:
        merge_extra(SPEC, generated, extra)
    return err.value.field, err.value.message


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        (["--bogus"], "--bogus is not an option of vllm serve"),
        (["--bogus", "--max-num-seqs"], "--bogus is not an option of vllm serve (and 1 more)"),
        (["--bogus", "--max-num-seqs", "--x"],
         "--bogus is not an option of vllm serve (and 2 more)"),
    ],
)
def test_invalid_extra_args_name_the_first_problem(extra: list[str], want: str) -> None:
    assert merge_error([], extra) == ("spec.engine.extraArgs[0]", want)


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [
        ("--model", ["x"], "use spec.model.name"),
        ("--host", ["0.0.0.0"], GATEWAY),
        ("--port", ["9000"], GATEWAY),
        ("--uds", ["/tmp/s"], GATEWAY),
        ("--headless", [], GATEWAY),
    ],
)
def test_operator_owned_options_are_refused_where_written(flag: str, value: list[str],
                                                          why: str) -> None:
    assert merge_error([], ["--max-num-seqs", "8", flag, *value]) == (
        "spec.engine.extraArgs[2]", f"{flag} is set by the operator; {why}")


def test_user_options_replace_generated_ones_and_are_reported() -> None:
    generated = ["--max-num-seqs", "256", "--dtype", "bfloat16", "--tensor-parallel-size", "1"]
    extra = ["--max-num-seqs", "8", "-tp", "2", "--max-num-seqs=16"]
    merged, conflicts, user = merge_extra(SPEC, generated, extra)
    assert merged == ["--dtype", "bfloat16", *extra]
    assert conflicts == [
        Note("spec.engine.extraArgs[4]", "UserOverride",
             "--max-num-seqs=16 replaces the generated --max-num-seqs 256"),
        Note("spec.engine.extraArgs[2]", "UserOverride",
             "-tp 2 replaces the generated --tensor-parallel-size 1"),
    ]
    # argparse keeps the last occurrence.
    assert {k: (v.flag, v.values, v.start) for k, v in user.items()} == {
        "max_num_seqs": ("--max-num-seqs", ("16",), 4),
        "tensor_parallel_size": ("-tp", ("2",), 2),
    }


def test_no_extra_args_keep_the_generated_ones() -> None:
    generated = ["--model", "m", "--max-num-seqs", "256"]
    assert merge_extra(SPEC, generated, []) == (generated, [], {})


def test_generated_args_that_do_not_parse_are_a_bug() -> None:
    with pytest.raises(AssertionError, match=r"^generated args do not parse: \[Problem"):
        merge_extra(SPEC, ["--bogus"], [])


def effective(*extra: str, planned: EngineSettings = PLANNED, sharing: GpuSharing = WHOLE,
              model: ModelFacts = MODEL, gpus: int = 8) -> tuple[EngineSettings, list[Note]]:
    _, _, user = merge_extra(SPEC, [], list(extra))
    notes: list[Note] = []
    out = apply_overrides(planned, user, gpus_per_node=gpus, model=model, sharing=sharing,
                          hw=H100, notes=notes)
    return out, notes


def refused(*extra: str, **kw: object) -> tuple[str, str]:
    with pytest.raises(EngineError) as err:
        effective(*extra, **kw)  # type: ignore[arg-type]
    return err.value.field, err.value.message


def test_without_overrides_the_plan_stands() -> None:
    assert effective() == (PLANNED, [])


@pytest.mark.parametrize(
    ("extra", "changes"),
    [
        (("-tp", "2"), {"tensor_parallel_size": 2}),
        (("--max-num-seqs", "16"), {"max_num_seqs": 16}),
        (("--max-num-batched-tokens", "256"), {"max_num_batched_tokens": 256}),  # == seqs
        (("--max-num-seqs", "4096", "--max-num-batched-tokens", "4096"),
         {"max_num_seqs": 4096, "max_num_batched_tokens": 4096}),
        (("--max-model-len", "4096"), {"max_model_len": 4096}),
        (("--max-model-len", "8k"), {"max_model_len": 8000}),
        (("--max-model-len", "auto"), {"max_model_len": None}),
        (("--max-model-len", " AUTO "), {"max_model_len": None}),
        (("--max-model-len", "-1"), {"max_model_len": None}),
        (("--gpu-memory-utilization", "0.5"), {"gpu_memory_utilization": 0.5}),
        (("--dtype", "half"), {"dtype": "half"}),
        (("-q", "awq"), {"quantization": "awq", "weight_bytes": 0.5}),
        # A method the planner cannot size: 16-bit weights.
        (("-q", "quark"), {"quantization": "quark", "weight_bytes": 2.0}),
        (("--kv-cache-dtype", "auto"), {"kv_cache_dtype": "auto", "kv_bytes": 2.0}),
        (("--kv-cache-dtype", "fp8_e5m2"), {"kv_cache_dtype": "fp8_e5m2"}),
        (("--cudagraph-capture-sizes", "4", "1", "4", "2"), {"cudagraph_capture_sizes": (1, 2, 4)}),
        (("--cudagraph-capture-sizes", "4096", "1"), {"cudagraph_capture_sizes": (1, 4096)}),
        (("--pipeline-parallel-size", " 1 "), {}),
        (("-pp", "1"), {}),
        (("-dp", "1"), {}),
        (("--enforce-eager",), {}),
    ],
)
def test_effective_settings_follow_the_overrides(extra: tuple[str, ...],
                                                 changes: dict[str, object]) -> None:
    assert effective(*extra) == (replace(PLANNED, **changes), [])  # type: ignore[arg-type]


def test_kv_override_from_16_bit_to_fp8() -> None:
    planned = replace(PLANNED, kv_cache_dtype="auto", kv_bytes=2.0)
    out, _ = effective("--kv-cache-dtype", "fp8_inc", planned=planned)
    assert (out.kv_cache_dtype, out.kv_bytes) == ("fp8_inc", 1.0)


def test_quantization_override_of_a_quantized_checkpoint_keeps_its_size() -> None:
    planned = replace(PLANNED, quantization=None, weight_bytes=0.5)
    model = replace(MODEL, quantized_checkpoint="awq")
    out, _ = effective("-q", "quark", planned=planned, model=model)
    assert (out.quantization, out.weight_bytes) == ("quark", 0.5)
    out, _ = effective("-q", "fp8", planned=planned, model=model)
    assert (out.quantization, out.weight_bytes) == ("fp8", 1.0)


def test_tp_one_is_allowed_on_shared_gpus() -> None:
    for sharing in (GpuSharing(mig=True), GpuSharing(replicas=2)):
        out, _ = effective("-tp", "1", sharing=sharing)
        assert out.tensor_parallel_size == 1


def test_tp_may_use_every_gpu_of_the_pool() -> None:
    out, _ = effective("-tp", "4", gpus=4)
    assert out.tensor_parallel_size == 4


def test_tp_without_known_heads() -> None:
    out, _ = effective("-tp", "8", model=ModelFacts(name="m"))
    assert out.tensor_parallel_size == 8


X0 = "spec.engine.extraArgs[0]"
X2 = "spec.engine.extraArgs[2]"


@pytest.mark.parametrize(
    ("extra", "sharing", "want"),
    [
        (("--tensor-parallel-size", "2"), GpuSharing(mig=True),
         (X0, "2: NVIDIA H100 SXM 80GB is a MIG slice; vLLM cannot run tensor parallel across "
              "MIG instances (NCCL has no peer-to-peer path between them): use 1, or a larger "
              "MIG profile or whole GPUs")),
        (("--tensor-parallel-size", "2"), GpuSharing(replicas=2),
         (X0, "2: NVIDIA H100 SXM 80GB is time-sliced 2 ways; tensor-parallel ranks could "
              "share one physical GPU: use 1, or whole GPUs")),
        (("-tp", "16"), WHOLE, (X0, "16 exceeds the 8 GPUs per replica of this pool")),
        (("-tp", "0"), WHOLE,
         (X0, "-tp 0: Input should be greater than or equal to 1 (the rule of "
              "spec.engine.tensorParallelSize)")),
        (("--max-model-len", "0"), WHOLE,
         (X0, "--max-model-len 0: Input should be greater than or equal to 16 (the rule of "
              "spec.model.maxModelLen)")),
        (("--gpu-memory-utilization", "1.5"), WHOLE,
         (X0, "--gpu-memory-utilization 1.5: Input should be less than or equal to 1 (the rule "
              "of spec.engine.gpuMemoryUtilization)")),
        (("--max-num-seqs", "8192"), WHOLE,
         (X0, "--max-num-seqs 8192: Input should be less than or equal to 4096 (the rule of "
              "spec.batching.maxBatch)")),
        (("--max-num-batched-tokens", "0"), WHOLE,
         (X0, "--max-num-batched-tokens 0: Input should be greater than or equal to 1 (the "
              "rule of spec.engine.maxNumBatchedTokens)")),
    ],
)
def test_overrides_are_refused_at_the_extra_arg(extra: tuple[str, ...], sharing: GpuSharing,
                                               want: tuple[str, str]) -> None:
    assert refused(*extra, sharing=sharing) == want


def test_tp_must_divide_the_heads() -> None:
    assert refused("-tp", "8", gpus=16) == (
        X0, "8 does not divide the model's 28 attention heads and 4 KV heads")


BELOW = "--max-num-batched-tokens {} is below --max-num-seqs {}; vLLM rejects that"


@pytest.mark.parametrize(
    ("extra", "planned", "want"),
    [
        # The user's budget is the one too small.
        (("--max-num-batched-tokens", "100"), PLANNED, (X0, BELOW.format(100, 256))),
        (("--max-num-batched-tokens", "255"), PLANNED, (X0, BELOW.format(255, 256))),
        # The user's batch limit outgrew the generated budget.
        (("--max-num-seqs", "4096"), replace(PLANNED, max_num_batched_tokens=2048),
         (X0, BELOW.format(2048, 4096))),
        # Both set by the user: the budget is named.
        (("--max-num-seqs", "4096", "--max-num-batched-tokens", "4000"), PLANNED,
         (X2, BELOW.format(4000, 4096))),
        # Neither: the spec field that set the budget.
        ((), replace(PLANNED, max_num_batched_tokens=100),
         ("spec.engine.maxNumBatchedTokens", BELOW.format(100, 256))),
    ],
)
def test_budget_below_batch_limit_blames_who_set_it(extra: tuple[str, ...],
                                                    planned: EngineSettings,
                                                    want: tuple[str, str]) -> None:
    assert refused(*extra, planned=planned) == want


@pytest.mark.parametrize(
    ("gmu", "replicas", "warned"),
    [("0.5", 4, True), ("0.26", 4, True), ("0.25", 4, False), ("0.5", 2, False),
     ("0.9", 1, False)],
)
def test_memory_fraction_above_a_shared_gpus_share_is_warned(gmu: str, replicas: int,
                                                            warned: bool) -> None:
    out, notes = effective("--max-num-seqs", "8", "--gpu-memory-utilization", gmu,
                           sharing=GpuSharing(replicas=replicas))
    assert out.gpu_memory_utilization == float(gmu)
    want = [Note(X2, "SharedGPUMemory",
                 f"{gmu} of the GPU's memory is more than a 1/{replicas} share; other pods on "
                 "the same GPU may fail to start")]
    assert notes == (want if warned else [])


@pytest.mark.parametrize(
    "sizes", [["0"], ["1", "4097"], ["-3"], ["1" + "0" * 40]],
)
def test_capture_sizes_outside_1_to_4096_are_refused(sizes: list[str]) -> None:
    assert refused("--cudagraph-capture-sizes", *sizes) == (
        X0, f"--cudagraph-capture-sizes {sizes[-1]}: not an integer from 1 to 4096")


@pytest.mark.parametrize(
    ("extra", "flag"),
    [(("-pp", "2"), "-pp 2"), (("--pipeline-parallel-size", "4"), "--pipeline-parallel-size 4"),
     (("--data-parallel-size", "2"), "--data-parallel-size 2"), (("-dp", "8"), "-dp 8")],
)
def test_pipeline_and_data_parallel_are_refused(extra: tuple[str, ...], flag: str) -> None:
    assert refused(*extra) == (
        X0, f"{flag}: only 1 is supported; set spec.engine.tensorParallelSize (one pod per "
            "replica, GPUs = tensor parallel)")


def test_settings_are_immutable_values() -> None:
    with pytest.raises(AttributeError):
        PLANNED.dtype = "half"  # type: ignore[misc]
    assert hash(PLANNED) == hash(replace(PLANNED))
