"""The operator <-> runtime contract: one home for every name both sides must agree on.

Standard library only, so the in-pod runtime (copied into the vLLM image by the init
container) and the operator import the same module. It holds:

- ports of the pod (gateway in front, vLLM on loopback behind it), the gateway's paths;
- environment variables the pod template sets and the runtime reads;
- label keys and annotation names on the pods, the downward-API limit file;
- the vLLM 0.32.0 metric names the SLO loop reads, the older names as a fallback, and
  every histogram's bucket boundaries (checked against ``tests/fixtures/vllm``);
- the gateway's own metric names (``slo_gateway_*``), which the gateway exposes and the
  SLO loop reads;
- the FP8 ``--quantization`` methods and KV-cache dtypes, and the one home of the
  precision capability rules (which accelerator runs BF16, FP8 natively, FP8 weight-only,
  an FP8 KV cache): the operator's GPU catalogue and the in-pod probe and launcher read
  the same functions, so the plan and the pod cannot disagree on them;
- what the launcher finally ran (``slo_runtime_engine_info``, ``slo_runtime_engine_change``
  on the gateway's /metrics, from a JSON file in the pod's run directory);
- vLLM's ``vllm serve`` flag table (``data/serve-args-vllm-0.32.0.json``, a dump of
  vLLM 0.32.0's own argparse parser) and a parser that splits argument lists the way
  argparse does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

# The Kubernetes API group of the CRDs, and the prefix of every label and annotation.
GROUP = "inference.slo-operator.io"

# --- ports and paths of a pod -----------------------------------------------------------
# The gateway is what clients, probes and Prometheus reach; vLLM listens behind it on
# 127.0.0.1 only. The gateway serves its own metrics on /metrics and forwards vLLM's on
# /engine/metrics.
GATEWAY_PORT = 8000
VLLM_PORT = 8001
VLLM_HOST = "127.0.0.1"
HEALTH_PATH = "/health"
GATEWAY_METRICS_PATH = "/metrics"
ENGINE_METRICS_PATH = "/engine/metrics"

RUNTIME_MOUNT = "/opt/slo-runtime"
RUN_DIR = "/var/run/slo-runtime"
PROBE_FILE = f"{RUN_DIR}/probe.json"
# What the launcher finally started (argv, settings, each change with its reason), written
# next to the probe file; the gateway, which mounts the same directory, exports it.
ENGINE_INFO_FILE_NAME = "engine.json"
ENGINE_INFO_FILE = f"{RUN_DIR}/{ENGINE_INFO_FILE_NAME}"
# The live in-flight limit: a downward-API volume projects the pod annotation
# ANNOTATION_INFLIGHT_LIMIT into LIMIT_FILE; the gateway polls its content.
LIMIT_DIR = "/etc/slo-runtime"
LIMIT_FILE_NAME = "inflight-limit"
LIMIT_FILE = f"{LIMIT_DIR}/{LIMIT_FILE_NAME}"
LIMIT_VOLUME = "inflight-limit"

# --- labels and annotations -------------------------------------------------------------
LABEL_SERVICE = f"{GROUP}/service"
LABEL_TENANT = f"{GROUP}/tenant"
LABEL_POLICY = f"{GROUP}/policy"
LABEL_GPU = f"{GROUP}/gpu-product"
# One Deployment per GPU pool a service runs on (its "variant"); the label tells them apart.
LABEL_VARIANT = f"{GROUP}/variant"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "slo-operator"
ANNOTATION_INFLIGHT_LIMIT = f"{GROUP}/inflight-limit"
ANNOTATION_ENGINE_HASH = f"{GROUP}/engine-hash"

# --- environment variables (set by the pod template, read by the runtime) ----------------
ENV_ENGINE_ARGS = "SLO_ENGINE_ARGS"                  # JSON list of `vllm serve` arguments
ENV_VLLM_HOST = "SLO_VLLM_HOST"
ENV_VLLM_PORT = "SLO_VLLM_PORT"
ENV_VLLM_ENTRYPOINT = "SLO_VLLM_ENTRYPOINT"          # JSON argv prefix (tests)
ENV_EXPECTED_GPU_PRODUCT = "SLO_EXPECTED_GPU_PRODUCT"
ENV_EXPECTED_COMPUTE_CAPABILITY = "SLO_EXPECTED_COMPUTE_CAPABILITY"
ENV_EXPECTED_GPU_COUNT = "SLO_EXPECTED_GPU_COUNT"
ENV_FP8_POLICY = "SLO_FP8_POLICY"                    # auto | force
ENV_PROBE_FILE = "SLO_PROBE_FILE"
ENV_PROFILE_FILE = "SLO_PROFILE_FILE"
ENV_INFLIGHT_LIMIT_FILE = "SLO_INFLIGHT_LIMIT_FILE"
ENV_INFLIGHT_LIMIT = "SLO_INFLIGHT_LIMIT"            # limit until the file holds one
ENV_UPSTREAM = "SLO_UPSTREAM"
ENV_TENANTS_FILE = "SLO_TENANTS_FILE"

# --- vLLM 0.32.0 metrics ------------------------------------------------------------------
# Family names as vLLM declares them; counters are exposed with a "_total" suffix and
# histograms as _bucket/_sum/_count (see COUNTER_SUFFIX). Labels on every engine family:
# METRIC_LABELS.
METRIC_LABELS = ("engine", "model_name")
COUNTER_SUFFIX = "_total"
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
TTFT = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
DECODE_TIME = "vllm:request_decode_time_seconds"
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"          # a 0..1 fraction despite the name
NUM_PREEMPTIONS = "vllm:num_preemptions"             # counter
GENERATION_TOKENS = "vllm:generation_tokens"         # counter
PROMPT_TOKENS = "vllm:prompt_tokens"                 # counter
REQUEST_SUCCESS = "vllm:request_success"             # counter, label finished_reason
# Prefix cache, in prompt tokens: tokens looked up and tokens found (counters).
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# Names of older vLLM releases for the same signal (a documented fallback: autoscalers
# elsewhere broke on these renames).
LEGACY_METRIC_NAMES = {
    KV_CACHE_USAGE: "vllm:gpu_cache_usage_perc",
    TIME_PER_OUTPUT_TOKEN: "vllm:time_per_output_token_seconds",
}

# Per-request token counts (prompt, generation, max_tokens): histograms of these tokens.
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"


def tokens_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's boundaries for its per-request token-count histograms: 1, 2, 5, 10, 20, 50,
    ... up to ``max_model_len`` (vLLM's ``build_1_2_5_buckets``; the fixture's model had a
    context of at least 500 and under 1000 tokens, hence ``TOKENS_BUCKETS``)."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10 ** exponent
            if value > max_model_len:
                return tuple(out)
            out.append(float(value))
        exponent += 1


# Histogram bucket boundaries of vLLM 0.32.0 (without +Inf), as captured in the fixture.
TOKENS_BUCKETS = tokens_buckets(500)
ITERATION_TOKENS_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
                            4096.0, 8192.0, 16384.0)
PARAMS_N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
PREEMPTIONS_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                           40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# Family -> bucket boundaries, for every histogram vLLM 0.32.0 exposes.
HISTOGRAM_BUCKETS: dict[str, tuple[float, ...]] = {
    "vllm:request_prompt_tokens": TOKENS_BUCKETS,
    REQUEST_GENERATION_TOKENS: TOKENS_BUCKETS,
    "vllm:iteration_tokens_total": ITERATION_TOKENS_BUCKETS,
    "vllm:request_max_num_generation_tokens": TOKENS_BUCKETS,
    "vllm:request_params_n": PARAMS_N_BUCKETS,
    "vllm:request_params_max_tokens": TOKENS_BUCKETS,
    TTFT: TTFT_BUCKETS,
    INTER_TOKEN_LATENCY: INTER_TOKEN_BUCKETS,
    TIME_PER_OUTPUT_TOKEN: INTER_TOKEN_BUCKETS,
    E2E_LATENCY: REQUEST_LATENCY_BUCKETS,
    QUEUE_TIME: REQUEST_LATENCY_BUCKETS,
    "vllm:request_inference_time_seconds": REQUEST_LATENCY_BUCKETS,
    PREFILL_TIME: REQUEST_LATENCY_BUCKETS,
    DECODE_TIME: REQUEST_LATENCY_BUCKETS,
    "vllm:request_num_preemptions": PREEMPTIONS_BUCKETS,
    "vllm:request_prefill_kv_computed_tokens": TOKENS_BUCKETS,
}

# --- the gateway's own metrics -----------------------------------------------------------
# Families the in-pod gateway exposes on GATEWAY_METRICS_PATH (counters with COUNTER_SUFFIX,
# histograms as _bucket/_sum/_count). Its TTFT and e2e histograms hold every one of vLLM's
# boundaries (TTFT_BUCKETS, REQUEST_LATENCY_BUCKETS), so both views still compare bucket by
# bucket, plus a boundary at every round number of ROUND_MANTISSAS in the range objectives
# use (GATEWAY_TTFT_BUCKETS, GATEWAY_E2E_BUCKETS). A percentile is interpolated linearly
# inside the bucket holding it, which reads a tail high: with vLLM's 5 s and 10 s
# boundaries alone, a true P99 of 5.1 s read 6.0 s against a 6 s objective. With a boundary
# at every round objective, whether a percentile meets it is read exactly, and a reading
# elsewhere is at most one grid step (a third) above the truth.
ROUND_MANTISSAS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def round_boundaries(lo: float, hi: float) -> tuple[float, ...]:
    """Every ``m x 10**k`` (``m`` in ROUND_MANTISSAS) from ``lo`` to ``hi``, ascending."""
    out = []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in ROUND_MANTISSAS:
            v = round(m * 10.0 ** k, 9)
            if lo <= v <= hi:
                out.append(v)
    return tuple(out)


def _with_round(vllm: tuple[float, ...], lo: float, hi: float) -> tuple[float, ...]:
    return tuple(sorted(set(vllm) | set(round_boundaries(lo, hi))))


# 10 ms to 2 minutes of first-token latency, 100 ms to 10 minutes end to end.
GATEWAY_TTFT_BUCKETS = _with_round(TTFT_BUCKETS, 0.01, 120.0)
GATEWAY_E2E_BUCKETS = _with_round(REQUEST_LATENCY_BUCKETS, 0.1, 600.0)
GATEWAY_TTFT = "slo_gateway_time_to_first_token_seconds"          # histogram, tenant
GATEWAY_E2E_LATENCY = "slo_gateway_e2e_request_latency_seconds"   # histogram, tenant
GATEWAY_QUEUE_WAIT = "slo_gateway_queue_wait_seconds"             # histogram, tenant
GATEWAY_QUEUE_DEPTH = "slo_gateway_queue_depth"                   # gauge, tenant
GATEWAY_INFLIGHT = "slo_gateway_inflight"                         # gauge
GATEWAY_INFLIGHT_LIMIT = "slo_gateway_inflight_limit"             # gauge
GATEWAY_REQUESTS = "slo_gateway_requests"                         # counter, tenant + code
GATEWAY_REJECTIONS = "slo_gateway_rejections"                     # counter, tenant + reason
GATEWAY_CANCELLED = "slo_gateway_cancelled"                       # counter, tenant
# Requests as they arrive, before admission (demand, not completions): counter, tenant.
GATEWAY_ARRIVALS = "slo_gateway_arrivals"
GATEWAY_METRICS = (
    GATEWAY_TTFT, GATEWAY_E2E_LATENCY, GATEWAY_QUEUE_WAIT, GATEWAY_QUEUE_DEPTH,
    GATEWAY_INFLIGHT, GATEWAY_INFLIGHT_LIMIT, GATEWAY_REQUESTS, GATEWAY_REJECTIONS,
    GATEWAY_CANCELLED, GATEWAY_ARRIVALS,
)

# --- precision ----------------------------------------------------------------------------
# `--quantization` methods of vLLM 0.32.0 whose weights are FP8 (every FP8 name in the
# capture's quantization_methods; "modelopt" is NVIDIA ModelOpt's FP8 checkpoint format,
# its FP4 and mixed variants are separate names). They need FP8 kernels: native on compute
# capability >= 8.9, weight-only (Marlin) from 8.0.
FP8_QUANT_METHODS = frozenset({
    "fp8", "fbgemm_fp8", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel",
    "modelopt", "modelopt_mxfp8", "mxfp8", "deepseek_v4_fp8",
})
# `--kv-cache-dtype` choices that store the KV cache in 8 bits (half of BF16's memory).
FP8_KV_CACHE_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                                 "fp8_per_token_head"})

# --- precision capability rules: the one home ---------------------------------------------
# Which accelerator runs BF16, FP8 natively (W8A8), FP8 weight-only (W8A16) and an FP8 KV
# cache in vLLM. The operator's GPU catalogue (slo_operator.hardware.catalogue, and through
# it the engine planner) and the in-pod probe and launcher all call the functions below, so
# what the operator plans and sizes is what the launcher keeps. Each rule quotes its line in
# tests/fixtures/hardware/vllm-facts.md (copied from vllm-project/vllm at the commit named).
#
# NVIDIA, by compute capability:
# - BF16 from 8.0: vllm/platforms/cuda.py@002db495 supported_dtypes (">=80 [bf16, fp16,
#   fp32]") and check_if_supports_dtype ("Bfloat16 is only supported on GPUs with compute
#   capability of at least 8.0 ... --dtype=half").
CUDA_BF16_MIN_CC = (8, 0)
# - FP8 W8A8 from 8.9: cuda.py@002db495 "supports_fp8() -> cls.has_device_capability(89)";
#   docs/features/quantization/fp8.md@02446076 "FP8 computation is supported on NVIDIA GPUs
#   with compute capability >= 8.9 (Ada Lovelace, Hopper)"; llm_compressor/fp8.md@263eecff
#   "Ada Lovelace, Hopper, and Blackwell GPUs are supported for W8A8".
CUDA_FP8_NATIVE_MIN_CC = (8, 9)
# - FP8 weight-only from 8.0, through FP8 Marlin: quantization/fp8.py@0071b24b
#   "Fp8Config.get_min_capability() -> 80" and "self.use_marlin = (not
#   current_platform.has_device_capability(89) ...)"; fp8.md@02446076 "Turing/Ampere GPUs
#   are supported for W8A16 (weight-only FP8) utilizing Marlin kernels"; the quantization
#   table (supported_hardware.md@5ee0c1f9) marks "Marlin (GPTQ/AWQ/FP8)" on Ampere. The same
#   page says FP8 models "will run on compute capability >= 7.5 (Turing)", but the code
#   refuses the method below 8.0 (get_min_capability -> 80): the code wins.
CUDA_FP8_WEIGHT_ONLY_MIN_CC = (8, 0)
# - An FP8 KV cache as a default only where FP8 is native: on Ampere Triton has no fp8e4nv
#   (vLLM issue #26431, open) and FP8 KV failed with chunked prefill (#7714, PR #7185).
#   vLLM still accepts the dtype on any CUDA GPU (quantized_kvcache.md@0609ba15:
#   fp8_e4m3 "Supported on CUDA 11.8+ and ROCm", fp8_e5m2 "Supported on CUDA 11.8+"), so an
#   explicit request below 8.9 is a known risk, not a refusal.
CUDA_FP8_KV_CACHE_MIN_CC = (8, 9)
CUDA_FP8_KV_CACHE_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2"})
# vLLM's minimum NVIDIA GPU (docs/getting_started/installation/gpu: "compute capability 7.0
# or higher"); nothing is supported below it.
CUDA_MIN_CC = (7, 0)
# `--quantization` methods with the weight-only Marlin fallback below 8.9 (fp8.py's
# use_marlin; the other FP8 methods need native FP8).
FP8_MARLIN_METHODS = frozenset({"fp8"})
#
# AMD, by gfx target (vllm/platforms/rocm.py@001eda31):
# - FP8 on gfx94x, gfx95x, gfx12 only: "supports_fp8(): gfx94/gfx95/gfx12" (so not MI210 or
#   MI250X, gfx90a); gfx94x stores float8_e4m3fnuz: "is_fp8_fnuz(): 'gfx94'".
ROCM_FP8_GFX = ("gfx94", "gfx95", "gfx12")
ROCM_FP8_FNUZ_GFX = ("gfx94",)
# - No weight-only fallback: fp8.py@0071b24b "# Disable marlin for rocm".
# - BF16: rocm.py's check_if_supports_dtype is the CUDA one (has_device_capability(80)) on
#   the capability it derives from the gfx target, "get_device_capability from gcn arch
#   (gfx90a->(9,0), gfx942->(9,4))" (vllm-facts.md; gpus.csv MI250X: "vLLM maps
#   gfx90a->capability 9.0, passes bf16 check"). Every target vLLM parses has major 9 to 12
#   (it raises outside), so MI200 (gfx90a), MI300 (gfx942), MI350 (gfx950), RDNA3/4 (gfx11,
#   gfx12) run BF16; an unknown or missing target is not assumed to (FP16).
ROCM_BF16_MIN_CAPABILITY = (8, 0)
# - KV cache: fp8 / fp8_e4m3 (quantized_kvcache.md: e4m3 "CUDA 11.8+ and ROCm"; e5m2 is
#   CUDA-only), on the FP8 targets only.
ROCM_FP8_KV_CACHE_DTYPES = frozenset({"fp8", "fp8_e4m3"})
# - FP8 methods ROCm accepts: rocm.py@001eda31 supported_quantization ("fp8", "fbgemm_fp8";
#   Platform.verify_quantization refuses the rest).
ROCM_FP8_METHODS = frozenset({"fp8", "fbgemm_fp8"})
#
# Intel Gaudi, by generation: BF16 on every generation; FP8 only through Intel Neural
# Compressor with a calibration file (supported_hardware.md@01129ffb: Intel Gaudi "INC
# (W8A8) ✅", "FP8 (W8A8) ❌"; docs/features/quantization/inc.md: "--quantization inc
# --kv-cache-dtype fp8_inc"), on Gaudi 2 and Gaudi 3. No --quantization fp8 there.
GAUDI_FP8_GENERATIONS = ("gaudi2", "gaudi3")
GAUDI_FP8_QUANT_METHOD = "inc"
GAUDI_FP8_KV_CACHE_DTYPES = frozenset({"fp8_inc"})
# Gaudi board and marketing names per generation (the catalogue's labels and aliases).
_GAUDI_NAMES = {
    "gaudi2": ("GAUDI2", "HL225"),
    "gaudi3": ("GAUDI3", "HL325", "HL328", "HL338"),
}


@dataclass(frozen=True)
class PrecisionSupport:
    """What vLLM runs on one accelerator.

    ``fp8_compute``: FP8 weights and activations (W8A8; on Gaudi through INC only).
    ``fp8_weight_only``: FP8 weights with 16-bit compute (Marlin): memory saved, no speed-up.
    ``fp8_kv_cache``: an FP8 KV cache is a safe default here.
    ``fp8_kv_cache_dtypes``: the FP8 ``--kv-cache-dtype`` values vLLM accepts here at all
    (a superset of the safe ones on CUDA below 8.9).
    ``fp8_methods``: the FP8 ``--quantization`` methods (of ``FP8_QUANT_METHODS``) that load.
    """

    bf16: bool = False
    fp8_compute: bool = False
    fp8_weight_only: bool = False
    fp8_kv_cache: bool = False
    fp8_format: str | None = None          # "e4m3" | "e4m3fnuz"
    fp8_kv_cache_dtypes: frozenset[str] = frozenset()
    fp8_methods: frozenset[str] = frozenset()

    @property
    def fp8_weights(self) -> bool:
        """FP8 weights load at all (natively or weight-only)."""
        return self.fp8_compute or self.fp8_weight_only


NO_PRECISION_SUPPORT = PrecisionSupport()


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """"8.9" -> (8, 9); None for anything else."""
    if not text:
        return None
    major, _, minor = text.strip().partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return None


def cuda_precision(cc: tuple[int, int] | None) -> PrecisionSupport:
    """NVIDIA: the rules above, from the compute capability alone."""
    if cc is None or cc < CUDA_MIN_CC:
        return NO_PRECISION_SUPPORT
    native = cc >= CUDA_FP8_NATIVE_MIN_CC
    weight_only = not native and cc >= CUDA_FP8_WEIGHT_ONLY_MIN_CC
    safe_kv = cc >= CUDA_FP8_KV_CACHE_MIN_CC
    kv_dtypes = CUDA_FP8_KV_CACHE_DTYPES
    if safe_kv:
        # Backend-specific FP8 KV layouts (fp8_ds_mla, fp8_per_token_head) only where FP8
        # is native; never Gaudi's fp8_inc.
        kv_dtypes = FP8_KV_CACHE_DTYPES - GAUDI_FP8_KV_CACHE_DTYPES
    if native:
        methods = FP8_QUANT_METHODS
    elif weight_only:
        methods = FP8_MARLIN_METHODS
    else:
        methods = frozenset()
    return PrecisionSupport(
        bf16=cc >= CUDA_BF16_MIN_CC,
        fp8_compute=native,
        fp8_weight_only=weight_only,
        fp8_kv_cache=safe_kv,
        fp8_format="e4m3" if native else None,
        fp8_kv_cache_dtypes=kv_dtypes,
        fp8_methods=methods,
    )


def normalize_gfx(gfx: str | None) -> str | None:
    """"gfx942:sramecc+:xnack-" (torch's gcnArchName) or "GFX942" -> "gfx942"."""
    if not gfx:
        return None
    g = gfx.strip().lower().split(":")[0]
    return g or None


def rocm_capability(gfx: str | None) -> tuple[int, int] | None:
    """The (major, minor) vLLM derives from a gfx target, or None where vLLM would refuse it.

    vllm/platforms/rocm.py@001eda31 ``_capability_from_gcn_arch``: the digits after "gfx";
    2-3 digits are major + minor (+ stepping), 4 are two-digit major + minor + stepping;
    majors below 9 or above 12 raise.
    """
    g = normalize_gfx(gfx)
    m = re.match(r"gfx(\d+)", g or "")
    if not m:
        return None
    digits = m.group(1)
    if len(digits) in (2, 3):
        major, minor = int(digits[0]), int(digits[1])
    elif len(digits) == 4:
        major, minor = int(digits[:2]), int(digits[2])
    else:
        return None
    if not 9 <= major <= 12:
        return None
    return major, minor


def rocm_precision(gfx: str | None) -> PrecisionSupport:
    """AMD: the rules above, from the gfx target alone."""
    g = normalize_gfx(gfx)
    cap = rocm_capability(g)
    if g is None or cap is None:
        return NO_PRECISION_SUPPORT
    fp8 = g.startswith(ROCM_FP8_GFX)
    return PrecisionSupport(
        bf16=cap >= ROCM_BF16_MIN_CAPABILITY,
        fp8_compute=fp8,
        fp8_weight_only=False,
        fp8_kv_cache=fp8,
        fp8_format=("e4m3fnuz" if g.startswith(ROCM_FP8_FNUZ_GFX) else "e4m3") if fp8 else None,
        fp8_kv_cache_dtypes=ROCM_FP8_KV_CACHE_DTYPES if fp8 else frozenset(),
        fp8_methods=ROCM_FP8_METHODS if fp8 else frozenset(),
    )


def gaudi_generation(name: str | None) -> str | None:
    """"HL-325L", "Gaudi3", "Intel Gaudi 2" -> "gaudi3" / "gaudi2"; None when unknown."""
    key = re.sub(r"[^A-Z0-9]", "", (name or "").upper())
    key = re.sub(r"^(INTEL|HABANA)+", "", key)
    for generation, names in _GAUDI_NAMES.items():
        if key.startswith(names):
            return generation
    return None


def gaudi_precision(generation: str | None) -> PrecisionSupport:
    """Intel Gaudi: BF16 always; FP8 (through INC) on Gaudi 2 and 3."""
    fp8 = generation in GAUDI_FP8_GENERATIONS
    return PrecisionSupport(
        bf16=True,
        fp8_compute=fp8,
        fp8_weight_only=False,
        fp8_kv_cache=fp8,
        fp8_format="e4m3" if fp8 else None,
        fp8_kv_cache_dtypes=GAUDI_FP8_KV_CACHE_DTYPES if fp8 else frozenset(),
        fp8_methods=frozenset(),
    )


def precision_support(vendor: str, target: str | None) -> PrecisionSupport:
    """The rules for a probed device: ``target`` is the compute capability ("9.0") on
    NVIDIA, the gfx target ("gfx942") on AMD, the generation ("gaudi3") on Intel Gaudi."""
    if vendor == "nvidia":
        return cuda_precision(parse_cc(target))
    if vendor == "amd":
        return rocm_precision(target)
    if vendor == "intel":
        return gaudi_precision(target or None)
    return NO_PRECISION_SUPPORT


# --- what the launcher ran --------------------------------------------------------------------
# The launcher writes ENGINE_INFO_FILE (JSON: argv, planned args, settings, changes); the
# gateway exports it on GATEWAY_METRICS_PATH as two gauge families, so the operator can read
# what each pod really runs from Prometheus, without the pod holding API rights:
#   slo_runtime_engine_info{quantization,kv_cache_dtype,dtype,tensor_parallel_size,
#                           max_num_seqs,max_num_batched_tokens} 1
#   slo_runtime_engine_change{setting,requested,applied,reason} 1   (one per change)
RUNTIME_ENGINE_INFO = "slo_runtime_engine_info"
RUNTIME_ENGINE_CHANGE = "slo_runtime_engine_change"
# The label names are the `vllm serve` destinations (argparse ``dest``) they report.
ENGINE_INFO_LABELS = ("quantization", "kv_cache_dtype", "dtype", "tensor_parallel_size",
                      "max_num_seqs", "max_num_batched_tokens")
ENGINE_CHANGE_LABELS = ("setting", "requested", "applied", "reason")
# `reason` label values of slo_runtime_engine_change (the free text is in the file and
# the launcher's log).
ENGINE_CHANGE_REASONS = {
    "NoFP8": "the GPU cannot load this FP8 --quantization method",
    "FP8NotNative": "FP8 would be weight-only here, and this GPU is not the one the plan "
                    "was made for (SLO_FP8_POLICY=auto)",
    "FP8NotFaster": "this node's profile does not show FP8 faster (SLO_FP8_POLICY=auto)",
    "UnknownQuantization": "the method is not one of this vLLM's quantization methods",
    "NoFP8KVCache": "the GPU has no such FP8 KV-cache dtype",
    "FP8KVCacheRisk": "FP8 KV cache is a known failure on this GPU, which is not the one "
                      "the plan was made for",
    "NoBF16": "the GPU has no BF16",
    "FewerGPUs": "fewer GPUs visible than the tensor-parallel size",
    "GatewayAddress": "vLLM listens where the gateway expects it",
    "UnknownOption": "not an option of this vLLM",
    "InvalidChoice": "not one of the option's choices",
    "MissingValue": "an option without its value",
    "StrayArgument": "a value that follows no option",
}
# vLLM's own names for the same dtype (vllm/config/model.py _STR_DTYPE_TO_TORCH_DTYPE).
_DTYPE_ALIASES = {"half": "float16", "float": "float32"}


def engine_info_path(probe_file: str | None = None) -> str:
    """Where the engine info lives: next to the probe file (one run directory shared by
    the vLLM and gateway containers)."""
    if not probe_file:
        return ENGINE_INFO_FILE
    head, sep, _ = probe_file.rpartition("/")
    return f"{head}{sep}{ENGINE_INFO_FILE_NAME}"


def _human_int(value: str) -> str:
    """"8k" -> "8000", "8K" -> "8192" (vLLM's human_readable_int); else unchanged."""
    v = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT]i?|[kmgt])?", v)
    if not m or not _HUMAN_INT.match(v):
        return value
    number, suffix = m.group(1), m.group(2) or ""
    if not suffix:
        return str(int(float(number)))
    decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    if suffix in decimal:
        return str(int(float(number) * decimal[suffix]))
    return str(int(float(number)) * binary[suffix[0]])


