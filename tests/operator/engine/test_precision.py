"""Precision rules, one row per branch: weights' dtype and quantization, KV-cache dtype.

Notes and errors are user-facing (status conditions and Events): their text is pinned in
``tests/golden/engine.yaml`` under the row's id; the rows hold the structured fields.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import pytest

from slo_operator.engine.precision import (
    cc_text,
    choose_kv_cache,
    choose_weights,
    kv_cache_bytes,
    quant_bytes,
)
from slo_operator.engine.types import EngineError, ModelFacts, Note
from slo_operator.engine.types import EnginePrefs as P
from tests.support.golden import Golden
from tests.support.hardware import hw

PRECISION = "spec.engine.precision"
CHECKPOINT = "spec.model.quantizedCheckpoint"
KV = "spec.engine.kvCacheDtype"


class Err(NamedTuple):
    field: str


GAUDI = hw("Gaudi3")
HW = {
    "H100": hw("H100"),
    "A100": hw("A100-80GB"),
    "L4": hw("L4"),
    "T4": hw("T4"),
    "MI210": hw("MI210"),
    "MI210NoGfx": replace(hw("MI210"), gfx_target=None),
    "MI300X": hw("MI300X"),
    "MI250X": hw("MI250X"),
    "B200": hw("B200"),
    "RTX3090": hw("RTX-3090"),
    "Gaudi3": GAUDI,
    "GaudiNoFP8": replace(GAUDI, fp8_compute=False, fp8_kv_cache=False),
}


def case_id(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.id)


def check_notes(notes: list[Note], want_notes: list[tuple[str, str]], golden: Golden,
                case: str) -> None:
    assert [(n.field, n.reason) for n in notes] == want_notes
    if notes:
        golden.check("engine", case, "\n".join(n.message for n in notes))


CFG = "/q.json"
QC = [(CHECKPOINT, "QuantizedCheckpoint")]

# (gpu, checkpoint, prefs, want (dtype, quantization, bytes per parameter, env) or Err,
#  want_notes as (field, reason))
WEIGHTS = [
    pytest.param("T4", None, P(precision="bf16"), Err(PRECISION), [],
                 id="bf16-asked-on-turing-refused"),
    pytest.param("H100", None, P(precision="fp16"), ("half", None, 2.0, []), [],
                 id="fp16-asked-runs-half"),
    pytest.param("H100", None, P(precision="bf16"), ("bfloat16", None, 2.0, []), [],
                 id="bf16-asked-stays-16-bit"),
    pytest.param("T4", None, P(precision="fp16"), ("half", None, 2.0, []), [],
                 id="fp16-asked-on-turing"),
    pytest.param("T4", None, P(), ("half", None, 2.0, []),
                 [(PRECISION, "NoBF16"), (PRECISION, "NoFP8")],
                 id="auto-on-turing-runs-half-without-fp8"),
    pytest.param("H100", "awq", P(), ("bfloat16", None, 0.5, []), QC,
                 id="awq-checkpoint-passes-no-quantization"),
    pytest.param("H100", "Weird", P(), ("bfloat16", None, 2.0, []),
                 [(CHECKPOINT, "UnknownCheckpointQuantization"), *QC],
                 id="unknown-checkpoint-method-sized-at-16-bit"),
    pytest.param("T4", " FP8", P(), Err(CHECKPOINT), [],
                 id="fp8-checkpoint-on-turing-refused-whatever-its-spelling"),
    pytest.param("A100", "fp8", P(), ("bfloat16", None, 1.0, []), QC,
                 id="fp8-checkpoint-loads-on-ampere"),
    pytest.param("L4", "fp8", P(precision="fp8"), ("bfloat16", None, 1.0, []), QC,
                 id="fp8-asked-of-an-fp8-checkpoint-passes-no-quantization"),
    pytest.param("H100", "awq", P(precision="fp8"), Err(PRECISION), [],
                 id="fp8-asked-of-an-awq-checkpoint-refused"),
    pytest.param("H100", "Weird", P(precision="fp8"), Err(PRECISION), [],
                 id="fp8-asked-of-an-unknown-checkpoint-refused"),
    pytest.param("A100", "fp8", P(precision="fp16"), ("half", None, 1.0, []), QC,
                 id="fp16-asked-of-an-fp8-checkpoint-keeps-its-size"),
    pytest.param("H100", None, P(precision="fp8", allow_quantization=False), Err(PRECISION), [],
                 id="fp8-asked-while-the-policy-forbids-quantization"),
    pytest.param("Gaudi3", None, P(allow_quantization=False, quant_config=CFG),
                 ("bfloat16", None, 2.0, []), [],
                 id="gaudi-stays-bf16-when-the-policy-forbids-quantization"),
    pytest.param("GaudiNoFP8", None, P(quant_config=CFG), ("bfloat16", None, 2.0, []), [],
                 id="gaudi-without-fp8-stays-bf16"),
    # Unlike every other GPU, no error and no note although fp8 was asked for.
    pytest.param("GaudiNoFP8", None, P(precision="fp8", quant_config=CFG),
                 ("bfloat16", None, 2.0, []),
                 [], id="gaudi-without-fp8-silently-ignores-asked-fp8"),
    pytest.param("Gaudi3", None, P(), ("bfloat16", None, 2.0, []),
                 [(PRECISION, "NoCalibration")], id="gaudi-without-calibration-stays-bf16"),
    pytest.param("Gaudi3", None, P(precision="fp8"), Err(PRECISION), [],
                 id="gaudi-fp8-asked-without-calibration-refused"),
    pytest.param("Gaudi3", None, P(quant_config=CFG),
                 ("bfloat16", "inc", 1.0, [("QUANT_CONFIG", CFG)]),
                 [(PRECISION, "FP8Calibrated")], id="gaudi-with-calibration-quantizes-with-inc"),
    pytest.param("Gaudi3", None, P(precision="fp8", quant_config=CFG),
                 ("bfloat16", "inc", 1.0, [("QUANT_CONFIG", CFG)]),
                 [(PRECISION, "FP8Calibrated")], id="gaudi-fp8-asked-with-calibration"),
    pytest.param("H100", None, P(), ("bfloat16", "fp8", 1.0, []), [(PRECISION, "FP8Native")],
                 id="hopper-auto-quantizes-fp8-natively"),
    pytest.param("H100", None, P(allow_quantization=False), ("bfloat16", None, 2.0, []),
                 [(PRECISION, "NoFP8")],
                 id="hopper-auto-stays-16-bit-when-the-policy-forbids"),
    pytest.param("A100", None, P(), ("bfloat16", None, 2.0, []), [(PRECISION, "NoFP8")],
                 id="ampere-auto-skips-weight-only-fp8"),
    pytest.param("MI210", None, P(), ("bfloat16", None, 2.0, []), [(PRECISION, "NoFP8")],
                 id="mi210-auto-has-no-fp8"),
    pytest.param("H100", None, P(precision="fp8"), ("bfloat16", "fp8", 1.0, []),
                 [(PRECISION, "FP8Native")], id="hopper-fp8-asked"),
    pytest.param("A100", None, P(precision="fp8"), ("bfloat16", "fp8", 1.0, []),
                 [(PRECISION, "FP8WeightOnly")], id="ampere-fp8-asked-runs-weight-only-marlin"),
    pytest.param("MI210", None, P(precision="fp8"), Err(PRECISION), [],
                 id="mi210-fp8-asked-refused-no-marlin-on-rocm"),
    pytest.param("MI210NoGfx", None, P(precision="fp8"), Err(PRECISION), [],
                 id="amd-fp8-asked-refused-without-a-gfx-target"),
    pytest.param("T4", None, P(precision="fp8"), Err(PRECISION), [],
                 id="turing-fp8-asked-refused"),
    pytest.param("RTX3090", None, P(precision="fp8"), ("bfloat16", "fp8", 1.0, []),
                 [(PRECISION, "FP8WeightOnly")], id="ampere-8-6-fp8-asked-runs-weight-only"),
    pytest.param("B200", None, P(), ("bfloat16", "fp8", 1.0, []), [(PRECISION, "FP8Native")],
                 id="blackwell-auto-quantizes-fp8-natively"),
    pytest.param("MI300X", None, P(precision="fp8"), ("bfloat16", "fp8", 1.0, []),
                 [(PRECISION, "FP8Native")], id="mi300x-fp8-asked"),
    # MI200 runs BF16 (vLLM's check passes gfx90a, mapped to capability 9.0).
    pytest.param("MI250X", None, P(precision="bf16"), ("bfloat16", None, 2.0, []), [],
                 id="mi250x-bf16-asked"),
    pytest.param("MI250X", None, P(), ("bfloat16", None, 2.0, []), [(PRECISION, "NoFP8")],
                 id="mi250x-auto-bf16-without-fp8"),
]

# (gpu, prefs, want (--kv-cache-dtype, bytes per element) or Err, want_notes)
KV_CACHE = [
    pytest.param("Gaudi3", P(quant_config=CFG), ("fp8_inc", 1.0), [],
                 id="gaudi-auto-fp8-with-calibration"),
    pytest.param("Gaudi3", P(), ("auto", 2.0), [], id="gaudi-auto-without-calibration"),
    pytest.param("Gaudi3", P(allow_quantization=False, quant_config=CFG), ("auto", 2.0), [],
                 id="gaudi-auto-when-the-policy-forbids"),
    pytest.param("GaudiNoFP8", P(quant_config=CFG), ("auto", 2.0), [],
                 id="gaudi-auto-without-fp8-kv"),
    pytest.param("H100", P(), ("fp8", 1.0), [(KV, "FP8KVCache")], id="hopper-auto-fp8"),
    pytest.param("MI300X", P(), ("fp8_e4m3", 1.0), [(KV, "FP8KVCache")],
                 id="mi300x-auto-fp8-in-rocm-spelling"),
    pytest.param("H100", P(allow_quantization=False), ("auto", 2.0), [(KV, "NoFP8KVCache")],
                 id="hopper-auto-when-the-policy-forbids"),
    pytest.param("A100", P(), ("auto", 2.0), [(KV, "NoFP8KVCache")],
                 id="ampere-auto-avoids-known-fp8-kv-failures"),
    pytest.param("T4", P(), ("auto", 2.0), [(KV, "NoFP8KVCache")], id="turing-auto-has-no-fp8"),
    pytest.param("MI210", P(), ("auto", 2.0), [(KV, "NoFP8KVCache")], id="mi210-auto-has-no-fp8"),
    pytest.param("H100", P(kv_cache_dtype="bf16"), ("bfloat16", 2.0), [], id="bf16-asked"),
    pytest.param("H100", P(kv_cache_dtype="fp16"), ("float16", 2.0), [], id="fp16-asked"),
    pytest.param("T4", P(kv_cache_dtype="bf16"), Err(KV), [], id="bf16-asked-on-turing-refused"),
    pytest.param("T4", P(kv_cache_dtype="fp16"), ("float16", 2.0), [],
                 id="fp16-asked-on-turing"),
    pytest.param("H100", P(kv_cache_dtype="fp8", allow_quantization=False), Err(KV), [],
                 id="fp8-asked-while-the-policy-forbids-quantization"),
    pytest.param("Gaudi3", P(kv_cache_dtype="fp8_e5m2", quant_config=CFG), Err(KV), [],
                 id="gaudi-e5m2-asked-refused"),
    pytest.param("Gaudi3", P(kv_cache_dtype="fp8"), Err(KV), [],
                 id="gaudi-fp8-asked-without-calibration-refused"),
    pytest.param("Gaudi3", P(kv_cache_dtype="fp8_e4m3", quant_config=CFG), ("fp8_inc", 1.0), [],
                 id="gaudi-e4m3-asked-stored-as-fp8-inc"),
    pytest.param("MI300X", P(kv_cache_dtype="fp8_e5m2"), Err(KV), [],
                 id="e5m2-asked-on-rocm-refused"),
    pytest.param("MI210", P(kv_cache_dtype="fp8"), Err(KV), [], id="mi210-fp8-asked-refused"),
    pytest.param("MI210NoGfx", P(kv_cache_dtype="fp8"), Err(KV), [],
                 id="amd-fp8-asked-refused-without-a-gfx-target"),
    pytest.param("MI300X", P(kv_cache_dtype="fp8"), ("fp8_e4m3", 1.0), [],
                 id="mi300x-fp8-asked-stored-as-e4m3"),
    pytest.param("MI300X", P(kv_cache_dtype="fp8_e4m3"), ("fp8_e4m3", 1.0), [],
                 id="mi300x-e4m3-asked"),
    pytest.param("H100", P(kv_cache_dtype="fp8_e5m2"), ("fp8_e5m2", 1.0), [],
                 id="e5m2-asked-on-cuda"),
    pytest.param("A100", P(kv_cache_dtype="fp8"), ("fp8", 1.0), [(KV, "FP8KVCacheRisk")],
                 id="ampere-fp8-asked-kept-with-a-warning"),
    pytest.param("B200", P(), ("fp8", 1.0), [(KV, "FP8KVCache")], id="blackwell-auto-fp8"),
    pytest.param("RTX3090", P(kv_cache_dtype="fp8_e5m2"), ("fp8_e5m2", 1.0),
                 [(KV, "FP8KVCacheRisk")], id="ampere-8-6-e5m2-asked-kept-with-a-warning"),
    pytest.param("MI250X", P(), ("auto", 2.0), [(KV, "NoFP8KVCache")],
                 id="mi250x-auto-has-no-fp8"),
    pytest.param("T4", P(kv_cache_dtype="fp8_e4m3"), ("fp8_e4m3", 1.0), [(KV, "FP8KVCacheRisk")],
                 id="turing-e4m3-asked-kept-with-a-warning"),
]


@pytest.mark.parametrize(("gpu", "checkpoint", "prefs", "want", "want_notes"), WEIGHTS)
def test_weights_dtype_and_quantization(gpu: str, checkpoint: str | None, prefs: P,
                                        want: tuple[object, ...] | Err,
                                        want_notes: list[tuple[str, str]], golden: Golden,
                                        request: pytest.FixtureRequest) -> None:
    notes: list[Note] = []
    model = ModelFacts(name="m", params_billion=8, quantized_checkpoint=checkpoint)
    case = f"precision-weights-{case_id(request)}"
    if isinstance(want, Err):
        with pytest.raises(EngineError) as err:
            choose_weights(HW[gpu], model, prefs, notes)
        assert err.value.field == want.field
        golden.check("engine", case, err.value.message)
        return
    assert choose_weights(HW[gpu], model, prefs, notes) == want
    check_notes(notes, want_notes, golden, case)


@pytest.mark.parametrize(("gpu", "prefs", "want", "want_notes"), KV_CACHE)
def test_kv_cache_dtype(gpu: str, prefs: P, want: tuple[object, ...] | Err,
                        want_notes: list[tuple[str, str]], golden: Golden,
                        request: pytest.FixtureRequest) -> None:
    notes: list[Note] = []
    case = f"precision-kv-{case_id(request)}"
    if isinstance(want, Err):
        with pytest.raises(EngineError) as err:
            choose_kv_cache(HW[gpu], prefs, "bfloat16", notes)
        assert err.value.field == want.field
        golden.check("engine", case, err.value.message)
        return
    assert choose_kv_cache(HW[gpu], prefs, "bfloat16", notes) == want
    check_notes(notes, want_notes, golden, case)


@pytest.mark.parametrize(
    "gpu",
    [pytest.param("L4", id="nvidia-known"), pytest.param("MI300X", id="unknown")],
)
def test_compute_capability_as_messages_name_it(gpu: str, golden: Golden,
                                                request: pytest.FixtureRequest) -> None:
    golden.check("engine", f"precision-cc-text-{case_id(request)}", cc_text(HW[gpu]))


@pytest.mark.parametrize(
    ("quantization", "default", "want"),
    [
        pytest.param(None, 2.0, 2.0, id="none-keeps-16-bit-default"),
        pytest.param(None, 0.5, 0.5, id="none-keeps-checkpoint-default"),
        pytest.param("awq", 2.0, 0.5, id="awq-four-bit"),
        pytest.param("fp8", 2.0, 1.0, id="fp8-eight-bit"),
        pytest.param("FP8 ", 2.0, 1.0, id="matched-loosely"),
        pytest.param("bogus", 2.0, 2.0, id="unknown-keeps-16-bit-default"),
        pytest.param("bogus", 1.0, 1.0, id="unknown-keeps-given-default"),
    ],
)
def test_bytes_per_weight_under_a_quantization_method(quantization: str | None,
                                                      default: float, want: float) -> None:
    assert quant_bytes(quantization, default) == want


@pytest.mark.parametrize(
    ("dtype", "want"),
    [("fp8", 1.0), ("fp8_e4m3", 1.0), ("fp8_e5m2", 1.0), ("fp8_inc", 1.0), ("auto", 2.0),
     ("bfloat16", 2.0), ("float16", 2.0)],
)
def test_bytes_per_kv_element_one_for_fp8(dtype: str, want: float) -> None:
    assert kv_cache_bytes(dtype) == want
