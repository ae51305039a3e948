"""User overrides: merging extra args, and the effective settings each override gives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slo_operator.engine import VllmArgSpec
from slo_operator.engine.overrides import EngineSettings, apply_overrides, merge_extra
from slo_operator.engine.types import EngineError, GpuSharing, ModelFacts, Note
from tests.support.golden import Golden
from tests.support.hardware import hw

SPEC = VllmArgSpec.load()
H100 = hw("H100")
PLANNED = EngineSettings(
    dtype="bfloat16", quantization="fp8", weight_bytes=1.0, kv_cache_dtype="fp8", kv_bytes=1.0,
    tensor_parallel_size=1, max_num_seqs=256, max_num_batched_tokens=8192,
    gpu_memory_utilization=0.9, max_model_len=8192, cudagraph_capture_sizes=(1, 2, 4, 8),
)
MODEL = ModelFacts(name="m", params_billion=8, num_attention_heads=28, num_kv_heads=4)
WHOLE = GpuSharing()
X0 = "spec.engine.extraArgs[0]"
X1 = "spec.engine.extraArgs[1]"
X2 = "spec.engine.extraArgs[2]"


def case_id(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.id)


def merge_error(generated: list[str], extra: list[str]) -> EngineError:
    with pytest.raises(EngineError) as err:
        merge_extra(SPEC, generated, extra)
    return err.value


# ------------------------------------------------------------------ merging


@pytest.mark.parametrize(
    ("extra", "want_field"),
    [
        pytest.param(["--bogus"], X0, id="unknown-option"),
        pytest.param(["--bogus", "--max-num-seqs"], X0, id="first-of-two-problems"),
        pytest.param(["--bogus", "--max-num-seqs", "--x"], X0, id="first-of-three-problems"),
        pytest.param(["--enforce-eager", "--warp-speed"], X1, id="unknown-option-after-a-flag"),
        pytest.param(["--max-num-seqs", "lots"], X1, id="not-an-integer"),
        pytest.param(["--dtype", "bf16"], X1, id="not-one-of-the-choices"),
        pytest.param(["--quantization", "fp9"], X1, id="unknown-quantization-method"),
    ],
)
def test_invalid_extra_args_name_the_first_problem(extra: list[str], want_field: str,
                                                   golden: Golden,
                                                   request: pytest.FixtureRequest) -> None:
    err = merge_error([], extra)
    assert err.field == want_field
    golden.check("engine", f"overrides-invalid-{case_id(request)}", err.message)


@pytest.mark.parametrize(
    ("extra", "want_field"),
    [
        pytest.param(["--max-num-seqs", "8", "--model", "x"], X2, id="model"),
        pytest.param(["--enforce-eager", "--model", "other"], X1, id="model-after-a-flag"),
        pytest.param(["--max-num-seqs", "8", "--host", "0.0.0.0"], X2, id="host"),
        pytest.param(["--host=0.0.0.0"], X0, id="host-equals-form"),
        pytest.param(["--max-num-seqs", "8", "--port", "9000"], X2, id="port"),
        pytest.param(["--max-num-seqs", "8", "--uds", "/tmp/s"], X2, id="uds"),
        pytest.param(["--max-num-seqs", "8", "--headless"], X2, id="headless"),
    ],
)
def test_operator_owned_options_are_refused_where_written(extra: list[str], want_field: str,
                                                          golden: Golden,
                                                          request: pytest.FixtureRequest
                                                          ) -> None:
    # vLLM must listen where the gateway forwards; the launcher would override it anyway.
    err = merge_error([], extra)
    assert err.field == want_field
    golden.check("engine", f"overrides-operator-owned-{case_id(request)}", err.message)


def test_user_options_replace_generated_ones_and_are_reported(golden: Golden) -> None:
    generated = ["--max-num-seqs", "256", "--dtype", "bfloat16", "--tensor-parallel-size", "1"]
    extra = ["--max-num-seqs", "8", "-tp", "2", "--max-num-seqs=16"]
    merged, conflicts, user = merge_extra(SPEC, generated, extra)
    assert merged == ["--dtype", "bfloat16", *extra]
    assert [(n.field, n.reason) for n in conflicts] == [(
        "spec.engine.extraArgs[4]", "UserOverride"), (X2, "UserOverride")]
    golden.check("engine", "overrides-user-override-equals-form", conflicts[0].message)
    golden.check("engine", "overrides-user-override-short-flag", conflicts[1].message)
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


# ------------------------------------------------------------------ effective settings


def effective(*extra: str, planned: EngineSettings = PLANNED, sharing: GpuSharing = WHOLE,
              model: ModelFacts = MODEL, gpus: int = 8) -> tuple[EngineSettings, list[Note]]:
    _, _, user = merge_extra(SPEC, [], list(extra))
    notes: list[Note] = []
    out = apply_overrides(planned, user, gpus_per_node=gpus, model=model, sharing=sharing,
                          hw=H100, notes=notes)
    return out, notes


def refused(*extra: str, **kw: object) -> EngineError:
    with pytest.raises(EngineError) as err:
        effective(*extra, **kw)  # type: ignore[arg-type]
    return err.value


def test_without_overrides_the_plan_stands() -> None:
    assert effective() == (PLANNED, [])


@pytest.mark.parametrize(
    ("extra", "want_changes"),
    [
        pytest.param(("-tp", "2"), {"tensor_parallel_size": 2}, id="tp"),
        pytest.param(("--max-num-seqs", "16"), {"max_num_seqs": 16}, id="batch-limit"),
        pytest.param(("--max-num-batched-tokens", "256"), {"max_num_batched_tokens": 256},
                     id="budget-equal-to-the-batch-limit"),
        pytest.param(("--max-num-seqs", "4096", "--max-num-batched-tokens", "4096"),
                     {"max_num_seqs": 4096, "max_num_batched_tokens": 4096},
                     id="largest-batch-with-its-budget"),
        pytest.param(("--max-model-len", "4096"), {"max_model_len": 4096}, id="context"),
        pytest.param(("--max-model-len", "8k"), {"max_model_len": 8000},
                     id="context-with-suffix"),
        pytest.param(("--max-model-len", "auto"), {"max_model_len": None}, id="context-auto"),
        pytest.param(("--max-model-len", " AUTO "), {"max_model_len": None},
                     id="context-auto-any-case"),
        pytest.param(("--max-model-len", "-1"), {"max_model_len": None},
                     id="context-minus-one-is-auto"),
        pytest.param(("--gpu-memory-utilization", "0.5"), {"gpu_memory_utilization": 0.5},
                     id="memory-fraction"),
        pytest.param(("--dtype", "half"), {"dtype": "half"}, id="dtype"),
        pytest.param(("-q", "awq"), {"quantization": "awq", "weight_bytes": 0.5},
                     id="quantization-sized"),
        # A method the planner cannot size: 16-bit weights.
        pytest.param(("-q", "quark"), {"quantization": "quark", "weight_bytes": 2.0},
                     id="quantization-unknown-size"),
        pytest.param(("--kv-cache-dtype", "auto"), {"kv_cache_dtype": "auto", "kv_bytes": 2.0},
                     id="kv-cache-back-to-16-bit"),
        pytest.param(("--kv-cache-dtype", "fp8_e5m2"), {"kv_cache_dtype": "fp8_e5m2"},
                     id="kv-cache-other-fp8"),
        pytest.param(("--cudagraph-capture-sizes", "4", "1", "4", "2"),
                     {"cudagraph_capture_sizes": (1, 2, 4)}, id="graph-sizes-sorted-unique"),
        pytest.param(("--cudagraph-capture-sizes", "4096", "1"),
                     {"cudagraph_capture_sizes": (1, 4096)}, id="graph-sizes-at-the-limits"),
        pytest.param(("--pipeline-parallel-size", " 1 "), {}, id="pipeline-parallel-one"),
        pytest.param(("-pp", "1"), {}, id="pipeline-parallel-one-short"),
        pytest.param(("-dp", "1"), {}, id="data-parallel-one"),
        pytest.param(("--enforce-eager",), {}, id="unrelated-option"),
    ],
)
def test_effective_settings_follow_the_overrides(extra: tuple[str, ...],
                                                 want_changes: dict[str, object]) -> None:
    assert effective(*extra) == (replace(PLANNED, **want_changes), [])  # type: ignore[arg-type]


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


@pytest.mark.parametrize(
    ("extra", "sharing", "want_field"),
    [
        pytest.param(("--tensor-parallel-size", "2"), GpuSharing(mig=True), X0,
                     id="tp-on-a-mig-slice"),
        pytest.param(("--tensor-parallel-size", "2"), GpuSharing(replicas=2), X0,
                     id="tp-on-a-time-sliced-gpu"),
        pytest.param(("-tp", "16"), WHOLE, X0, id="tp-above-the-pool"),
        pytest.param(("-tp", "0"), WHOLE, X0, id="tp-zero"),
        pytest.param(("--tensor-parallel-size", "-1"), WHOLE, X0, id="tp-negative"),
        pytest.param(("--enforce-eager", "-tp", "0"), WHOLE, X1, id="tp-zero-after-a-flag"),
        pytest.param(("--max-model-len", "0"), WHOLE, X0, id="context-zero"),
        pytest.param(("--gpu-memory-utilization", "1.5"), WHOLE, X0,
                     id="memory-fraction-above-one"),
        pytest.param(("--gpu-memory-utilization", "inf"), WHOLE, X0,
                     id="memory-fraction-infinite"),
        pytest.param(("--gpu-memory-utilization", "nan"), WHOLE, X0, id="memory-fraction-nan"),
        pytest.param(("--max-num-seqs", "8192"), WHOLE, X0, id="batch-limit-above-4096"),
        pytest.param(("--max-num-seqs", "-5"), WHOLE, X0, id="batch-limit-negative"),
        pytest.param(("--max-num-batched-tokens", "0"), WHOLE, X0, id="budget-zero"),
        pytest.param(("--max-num-batched-tokens", "99999999999999999999999k"), WHOLE, X0,
                     id="budget-huge-with-suffix"),
        pytest.param(("--max-num-batched-tokens", "9" * 60 + "T"), WHOLE, X0,
                     id="budget-astronomical"),
    ],
)
def test_overrides_are_refused_at_the_extra_arg(extra: tuple[str, ...], sharing: GpuSharing,
                                               want_field: str, golden: Golden,
                                               request: pytest.FixtureRequest) -> None:
    err = refused(*extra, sharing=sharing)
    assert err.field == want_field
    golden.check("engine", f"overrides-refused-{case_id(request)}", err.message)


def test_tp_must_divide_the_heads(golden: Golden) -> None:
    err = refused("-tp", "8", gpus=16)
    assert err.field == X0
    golden.check("engine", "overrides-tp-does-not-divide-the-heads", err.message)


@pytest.mark.parametrize(
    ("extra", "planned", "want_field"),
    [
        pytest.param(("--max-num-batched-tokens", "100"), PLANNED, X0,
                     id="users-budget-too-small"),
        pytest.param(("--max-num-batched-tokens", "255"), PLANNED, X0,
                     id="users-budget-one-below"),
        pytest.param(("--max-num-seqs", "4096"), replace(PLANNED, max_num_batched_tokens=2048), X0,
                     id="users-batch-limit-outgrew-the-generated-budget"),
        pytest.param(("--max-num-seqs", "4096", "--max-num-batched-tokens", "4000"), PLANNED, X2,
                     id="both-set-by-the-user-the-budget-is-named"),
        pytest.param((), replace(PLANNED, max_num_batched_tokens=100),
                     "spec.engine.maxNumBatchedTokens", id="neither-the-spec-field-is-named"),
    ],
)
def test_budget_below_batch_limit_blames_who_set_it(extra: tuple[str, ...],
                                                    planned: EngineSettings, want_field: str,
                                                    golden: Golden,
                                                    request: pytest.FixtureRequest) -> None:
    err = refused(*extra, planned=planned)
    assert err.field == want_field
    golden.check("engine", f"overrides-budget-below-batch-{case_id(request)}", err.message)


@pytest.mark.parametrize(
    ("gmu", "replicas", "want_warned"),
    [
        pytest.param("0.5", 4, True, id="twice-a-quarter-share"),
        pytest.param("0.26", 4, True, id="just-above-a-quarter-share"),
        pytest.param("0.25", 4, False, id="exactly-a-quarter-share"),
        pytest.param("0.5", 2, False, id="exactly-a-half-share"),
        pytest.param("0.9", 1, False, id="whole-gpu"),
    ],
)
def test_memory_fraction_above_a_shared_gpus_share_is_warned(
    gmu: str, replicas: int, want_warned: bool, golden: Golden, request: pytest.FixtureRequest
) -> None:
    out, notes = effective("--max-num-seqs", "8", "--gpu-memory-utilization", gmu,
                           sharing=GpuSharing(replicas=replicas))
    assert out.gpu_memory_utilization == float(gmu)
    assert [(n.field, n.reason) for n in notes] == (
        [(X2, "SharedGPUMemory")] if want_warned else [])
    if want_warned:
        golden.check("engine", f"overrides-shared-memory-{case_id(request)}", notes[0].message)


@pytest.mark.parametrize(
    "sizes",
    [
        pytest.param(["0"], id="zero"),
        pytest.param(["1", "4097"], id="above-4096-after-a-valid-size"),
        pytest.param(["-3"], id="negative"),
        pytest.param(["1" + "0" * 40], id="astronomical"),
    ],
)
def test_capture_sizes_outside_1_to_4096_are_refused(sizes: list[str], golden: Golden,
                                                     request: pytest.FixtureRequest) -> None:
    err = refused("--cudagraph-capture-sizes", *sizes)
    assert err.field == X0
    golden.check("engine", f"overrides-graph-size-{case_id(request)}", err.message)


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(("-pp", "2"), id="pipeline-short"),
        pytest.param(("--pipeline-parallel-size", "4"), id="pipeline-long"),
        pytest.param(("--data-parallel-size", "2"), id="data-long"),
        pytest.param(("-dp", "8"), id="data-short"),
    ],
)
def test_pipeline_and_data_parallel_are_refused(extra: tuple[str, ...], golden: Golden,
                                                request: pytest.FixtureRequest) -> None:
    # Each multiplies the GPUs one pod needs; GPUs are requested for tensor parallel only.
    err = refused(*extra)
    assert err.field == X0
    golden.check("engine", f"overrides-parallel-{case_id(request)}", err.message)


def test_settings_are_immutable_values() -> None:
    with pytest.raises(AttributeError):
        PLANNED.dtype = "half"  # type: ignore[misc]
    assert hash(PLANNED) == hash(replace(PLANNED))
