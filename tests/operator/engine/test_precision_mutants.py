"""Precision rules, one row per branch: weights' dtype and quantization, KV-cache dtype.

Notes and errors are user-facing (status conditions and Events), so rows pin their text.
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
from tests.support.hardware import hw

N = Note


class Err(NamedTuple):
    field: str
    message: str


GAUDI = hw("Gaudi3")
HW = {
    "H100": hw("H100"),
    "A100": hw("A100-80GB"),
    "L4": hw("L4"),
    "T4": hw("T4"),
    "MI210": hw("MI210"),
    "MI210NoGfx": replace(hw("MI210"), gfx_target=None),
    "MI300X": hw("MI300X"),
    "Gaudi3": GAUDI,
    "GaudiNoFP8": replace(GAUDI, fp8_compute=False, fp8_kv_cache=False),
}


WEIGHTS = [
    pytest.param('T4', None, P(precision='bf16'),
                 Err('spec.engine.precision',
                     'NVIDIA Tesla T4 (compute capability 7.5) has no BF16; vLLM requires '
                     'compute capability 8.0 for bfloat16. Use fp16 or auto'),
                 None, id='T4-None-bf16-q-nocfg'),
    pytest.param('H100', None, P(precision='fp16'),
                 ('half', None, 2.0, []),
                 [],
                 id='H100-None-fp16-q-nocfg'),
    pytest.param('H100', None, P(precision='bf16'),
                 ('bfloat16', None, 2.0, []),
                 [],
                 id='H100-None-bf16-q-nocfg'),
    pytest.param('T4', None, P(precision='fp16'),
                 ('half', None, 2.0, []),
                 [],
                 id='T4-None-fp16-q-nocfg'),
    pytest.param('T4', None, P(),
                 ('half', None, 2.0, []),
                 [N('spec.engine.precision', 'NoBF16',
                    'NVIDIA Tesla T4 has no BF16; activations use FP16'),
                  N('spec.engine.precision', 'NoFP8',
                    'weights stay 16-bit: NVIDIA Tesla T4 has no FP8 support in vLLM')],
                 id='T4-None-auto-q-nocfg'),
    pytest.param('H100', 'awq', P(),
                 ('bfloat16', None, 0.5, []),
                 [N('spec.model.quantizedCheckpoint', 'QuantizedCheckpoint',
                    'checkpoint is pre-quantized (awq); vLLM reads the method from its '
                    'config, so no --quantization is passed')],
                 id='H100-awq-auto-q-nocfg'),
    pytest.param('H100', 'Weird', P(),
                 ('bfloat16', None, 2.0, []),
                 [N('spec.model.quantizedCheckpoint', 'UnknownCheckpointQuantization',
                    "checkpoint method 'Weird' is not known to the planner; weights sized at "
                    '2 bytes per parameter'),
                  N('spec.model.quantizedCheckpoint', 'QuantizedCheckpoint',
                    'checkpoint is pre-quantized (Weird); vLLM reads the method from its '
                    'config, so no --quantization is passed')],
                 id='H100-Weird-auto-q-nocfg'),
    pytest.param('T4', ' FP8', P(),
                 Err('spec.model.quantizedCheckpoint',
                     'NVIDIA Tesla T4 cannot load an FP8 checkpoint ( FP8); use a 16-bit or '
                     'an int4/AWQ/GPTQ checkpoint'),
                 None, id='T4- FP8-auto-q-nocfg'),
    pytest.param('A100', 'fp8', P(),
                 ('bfloat16', None, 1.0, []),
                 [N('spec.model.quantizedCheckpoint', 'QuantizedCheckpoint',
                    'checkpoint is pre-quantized (fp8); vLLM reads the method from its '
                    'config, so no --quantization is passed')],
                 id='A100-fp8-auto-q-nocfg'),
    pytest.param('L4', 'fp8', P(precision='fp8'),
                 ('bfloat16', None, 1.0, []),
                 [N('spec.model.quantizedCheckpoint', 'QuantizedCheckpoint',
                    'checkpoint is pre-quantized (fp8); vLLM reads the method from its '
                    'config, so no --quantization is passed')],
                 id='L4-fp8-fp8-q-nocfg'),
    pytest.param('H100', 'awq', P(precision='fp8'),
                 Err('spec.engine.precision',
                     'the checkpoint is already quantized (awq); precision fp8 cannot '
                     're-quantize it. Use auto'),
                 None, id='H100-awq-fp8-q-nocfg'),
    pytest.param('H100', None, P(precision='fp8', allow_quantization=False),
                 Err('spec.engine.precision',
                     'precision fp8 quantizes the weights, but the SLO policy forbids '
                     'quantization (spec.allowQuantization=false)'),
                 None, id='H100-None-fp8-noq-nocfg'),
    pytest.param('Gaudi3', None, P(allow_quantization=False, quant_config='/q.json'),
                 ('bfloat16', None, 2.0, []),
                 [],
                 id='Gaudi3-None-auto-noq-cfg'),
    pytest.param('GaudiNoFP8', None, P(quant_config='/q.json'),
                 ('bfloat16', None, 2.0, []),
                 [],
                 id='GaudiNoFP8-None-auto-q-cfg'),
    pytest.param('GaudiNoFP8', None, P(precision='fp8', quant_config='/q.json'),
                 ('bfloat16', None, 2.0, []),
                 [],
                 id='GaudiNoFP8-None-fp8-q-cfg'),
    pytest.param('Gaudi3', None, P(),
                 ('bfloat16', None, 2.0, []),
                 [N('spec.engine.precision', 'NoCalibration',
                    'Intel Gaudi 3 supports FP8 only with an INC calibration file '
                    '(QUANT_CONFIG); none is configured, so weights stay BF16')],
                 id='Gaudi3-None-auto-q-nocfg'),
    pytest.param('Gaudi3', None, P(precision='fp8'),
                 Err('spec.engine.precision',
                     'FP8 on Intel Gaudi 3 needs an Intel Neural Compressor calibration file '
                     '(QUANT_CONFIG); none is configured'),
                 None, id='Gaudi3-None-fp8-q-nocfg'),
    pytest.param('Gaudi3', None, P(quant_config='/q.json'),
                 ('bfloat16', 'inc', 1.0, [('QUANT_CONFIG', '/q.json')]),
                 [N('spec.engine.precision', 'FP8Calibrated',
                    'FP8 through INC with QUANT_CONFIG')],
                 id='Gaudi3-None-auto-q-cfg'),
    pytest.param('Gaudi3', None, P(precision='fp8', quant_config='/q.json'),
                 ('bfloat16', 'inc', 1.0, [('QUANT_CONFIG', '/q.json')]),
                 [N('spec.engine.precision', 'FP8Calibrated',
                    'FP8 through INC with QUANT_CONFIG')],
                 id='Gaudi3-None-fp8-q-cfg'),
    pytest.param('H100', None, P(),
                 ('bfloat16', 'fp8', 1.0, []),
                 [N('spec.engine.precision', 'FP8Native',
                    'NVIDIA H100 SXM 80GB computes FP8 natively (W8A8); weights quantized '
                    'online with --quantization fp8, halving weight memory. FP8 pays off only'
                    ' with fused kernels: confirm with the runtime profile')],
                 id='H100-None-auto-q-nocfg'),
    pytest.param('H100', None, P(allow_quantization=False),
                 ('bfloat16', None, 2.0, []),
                 [N('spec.engine.precision', 'NoFP8',
                    'weights stay 16-bit: the SLO policy forbids quantization '
                    '(spec.allowQuantization=false)')],
                 id='H100-None-auto-noq-nocfg'),
    pytest.param('A100', None, P(),
                 ('bfloat16', None, 2.0, []),
                 [N('spec.engine.precision', 'NoFP8',
                    'weights stay 16-bit: NVIDIA A100 SXM4 80GB has no native FP8; FP8 would '
                    'be weight-only through Marlin (memory saved, no speed-up), so it is used'
                    ' only when asked for')],
                 id='A100-None-auto-q-nocfg'),
    pytest.param('MI210', None, P(),
                 ('bfloat16', None, 2.0, []),
                 [N('spec.engine.precision', 'NoFP8',
                    'weights stay 16-bit: AMD Instinct MI210 has no FP8 support in vLLM')],
                 id='MI210-None-auto-q-nocfg'),
    pytest.param('H100', None, P(precision='fp8'),
                 ('bfloat16', 'fp8', 1.0, []),
                 [N('spec.engine.precision', 'FP8Native',
                    'FP8 W8A8 as requested')],
                 id='H100-None-fp8-q-nocfg'),
    pytest.param('A100', None, P(precision='fp8'),
                 ('bfloat16', 'fp8', 1.0, []),
                 [N('spec.engine.precision', 'FP8WeightOnly',
                    'NVIDIA A100 SXM4 80GB has no native FP8: vLLM runs FP8 weight-only '
                    'through the Marlin kernel (memory saved, no FP8 compute speed-up)')],
                 id='A100-None-fp8-q-nocfg'),
    pytest.param('MI210', None, P(precision='fp8'),
                 Err('spec.engine.precision',
                     'AMD Instinct MI210 (gfx90a) has no FP8 in vLLM (vllm/platforms/rocm.py '
                     'supports_fp8: gfx94x, gfx95x, gfx12 only) and the weight-only Marlin '
                     'fallback is disabled on ROCm'),
                 None, id='MI210-None-fp8-q-nocfg'),
    pytest.param('MI210NoGfx', None, P(precision='fp8'),
                 Err('spec.engine.precision',
                     'AMD Instinct MI210 (unknown gfx target) has no FP8 in vLLM '
                     '(vllm/platforms/rocm.py supports_fp8: gfx94x, gfx95x, gfx12 only) and '
                     'the weight-only Marlin fallback is disabled on ROCm'),
                 None, id='MI210NoGfx-None-fp8-q-nocfg'),
    pytest.param('T4', None, P(precision='fp8'),
                 Err('spec.engine.precision',
                     'NVIDIA Tesla T4 (compute capability 7.5) cannot run --quantization fp8;'
                     " vLLM's FP8 method needs compute capability 8.0 (fp8.py "
                     'get_min_capability)'),
                 None, id='T4-None-fp8-q-nocfg'),
    pytest.param('H100', 'Weird', P(precision='fp8'),
                 Err('spec.engine.precision',
                     'the checkpoint is already quantized (Weird); precision fp8 cannot '
                     're-quantize it. Use auto'),
                 None, id='H100-Weird-fp8-q-nocfg'),
    pytest.param('A100', 'fp8', P(precision='fp16'),
                 ('half', None, 1.0, []),
                 [N('spec.model.quantizedCheckpoint', 'QuantizedCheckpoint',
                    'checkpoint is pre-quantized (fp8); vLLM reads the method from its '
                    'config, so no --quantization is passed')],
                 id='A100-fp8-fp16-q-nocfg'),
]
KV = [
    pytest.param('Gaudi3', P(quant_config='/q.json'),
                 ('fp8_inc', 1.0),
                 [],
                 id='Gaudi3-auto-q-cfg'),
    pytest.param('Gaudi3', P(),
                 ('auto', 2.0),
                 [],
                 id='Gaudi3-auto-q-nocfg'),
    pytest.param('Gaudi3', P(allow_quantization=False, quant_config='/q.json'),
                 ('auto', 2.0),
                 [],
                 id='Gaudi3-auto-noq-cfg'),
    pytest.param('GaudiNoFP8', P(quant_config='/q.json'),
                 ('auto', 2.0),
                 [],
                 id='GaudiNoFP8-auto-q-cfg'),
    pytest.param('H100', P(),
                 ('fp8', 1.0),
                 [N('spec.engine.kvCacheDtype', 'FP8KVCache',
                    'KV cache in FP8 (fp8) halves KV memory and raises the feasible batch; '
                    'default scales (1.0) may cost some accuracy (quantized_kvcache.md)')],
                 id='H100-auto-q-nocfg'),
    pytest.param('MI300X', P(),
                 ('fp8_e4m3', 1.0),
                 [N('spec.engine.kvCacheDtype', 'FP8KVCache',
                    'KV cache in FP8 (fp8_e4m3) halves KV memory and raises the feasible '
                    'batch; default scales (1.0) may cost some accuracy '
                    '(quantized_kvcache.md)')],
                 id='MI300X-auto-q-nocfg'),
    pytest.param('H100', P(allow_quantization=False),
                 ('auto', 2.0),
                 [N('spec.engine.kvCacheDtype', 'NoFP8KVCache',
                    'KV cache keeps the model dtype: the SLO policy forbids quantization '
                    '(spec.allowQuantization=false)')],
                 id='H100-auto-noq-nocfg'),
    pytest.param('A100', P(),
                 ('auto', 2.0),
                 [N('spec.engine.kvCacheDtype', 'NoFP8KVCache',
                    'KV cache keeps the model dtype: FP8 KV cache is known to fail on Ampere '
                    '(vLLM issues #26431, #7714 with chunked prefill)')],
                 id='A100-auto-q-nocfg'),
    pytest.param('T4', P(),
                 ('auto', 2.0),
                 [N('spec.engine.kvCacheDtype', 'NoFP8KVCache',
                    'KV cache keeps the model dtype: NVIDIA Tesla T4 has no FP8 KV-cache '
                    'support')],
                 id='T4-auto-q-nocfg'),
    pytest.param('MI210', P(),
                 ('auto', 2.0),
                 [N('spec.engine.kvCacheDtype', 'NoFP8KVCache',
                    'KV cache keeps the model dtype: AMD Instinct MI210 has no FP8 KV-cache '
                    'support')],
                 id='MI210-auto-q-nocfg'),
    pytest.param('H100', P(kv_cache_dtype='bf16'),
                 ('bfloat16', 2.0),
                 [],
                 id='H100-bf16-q-nocfg'),
    pytest.param('H100', P(kv_cache_dtype='fp16'),
                 ('float16', 2.0),
                 [],
                 id='H100-fp16-q-nocfg'),
    pytest.param('T4', P(kv_cache_dtype='bf16'),
                 Err('spec.engine.kvCacheDtype',
                     'NVIDIA Tesla T4 (compute capability 7.5) has no BF16'),
                 None, id='T4-bf16-q-nocfg'),
    pytest.param('T4', P(kv_cache_dtype='fp16'),
                 ('float16', 2.0),
                 [],
                 id='T4-fp16-q-nocfg'),
    pytest.param('H100', P(kv_cache_dtype='fp8', allow_quantization=False),
                 Err('spec.engine.kvCacheDtype',
                     'kvCacheDtype fp8 quantizes the KV cache, but the SLO policy forbids '
                     'quantization (spec.allowQuantization=false)'),
                 None, id='H100-fp8-noq-nocfg'),
    pytest.param('Gaudi3', P(kv_cache_dtype='fp8_e5m2', quant_config='/q.json'),
                 Err('spec.engine.kvCacheDtype',
                     'Intel Gaudi stores an FP8 KV cache as fp8_inc (E4M3)'),
                 None, id='Gaudi3-fp8_e5m2-q-cfg'),
    pytest.param('Gaudi3', P(kv_cache_dtype='fp8'),
                 Err('spec.engine.kvCacheDtype',
                     'an FP8 KV cache on Intel Gaudi 3 needs an INC calibration file '
                     '(QUANT_CONFIG); none is configured'),
                 None, id='Gaudi3-fp8-q-nocfg'),
    pytest.param('Gaudi3', P(kv_cache_dtype='fp8_e4m3', quant_config='/q.json'),
                 ('fp8_inc', 1.0),
                 [],
                 id='Gaudi3-fp8_e4m3-q-cfg'),
    pytest.param('MI300X', P(kv_cache_dtype='fp8_e5m2'),
                 Err('spec.engine.kvCacheDtype',
                     'fp8_e5m2 is CUDA-only; ROCm supports fp8 / fp8_e4m3 '
                     '(docs/features/quantization/quantized_kvcache.md)'),
                 None, id='MI300X-fp8_e5m2-q-nocfg'),
    pytest.param('MI210', P(kv_cache_dtype='fp8'),
                 Err('spec.engine.kvCacheDtype',
                     'AMD Instinct MI210 (gfx90a) has no FP8 in vLLM (rocm.py supports_fp8: '
                     'gfx94x, gfx95x, gfx12 only)'),
                 None, id='MI210-fp8-q-nocfg'),
    pytest.param('MI210NoGfx', P(kv_cache_dtype='fp8'),
                 Err('spec.engine.kvCacheDtype',
                     'AMD Instinct MI210 (unknown gfx target) has no FP8 in vLLM (rocm.py '
                     'supports_fp8: gfx94x, gfx95x, gfx12 only)'),
                 None, id='MI210NoGfx-fp8-q-nocfg'),
    pytest.param('MI300X', P(kv_cache_dtype='fp8'),
                 ('fp8_e4m3', 1.0),
                 [],
                 id='MI300X-fp8-q-nocfg'),
    pytest.param('MI300X', P(kv_cache_dtype='fp8_e4m3'),
                 ('fp8_e4m3', 1.0),
                 [],
                 id='MI300X-fp8_e4m3-q-nocfg'),
    pytest.param('H100', P(kv_cache_dtype='fp8_e5m2'),
                 ('fp8_e5m2', 1.0),
                 [],
                 id='H100-fp8_e5m2-q-nocfg'),
    pytest.param('A100', P(kv_cache_dtype='fp8'),
                 ('fp8', 1.0),
                 [N('spec.engine.kvCacheDtype', 'FP8KVCacheRisk',
                    'fp8 KV cache on NVIDIA A100 SXM4 80GB (compute capability 8.0) has known'
                    ' failures (vLLM issues #26431: Triton has no fp8e4nv before 8.9; #7714: '
                    'FP8 KV with chunked prefill on Ampere); kept because it was asked for')],
                 id='A100-fp8-q-nocfg'),
    pytest.param('T4', P(kv_cache_dtype='fp8_e4m3'),
                 ('fp8_e4m3', 1.0),
                 [N('spec.engine.kvCacheDtype', 'FP8KVCacheRisk',
                    'fp8_e4m3 KV cache on NVIDIA Tesla T4 (compute capability 7.5) has known '
                    'failures (vLLM issues #26431: Triton has no fp8e4nv before 8.9; #7714: '
                    'FP8 KV with chunked prefill on Ampere); kept because it was asked for')],
                 id='T4-fp8_e4m3-q-nocfg'),
]


@pytest.mark.parametrize(("gpu", "checkpoint", "prefs", "want", "want_notes"), WEIGHTS)
def test_choose_weights(gpu: str, checkpoint: str | None, prefs: P,
                        want: tuple[object, ...] | Err, want_notes: list[Note] | None) -> None:
    notes: list[Note] = []
    model = ModelFacts(name="m", params_billion=8, quantized_checkpoint=checkpoint)
    if isinstance(want, Err):
        with pytest.raises(EngineError) as err:
            choose_weights(HW[gpu], model, prefs, notes)
        assert Err(err.value.field, err.value.message) == want
        return
    assert choose_weights(HW[gpu], model, prefs, notes) == want
    assert notes == want_notes


@pytest.mark.parametrize(("gpu", "prefs", "want", "want_notes"), KV)
def test_choose_kv_cache(gpu: str, prefs: P, want: tuple[object, ...] | Err,
                         want_notes: list[Note] | None) -> None:
    notes: list[Note] = []
    if isinstance(want, Err):
        with pytest.raises(EngineError) as err:
            choose_kv_cache(HW[gpu], prefs, "bfloat16", notes)
        assert Err(err.value.field, err.value.message) == want
        return
    assert choose_kv_cache(HW[gpu], prefs, "bfloat16", notes) == want
    assert notes == want_notes


def test_cc_text() -> None:
    assert cc_text(HW["L4"]) == "compute capability 8.9"
    assert cc_text(HW["MI300X"]) == "unknown compute capability"


@pytest.mark.parametrize(
    ("quantization", "default", "want"),
    [(None, 2.0, 2.0), (None, 0.5, 0.5), ("awq", 2.0, 0.5), ("fp8", 2.0, 1.0),
     ("FP8 ", 2.0, 1.0), ("bogus", 2.0, 2.0), ("bogus", 1.0, 1.0)],
)
def test_quant_bytes(quantization: str | None, default: float, want: float) -> None:
    assert quant_bytes(quantization, default) == want


@pytest.mark.parametrize(
    ("dtype", "want"),
    [("fp8", 1.0), ("fp8_e4m3", 1.0), ("fp8_e5m2", 1.0), ("fp8_inc", 1.0), ("auto", 2.0),
     ("bfloat16", 2.0), ("float16", 2.0)],
)
def test_kv_cache_bytes(dtype: str, want: float) -> None:
    assert kv_cache_bytes(dtype) == want
