"""Precision: the weights' dtype and quantization, and the KV-cache dtype, for a GPU.

FP8 only where the GPU runs it (natively, or weight-only through Marlin when asked for),
FP8 checkpoints only where they load, BF16 only from compute capability 8.0; Intel Gaudi
quantizes through INC with a calibration file. What a GPU runs (``HardwareClass.bf16``,
``fp8_compute``, ``fp8_weight_only``, ``fp8_kv_cache``) comes from the rules in
``slo_runtime.contract``, which the in-pod launcher applies too: whatever is planned here
on a GPU is what the launcher keeps on it. Every rule cites its source;
``docs/hardware-and-engine.md`` lists them in one place.
"""

from __future__ import annotations

from slo_operator.engine.fields import (
    F_ALLOW_Q,
    F_CHECKPOINT,
    F_KV,
    F_PRECISION,
)
from slo_operator.engine.sizing import checkpoint_bytes_per_param
from slo_operator.engine.types import EngineError, EnginePrefs, ModelFacts, Note
from slo_operator.hardware import HardwareClass
from slo_runtime.contract import (
    FP8_KV_CACHE_DTYPES,
    FP8_QUANT_METHODS,
    ROCM_FP8_KV_CACHE_DTYPES,
)


def cc_text(hw: HardwareClass) -> str:
    """Describe the GPU's compute capability for a message ("compute capability 8.9")."""
    if hw.compute_capability is None:
        return "unknown compute capability"
    return f"compute capability {hw.compute_capability[0]}.{hw.compute_capability[1]}"