def engine_settings(args: Sequence[str], spec: VllmArgSpec | None = None) -> dict[str, str]:
    """The ENGINE_INFO_LABELS values an argument list sets (flags only, no program name):
    the last occurrence of each option, in any spelling vLLM accepts (``-q``, ``-tp``,
    ``--max_num_seqs``, ``--dtype=half``); absent ones take vLLM's parser default, or "" when
    vLLM has none (it then picks per GPU). ``half``/``float`` read as ``float16``/``float32``
    and human-readable integers as plain ones, so the plan's arguments and the launched
    ones compare as values: the operator applies this to ``EnginePlan.args``."""
    spec = spec or load_vllm_spec()
    options, _ = spec.parse(args)
    out: dict[str, str] = {}
    for dest in ENGINE_INFO_LABELS:
        action = spec.by_dest(dest)
        default = None if action is None else action.default
        out[dest] = "" if default is None else str(default)
    for opt in options:
        dest = opt.action.dest
        if dest in out and opt.nested_key is None and opt.values:
            out[dest] = opt.values[-1]
    out["dtype"] = _DTYPE_ALIASES.get(out["dtype"], out["dtype"])
    for dest in ("max_num_batched_tokens", "max_num_seqs", "tensor_parallel_size"):
        out[dest] = _human_int(out[dest])
    return out