def choose_weights(
    hw: HardwareClass, model: ModelFacts, prefs: EnginePrefs, notes: list[Note]
) -> tuple[str, str | None, float, list[tuple[str, str]]]:
    """Choose the weights' dtype and quantization for this GPU.

    Returns (dtype, quantization, bytes per parameter, env); notes say why.
    """
    prec = prefs.precision
    if prec == "bf16" and not hw.bf16:
        # vllm/platforms/cuda.py check_if_supports_dtype: "Bfloat16 is only supported on
        # GPUs with compute capability of at least 8.0 ... use --dtype=half".
        raise EngineError(
            F_PRECISION,
            f"{hw.display_name} ({cc_text(hw)}) has no BF16; vLLM requires compute capability "
            "8.0 for bfloat16. Use fp16 or auto",
        )
    dtype = "half" if prec == "fp16" or not hw.bf16 else "bfloat16"
    if not hw.bf16 and prec == "auto":
        notes.append(
            Note(F_PRECISION, "NoBF16", f"{hw.display_name} has no BF16; activations use FP16")
        )

    if model.quantized_checkpoint:
        method = model.quantized_checkpoint
        bpp = checkpoint_bytes_per_param(method)
        if bpp is None:
            bpp = 2.0
            notes.append(
                Note(
                    F_CHECKPOINT,
                    "UnknownCheckpointQuantization",
                    f"checkpoint method {method!r} is not known to the planner; weights "
                    "sized at 2 bytes per parameter",
                )
            )
        if method.strip().lower() in FP8_QUANT_METHODS and not (
            hw.fp8_compute or hw.fp8_weight_only
        ):
            # FP8 checkpoints load through the same FP8 method: capability 8.0 on CUDA
            # (fp8.py get_min_capability), gfx94x/gfx95x/gfx12 on ROCm (rocm.py).
            raise EngineError(
                F_CHECKPOINT,
                f"{hw.display_name} cannot load an FP8 checkpoint ({method}); use a 16-bit "
                "or an int4/AWQ/GPTQ checkpoint",
            )
        if prec == "fp8" and bpp != 1.0:
            raise EngineError(
                F_PRECISION,
                f"the checkpoint is already quantized ({method}); precision fp8 cannot "
                "re-quantize it. Use auto",
            )
        notes.append(
            Note(
                F_CHECKPOINT,
                "QuantizedCheckpoint",
                f"checkpoint is pre-quantized ({method}); vLLM reads the method from its "
                "config, so no --quantization is passed",
            )
        )
        return dtype, None, bpp, []

    if prec in ("bf16", "fp16"):
        return dtype, None, 2.0, []

    explicit = prec == "fp8"
    if explicit and not prefs.allow_quantization:
        raise EngineError(
            F_PRECISION,
            "precision fp8 quantizes the weights, but the SLO policy forbids quantization "
            f"({F_ALLOW_Q}=false)",
        )

    if hw.vendor == "intel":
        # Gaudi FP8 goes through Intel Neural Compressor with a measured calibration file
        # (vllm docs supported_hardware.md: Intel Gaudi supports INC W8A8 only;
        # docs/features/quantization/inc.md: "QUANT_CONFIG=... vllm serve ...
        # --quantization inc --kv-cache-dtype fp8_inc"). Measurements are device-specific:
        # Gaudi 3 scales cannot be used on Gaudi 2 (docs.habana.ai vLLM FP8 inference).
        if not hw.fp8_compute or (not explicit and not prefs.allow_quantization):
            return dtype, None, 2.0, []
        if prefs.quant_config is None:
            if explicit:
                raise EngineError(
                    F_PRECISION,
                    f"FP8 on {hw.display_name} needs an Intel Neural Compressor calibration "
                    "file (QUANT_CONFIG); none is configured",
                )
            notes.append(
                Note(
                    F_PRECISION,
                    "NoCalibration",
                    f"{hw.display_name} supports FP8 only with an INC calibration file "
                    "(QUANT_CONFIG); none is configured, so weights stay BF16",
                )
            )
            return dtype, None, 2.0, []
        notes.append(Note(F_PRECISION, "FP8Calibrated", "FP8 through INC with QUANT_CONFIG"))
        return dtype, "inc", 1.0, [("QUANT_CONFIG", prefs.quant_config)]

    if not explicit:
        if hw.fp8_compute and prefs.allow_quantization:
            notes.append(
                Note(
                    F_PRECISION,
                    "FP8Native",
                    f"{hw.display_name} computes FP8 natively (W8A8); weights quantized "
                    "online with --quantization fp8, halving weight memory. FP8 pays off "
                    "only with fused kernels: confirm with the runtime profile",
                )
            )
            return dtype, "fp8", 1.0, []
        if hw.fp8_compute:
            why = f"the SLO policy forbids quantization ({F_ALLOW_Q}=false)"
        elif hw.fp8_weight_only:
            why = (
                f"{hw.display_name} has no native FP8; FP8 would be weight-only through "
                "Marlin (memory saved, no speed-up), so it is used only when asked for"
            )
        else:
            why = f"{hw.display_name} has no FP8 support in vLLM"
        notes.append(Note(F_PRECISION, "NoFP8", f"weights stay 16-bit: {why}"))
        return dtype, None, 2.0, []

    # Explicit fp8.
    if hw.fp8_compute:
        notes.append(Note(F_PRECISION, "FP8Native", "FP8 W8A8 as requested"))
        return dtype, "fp8", 1.0, []
    if hw.fp8_weight_only:
        # vllm/model_executor/layers/quantization/fp8.py: use_marlin when the device lacks
        # capability 8.9; marlin_utils_fp8.py warns "Weight-only FP8 compression will be
        # used leveraging the Marlin kernel".
        notes.append(
            Note(
                F_PRECISION,
                "FP8WeightOnly",
                f"{hw.display_name} has no native FP8: vLLM runs FP8 weight-only through the "
                "Marlin kernel (memory saved, no FP8 compute speed-up)",
            )
        )
        return dtype, "fp8", 1.0, []
    if hw.vendor == "amd":
        raise EngineError(
            F_PRECISION,
            f"{hw.display_name} ({hw.gfx_target or 'unknown gfx target'}) has no FP8 in vLLM "
            "(vllm/platforms/rocm.py supports_fp8: gfx94x, gfx95x, gfx12 only) and the "
            "weight-only Marlin fallback is disabled on ROCm",
        )
    raise EngineError(
        F_PRECISION,
        f"{hw.display_name} ({cc_text(hw)}) cannot run --quantization fp8; vLLM's FP8 method "
        "needs compute capability 8.0 (fp8.py get_min_capability)",
    )




def choose_kv_cache(
    hw: HardwareClass, prefs: EnginePrefs, dtype: str, notes: list[Note]
) -> tuple[str, float]:
    """Choose the KV-cache dtype for this GPU.

    Returns (--kv-cache-dtype value, bytes per element); notes say why.
    """
    kv = prefs.kv_cache_dtype
    allow = prefs.allow_quantization
    if kv == "auto":
        if hw.vendor == "intel":
            if hw.fp8_kv_cache and allow and prefs.quant_config is not None:
                return "fp8_inc", 1.0
            return "auto", 2.0
        if hw.fp8_kv_cache and allow:
            # ROCm takes fp8/fp8_e4m3 (contract.ROCM_FP8_KV_CACHE_DTYPES; MI300 stores
            # float8_e4m3fnuz: rocm.py is_fp8_fnuz); written fp8_e4m3 to say which.
            value = "fp8_e4m3" if hw.vendor == "amd" else "fp8"
            notes.append(
                Note(
                    F_KV,
                    "FP8KVCache",
                    f"KV cache in FP8 ({value}) halves KV memory and raises the feasible "
                    "batch; default scales (1.0) may cost some accuracy (quantized_kvcache.md)",
                )
            )
            return value, 1.0
        if hw.fp8_kv_cache:
            why = f"the SLO policy forbids quantization ({F_ALLOW_Q}=false)"
        elif hw.architecture == "ampere":
            why = (
                "FP8 KV cache is known to fail on Ampere (vLLM issues #26431, #7714 with "
                "chunked prefill)"
            )
        else:
            why = f"{hw.display_name} has no FP8 KV-cache support"
        notes.append(Note(F_KV, "NoFP8KVCache", f"KV cache keeps the model dtype: {why}"))
        return "auto", 2.0

    if kv in ("bf16", "fp16"):
        if kv == "bf16" and not hw.bf16:
            raise EngineError(F_KV, f"{hw.display_name} ({cc_text(hw)}) has no BF16")
        return ("bfloat16" if kv == "bf16" else "float16"), 2.0

    # fp8, fp8_e4m3, fp8_e5m2
    if not allow:
        raise EngineError(
            F_KV,
            f"kvCacheDtype {kv} quantizes the KV cache, but the SLO policy forbids "
            f"quantization ({F_ALLOW_Q}=false)",
        )
    if hw.vendor == "intel":
        # contract.GAUDI_FP8_KV_CACHE_DTYPES: fp8_inc only, an E4M3 format; fp8 and
        # fp8_e4m3 are written that way, fp8_e5m2 has no Gaudi form.
        if kv == "fp8_e5m2":
            raise EngineError(F_KV, "Intel Gaudi stores an FP8 KV cache as fp8_inc (E4M3)")
        if prefs.quant_config is None:
            raise EngineError(
                F_KV,
                f"an FP8 KV cache on {hw.display_name} needs an INC calibration file "
                "(QUANT_CONFIG); none is configured",
            )
        return "fp8_inc", 1.0
    if hw.vendor == "amd":
        if kv not in ROCM_FP8_KV_CACHE_DTYPES:
            raise EngineError(
                F_KV,
                "fp8_e5m2 is CUDA-only; ROCm supports fp8 / fp8_e4m3 "
                "(docs/features/quantization/quantized_kvcache.md)",
            )
        if not hw.fp8_kv_cache:
            raise EngineError(
                F_KV,
                f"{hw.display_name} ({hw.gfx_target or 'unknown gfx target'}) has no FP8 in "
                "vLLM (rocm.py supports_fp8: gfx94x, gfx95x, gfx12 only)",
            )
        return "fp8_e4m3", 1.0
    if not hw.fp8_kv_cache:
        # vLLM accepts it (contract.CUDA_FP8_KV_CACHE_DTYPES), so it is planned and sized
        # at 8 bits; the launcher keeps it on the GPU it was planned for.
        notes.append(
            Note(
                F_KV,
                "FP8KVCacheRisk",
                f"{kv} KV cache on {hw.display_name} ({cc_text(hw)}) has known failures "
                "(vLLM issues #26431: Triton has no fp8e4nv before 8.9; #7714: FP8 KV with "
                "chunked prefill on Ampere); kept because it was asked for",
            )
        )
    return kv, 1.0




def quant_bytes(quantization: str | None, default: float) -> float:
    """Bytes per weight parameter under a ``--quantization`` method (``default`` if unknown)."""
    if quantization is None:
        return default
    bpp = checkpoint_bytes_per_param(quantization)
    return bpp if bpp is not None else default


def kv_cache_bytes(kv_cache_dtype: str) -> float:
    """Bytes per KV-cache element for a ``--kv-cache-dtype`` value: 1 for FP8, else 2."""
    return 1.0 if kv_cache_dtype in FP8_KV_CACHE_DTYPES else 2.0