def engine_info_labels(settings: Mapping[str, str]) -> tuple[str, ...]:
    """Label values of RUNTIME_ENGINE_INFO in ENGINE_INFO_LABELS order."""
    return tuple(str(settings.get(k, "")) for k in ENGINE_INFO_LABELS)

# --- the `vllm serve` flag table -----------------------------------------------------------
VLLM_VERSION = "0.32.0"
SERVE_ARGS_FILE = f"serve-args-vllm-{VLLM_VERSION}.json"

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# vLLM's human_readable_int (vllm/utils/argparse_utils.py): plain integers, or a number
# with a decimal (k, m, g, t; also M, G, T in later versions) or binary (K, M, G, T;
# Ki, Mi, Gi, Ti in later versions) suffix. Both spellings are accepted here.
# Decimals only with a decimal suffix; "8.5K" is rejected by both spellings.
_HUMAN_INT = re.compile(r"^\d+(?:\.\d+)?[kmgtMGT]?$|^\d+(?:[KMGT]|Ki|Mi|Gi|Ti)$")
# argparse types whose value must be JSON (vllm/engine/arg_utils.py: parse_dataclass
# and _parse_type wrap json.loads; "loads" is json.loads itself).
_JSON_TYPES = frozenset({"loads", "parse_dataclass", "_parse_type"})
# Options whose value is a config object, so dotted keys may address one field.
_CONFIG_TYPES = frozenset({"parse_dataclass", "_parse_type", "union_dict_and_str"})


@dataclass(frozen=True)
class ArgAction:
    flags: tuple[str, ...]
    dest: str
    type: str | None
    nargs: int | str | None
    choices: tuple[str, ...] | None
    takes_value: bool
    # The parser's default (None where vLLM picks one at run time).
    default: Any = None


@dataclass(frozen=True)
class Problem:
    """One thing wrong in an argument list. ``index`` is the offending token's position;
    ``path`` is set for user input (``spec.engine.extraArgs[i]``)."""

    index: int
    flag: str
    message: str
    path: str | None = None


@dataclass(frozen=True)
class ParsedOption:
    """One option occurrence: tokens ``args[start:end]``."""

    action: ArgAction
    flag: str
    values: tuple[str, ...]
    start: int
    end: int
    # "--compilation-config.mode=3" sets one key of a JSON config option.
    nested_key: str | None = None


def is_option(token: str) -> bool:
    # argparse treats "-1" as a value when the parser has no option that looks like a
    # negative number, which holds for vllm serve.
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


def normalize_flag(flag: str) -> str:
    """vLLM's FlexibleArgumentParser accepts underscores in long options
    (vllm/utils/argparse_utils.py: ``--max_num_seqs`` becomes ``--max-num-seqs``)."""
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


class VllmArgSpec:
    """The captured parser of one vLLM version."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.distribution: str = str(data.get("vllm_distribution", "unknown"))
        self.quantization_methods: tuple[str, ...] = tuple(data["quantization_methods"])
        actions: list[ArgAction] = []
        for raw in data["actions"]:
            choices = raw.get("choices")
            actions.append(
                ArgAction(
                    flags=tuple(raw["flags"]),
                    dest=str(raw["dest"]),
                    type=raw.get("type"),
                    nargs=raw.get("nargs"),
                    choices=(
                        tuple(str(c) for c in choices if c is not None)
                        if choices is not None
                        else None
                    ),
                    takes_value=bool(raw.get("takes_value")),
                    default=raw.get("default"),
                )
            )
        self.actions: tuple[ArgAction, ...] = tuple(actions)
        self._by_flag: dict[str, ArgAction] = {f: a for a in actions for f in a.flags}
        self._by_dest: dict[str, ArgAction] = {a.dest: a for a in actions}

    @classmethod
    def load(cls) -> VllmArgSpec:
        """The spec shipped as package data."""
        return load_vllm_spec()

    def canonical(self, flag: str) -> str | None:
        """The first long spelling of ``flag``'s option, so "-tp" and
        "--tensor-parallel-size" are one setting; None for an unknown flag."""
        action = self.action(flag)
        if action is None:
            return None
        return next((f for f in action.flags if f.startswith("--")), action.flags[0])

    def action(self, flag: str) -> ArgAction | None:
        return self._by_flag.get(normalize_flag(flag))

    def by_dest(self, dest: str) -> ArgAction | None:
        return self._by_dest.get(dest)

    # ------------------------------------------------------------------ parsing

    def parse(self, args: Sequence[str]) -> tuple[list[ParsedOption], list[Problem]]:
        """Split an argument list into options, the way argparse would."""
        options: list[ParsedOption] = []
        problems: list[Problem] = []
        n = len(args)
        i = 0
        while i < n:
            tok = args[i]
            if not is_option(tok):
                problems.append(
                    Problem(i, "", f"value {tok!r} does not follow an option that takes one")
                )
                i += 1
                continue
            inline: str | None = None
            flag = tok
            # argparse splits "--flag=value" and "-f=value" alike (_parse_optional).
            if "=" in tok:
                flag, inline = tok.split("=", 1)
            special = self._parse_special(args, i, flag, inline)
            if special is not None:
                opt, problem, i = special
                if opt is not None:
                    options.append(opt)
                if problem is not None:
                    problems.append(problem)
                continue
            flag = normalize_flag(flag)
            action = self._by_flag.get(flag)
            if action is None:
                problems.append(Problem(i, flag, f"{flag} is not an option of vllm serve"))
                i += 1
                # Skip its values so they are not reported again as stray values.
                while i < n and not is_option(args[i]):
                    i += 1
                continue
            values, j, msg = self._take_values(action, args, i, inline)
            if msg is not None:
                problems.append(Problem(i, flag, msg))
            options.append(ParsedOption(action, flag, tuple(values), i, j))
            i = j
        return options, problems

    def _parse_special(
        self, args: Sequence[str], i: int, flag: str, inline: str | None
    ) -> tuple[ParsedOption | None, Problem | None, int] | None:
        """Forms vLLM's FlexibleArgumentParser rewrites before argparse sees them
        (vllm/utils/argparse_utils.py parse_args): ``-O3``, ``-O=3``, ``-O 3`` for
        ``--optimization-level``, and dotted keys such as ``--compilation-config.mode=3``
        or ``-cc.mode 3`` that set one key of a JSON config option."""
        n = len(args)
        level = self._by_dest.get("optimization_level")
        if level is not None and flag.startswith("-O") and "." not in flag:
            if flag == "-O" and inline is None:
                if i + 1 < n and args[i + 1] in {"0", "1", "2", "3"}:
                    return ParsedOption(level, "-O", (args[i + 1],), i, i + 2), None, i + 2
                return None, Problem(i, "-O", "-O expects an optimization level 0-3"), i + 1
            value = inline if flag == "-O" and inline is not None else flag[2:]
            return ParsedOption(level, "-O", (value,), i, i + 1), None, i + 1
        if "." not in flag:
            return None
        base, key = flag.split(".", 1)
        base = normalize_flag(base)
        action = self._by_flag.get(base)
        if action is None or not action.takes_value or action.type not in _CONFIG_TYPES:
            j = i + 1
            while j < n and not is_option(args[j]):
                j += 1
            return None, Problem(i, flag, f"{base} is not a config option of vllm serve"), j
        if inline is not None:
            return ParsedOption(action, flag, (inline,), i, i + 1, key), None, i + 1
        if i + 1 < n and not is_option(args[i + 1]):
            return ParsedOption(action, flag, (args[i + 1],), i, i + 2, key), None, i + 2
        return None, Problem(i, flag, f"{flag} expects one value"), i + 1

    @staticmethod
    def _take_values(
        action: ArgAction, args: Sequence[str], i: int, inline: str | None
    ) -> tuple[list[str], int, str | None]:
        n = len(args)
        flag = args[i].split("=", 1)[0]
        nargs = action.nargs
        if nargs == 0 or not action.takes_value:
            if inline is not None:
                return [], i + 1, f"{flag} takes no value"
            return [], i + 1, None
        if inline is not None:
            return [inline], i + 1, None
        j = i + 1
        if nargs is None or nargs == 1:
            if j < n and not is_option(args[j]):
                return [args[j]], j + 1, None
            return [], j, f"{flag} expects one value"
        if nargs == "?":
            if j < n and not is_option(args[j]):
                return [args[j]], j + 1, None
            return [], j, None
        if nargs in ("+", "*"):
            values = []
            while j < n and not is_option(args[j]):
                values.append(args[j])
                j += 1
            if nargs == "+" and not values:
                return [], j, f"{flag} expects one or more values"
            return values, j, None
        if isinstance(nargs, int):
            values = list(args[j : j + nargs])
            if len(values) < nargs or any(is_option(v) for v in values):
                return [], j, f"{flag} expects {nargs} values"
            return values, j + nargs, None
        return [], j, f"{flag} has an unsupported nargs {nargs!r} in the captured spec"

    # --------------------------------------------------------------- validation

    def check_value(self, action: ArgAction, value: str) -> str | None:
        """Why ``value`` would be rejected by this option, or None."""
        flag = action.flags[0]
        if action.dest == "quantization":
            if value not in self.quantization_methods:
                return (
                    f"{flag} {value!r} is not a quantization method of {self.distribution} "
                    f"(known: {', '.join(self.quantization_methods)})"
                )
            return None
        if action.choices is not None:
            candidate = value.lower() if action.type == "<lambda>" else value
            if candidate not in action.choices:
                return f"{flag} {value!r} is not one of {', '.join(action.choices)}"
        t = action.type
        try:
            if t == "int":
                int(value)
            elif t == "float":
                float(value)
            elif t == "human_readable_int":
                if not _HUMAN_INT.match(value.strip()):
                    raise ValueError(value)
            elif t == "human_readable_int_or_auto":
                if (
                    value.strip().lower() != "auto"
                    and value.strip() != "-1"
                    and not (_HUMAN_INT.match(value.strip()))
                ):
                    raise ValueError(value)
            elif t in _JSON_TYPES:
                json.loads(value)
        except ValueError:
            kind = {
                "int": "an integer",
                "float": "a number",
                "human_readable_int": "an integer such as 8192 or 8k",
                "human_readable_int_or_auto": "an integer such as 32768 or 32k, or auto",
            }.get(t or "", "JSON")
            return f"{flag} {value!r} is not {kind}"
        return None

    def validate(self, args: Sequence[str]) -> list[Problem]:
        """Every problem vLLM's parser would raise for these options (flags only, no
        leading ``vllm serve``)."""
        options, problems = self.parse(args)
        for opt in options:
            if opt.nested_key is not None:
                continue  # one key of a config object; vLLM validates it on load
            for k, value in enumerate(opt.values):
                msg = self.check_value(opt.action, value)
                if msg is not None:
                    index = opt.start if opt.end == opt.start + 1 else opt.start + 1 + k
                    problems.append(Problem(index, opt.flag, msg))
        problems.sort(key=lambda p: p.index)
        return problems

    def validate_extra_args(
        self, extra: Sequence[str], path: str = "spec.engine.extraArgs"
    ) -> list[Problem]:
        """``validate`` for user input; each problem names ``path[i]``."""
        return [
            Problem(p.index, p.flag, p.message, f"{path}[{p.index}]") for p in self.validate(extra)
        ]


@cache
def load_vllm_spec() -> VllmArgSpec:
    """vLLM 0.32.0's `vllm serve` parser as shipped in ``slo_runtime/data``."""
    text = (resources.files("slo_runtime") / "data" / SERVE_ARGS_FILE).read_text("utf-8")
    return VllmArgSpec(json.loads(text))
