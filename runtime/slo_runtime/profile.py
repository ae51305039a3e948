"""GPU micro-benchmarks that matter for serving, written as a profile JSON.

Measures device-copy bandwidth, BF16 and FP8 matrix rates, and for each model shape the
decode step (CUDA graphs on GPU) and prefill time at several sizes, in BF16 and FP8.
The analysis (knee, FP8 verdicts) lives in :mod:`slo_runtime.profile_math`; the format
is described in ``docs/profile-format.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from slo_runtime import profile_math as pm
from slo_runtime.decoder import FP8, Decoder, new_kv_cache, scaled_mm_available
from slo_runtime.model_shape import ModelShape
from slo_runtime.probe import GpuInfo, probe

log = logging.getLogger("slo_runtime.profile")
FORMAT = "slo-runtime-profile/v1"


@dataclass
class ModelPlan:
    shape: str                                  # built-in name or path to config.json
    ctx: int = 1024
    batches: list[int] = field(default_factory=lambda: [1, 8, 16, 32, 64, 128, 256])
    prefill_tokens: list[int] = field(default_factory=lambda: [128, 512, 2048, 8192])
    modes: list[str] = field(default_factory=lambda: ["bf16", "fp8"])
    # Per mode: layers to build; None = as many as fit (all when the model fits).
    layers: dict[str, int | None] = field(default_factory=dict)
    name: str | None = None                     # output file stem

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelPlan:
        return cls(**d)


@dataclass
class Settings:
    device: str = "cuda"
    use_graphs: bool = True
    compile: bool = True
    decode_iters: int = 30
    prefill_iters: int = 10
    warmup: int = 3
    gemm_n: int = 8192
    copy_bytes: int = 2**32


# --- timing -----------------------------------------------------------------------
class Timer:
    """Median wall time of a callable, with CUDA events on a GPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def median_ms(self, fn: Callable[[], object], iters: int, warmup: int) -> float:
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(iters):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def measure_copy_gbps(device: torch.device, nbytes: int, timer: Timer) -> float:
    n = nbytes // 2
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = timer.median_ms(lambda: dst.copy_(src), iters=10, warmup=2)
    return 2 * nbytes / (ms * 1e-3) / 1e9   # bytes read plus bytes written


def measure_gemm_tflops(device: torch.device, n: int, timer: Timer,
                        fp8: bool = False) -> float | None:
    # Three operand sets rotate so repeated products do not run out of cache.
    sets = [(torch.randn(n, n, device=device, dtype=torch.bfloat16),
             torch.randn(n, n, device=device, dtype=torch.bfloat16)) for _ in range(3)]
    if fp8:
        if not scaled_mm_available(device):
            return None
        one = torch.ones((), device=device)
        qsets = [(a.to(FP8), b.to(FP8)) for a, b in sets]
        it = iter(range(10**9))

        def run() -> object:
            a, b = qsets[next(it) % 3]
            return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                    out_dtype=torch.bfloat16, use_fast_accum=True)
    else:
        it = iter(range(10**9))

        def run() -> object:
            a, b = sets[next(it) % 3]
            return a @ b
    ms = timer.median_ms(run, iters=10, warmup=3)
    return 2 * n**3 / (ms * 1e-3) / 1e12


# --- per model --------------------------------------------------------------------
def _decode_ms(dec: Decoder, ks: list[torch.Tensor], vs: list[torch.Tensor], batch: int,
               ctx: int, st: Settings, timer: Timer) -> tuple[float, float]:
    """Median decode-step time and LM-head time at ``batch`` sequences of ``ctx`` tokens."""
    dev = dec.device
    x = torch.randn(batch, dec.shape.hidden_size, device=dev, dtype=dec.dtype)
    hx = torch.randn(batch, dec.shape.hidden_size, device=dev, dtype=dec.dtype)
    if dev.type == "cuda" and st.use_graphs:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # Eager runs first: compile the fused kernels outside the capture.
            for _ in range(2):
                dec.decode(x, ks, vs, ctx)
                dec.lm_head_step(hx)
        torch.cuda.current_stream().wait_stream(side)
        g, gh = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dec.decode(x, ks, vs, ctx)
        with torch.cuda.graph(gh):
            dec.lm_head_step(hx)
        step = timer.median_ms(g.replay, st.decode_iters, st.warmup)
        head = timer.median_ms(gh.replay, st.decode_iters, st.warmup)
        del g, gh
        return step, head
    step = timer.median_ms(lambda: dec.decode(x, ks, vs, ctx), st.decode_iters, st.warmup)
    head = timer.median_ms(lambda: dec.lm_head_step(hx), st.decode_iters, st.warmup)
    return step, head


def _prefill_ms(dec: Decoder, tokens: int, st: Settings, timer: Timer) -> float:
    """Median prefill time of one ``tokens``-long sequence.

    On a GPU the prefill is replayed from a CUDA graph too: eager Python launches
    ~15 kernels per layer, and at a few hundred tokens that host time, not the GPU,
    would be measured (engines capture or batch prefill kernels likewise).
    """
    x = torch.randn(tokens, dec.shape.hidden_size, device=dec.device, dtype=dec.dtype)
    if dec.device.type == "cuda" and st.use_graphs:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                dec.prefill(x)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dec.prefill(x)
        ms = timer.median_ms(g.replay, st.prefill_iters, 2)
        del g
        return ms
    return timer.median_ms(lambda: dec.prefill(x), st.prefill_iters, 2)


def _free_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    return float("inf")


def profile_model(plan: ModelPlan, st: Settings, timer: Timer,
                  fp8_supported: bool) -> dict[str, Any]:
    dev = torch.device(st.device)
    full = ModelShape.load(plan.shape)
    dtype = torch.bfloat16
    out: dict[str, Any] = {
        "shape": full.name, "model": full.as_dict(), "layers": full.num_layers,
        "ctx": plan.ctx, "fp8_static_scales": True, "cuda_graphs": dev.type == "cuda"
        and st.use_graphs, "layers_measured": {}, "decode_ms": {}, "prefill_ms": {},
        "decode_ms_measured": {}, "lm_head_ms": {}, "notes": [],
    }
    max_b = max(plan.batches)
    modes = [m for m in plan.modes if m == "bf16" or fp8_supported]
    if "fp8" in plan.modes and not fp8_supported:
        out["notes"].append("FP8 not measured: no FP8 matrix product on this device")
    ks = vs = None
    kv_layers = 0
    for mode in modes:
        wbytes = 2.0 if mode == "bf16" else 1.0
        layers = plan.layers.get(mode)
        if layers is None:
            layers = pm.layers_that_fit(
                layer_bytes=full.layer_params() * wbytes,
                fixed_bytes=full.lm_head_params() * 2 + 2**30,
                kv_bytes_per_layer=full.kv_bytes(max_b, plan.ctx + 1, layers=1),
                total_layers=full.num_layers, free_bytes=_free_bytes(dev)
                + (0 if ks is None else 2 * sum(t.numel() * t.element_size() for t in ks)),
            )
        shape = full.with_layers(layers)
        out["layers_measured"][mode] = layers
        if layers < full.num_layers:
            out["notes"].append(
                f"{mode}: {layers} of {full.num_layers} layers fit on one device; "
                "decode and prefill scaled per layer to the full depth (LM head timed apart)")
        if ks is None or kv_layers < layers:
            ks = vs = None
            _empty_cache(dev)
            ks, vs = new_kv_cache(shape, max_b, plan.ctx, device=dev, dtype=dtype)
            kv_layers = layers
        log.info("Building %s %s with %d layers", full.name, mode, layers)
        dec = Decoder.build(shape, device=dev, dtype=dtype, fp8=mode == "fp8",
                            compile=st.compile and dev.type == "cuda")
        with torch.inference_mode():
            cx = torch.randn(min(8, max_b), shape.hidden_size, device=dev, dtype=dtype)
            dec.calibrate(cx, ks, vs, plan.ctx)
            dms, raw, heads = {}, {}, {}
            for b in sorted(plan.batches):
                step, head = _decode_ms(dec, ks, vs, b, plan.ctx, st, timer)
                raw[str(b)] = step
                heads[str(b)] = head
                dms[str(b)] = pm.scale_layers(step, head, layers, full.num_layers)
                log.info("Decode %s %s b=%d: %.3f ms", full.name, mode, b, dms[str(b)])
            pms = {}
            for t in sorted(plan.prefill_tokens):
                ms = _prefill_ms(dec, t, st, timer)
                pms[str(t)] = ms * full.num_layers / layers
                log.info("Prefill %s %s T=%d: %.3f ms", full.name, mode, t, pms[str(t)])
        out["decode_ms"][mode] = dms
        out["decode_ms_measured"][mode] = raw
        out["lm_head_ms"][mode] = heads
        out["prefill_ms"][mode] = pms
        del dec
        _empty_cache(dev)
    ks = vs = None
    _empty_cache(dev)
    return analyse(out, fp8_supported)


def analyse(out: dict[str, Any], fp8_supported: bool) -> dict[str, Any]:
    """Add knees and FP8 verdicts to a profile's measured tables (pure)."""
    out["knee_batch"] = {m: pm.knee_batch(t) for m, t in out["decode_ms"].items()}
    d, p = out["decode_ms"], out["prefill_ms"]
    if "bf16" in d and "fp8" in d:
        dsp = pm.fp8_speedup(d["bf16"], d["fp8"])
        psp = pm.fp8_speedup(p.get("bf16", {}), p.get("fp8", {}))
        out["fp8_speedup"] = {"decode": dsp, "prefill": psp}
        out["fp8_faster"] = pm.fp8_faster(dsp)
        out["fp8_faster_prefill"] = pm.fp8_faster(psp)
        out["fp8_recommended"] = pm.fp8_recommended(out["fp8_faster"], fp8_supported)
    else:
        out["fp8_recommended"] = False
    return out


def _empty_cache(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def hardware_section(gpu: GpuInfo) -> dict[str, Any]:
    return {"product": gpu.product, "vendor": gpu.vendor, "cc": gpu.compute_capability,
            "memory_mib": gpu.memory_mib, "count": gpu.count, "driver": gpu.driver,
            "source": gpu.source}


def run(plans: list[ModelPlan], st: Settings, out_dir: Path | None = None,
        gpu: GpuInfo | None = None) -> list[dict[str, Any]]:
    """Measure the device once, then each model; write one JSON per model."""
    dev = torch.device(st.device)
    timer = Timer(dev)
    torch._dynamo.config.cache_size_limit = 64
    if gpu is None:
        gpu = probe() if dev.type == "cuda" else GpuInfo("none", "cpu", "", 0, 0, "cpu")
    fp8_ok = scaled_mm_available(dev) and (dev.type != "cuda" or gpu.fp8_native)
    common: dict[str, Any] = {
        "format": FORMAT,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": gpu.product or dev.type,
        "cc": [int(x) for x in gpu.compute_capability.split(".")]
        if gpu.vendor == "nvidia" else gpu.compute_capability,
        "torch": torch.__version__,
        "hardware": hardware_section(gpu),
    }
    with torch.inference_mode():
        common["hbm_copy_GBps"] = measure_copy_gbps(dev, st.copy_bytes, timer)
        common["bf16_gemm_TFLOPs"] = measure_gemm_tflops(dev, st.gemm_n, timer)
        common["fp8_gemm_TFLOPs"] = measure_gemm_tflops(dev, st.gemm_n, timer, fp8=True) \
            if fp8_ok else None
    common["fp8_supported"] = fp8_ok
    log.info("Measured device: %s", json.dumps(common))
    results = []
    for plan in plans:
        prof = {**common, **profile_model(plan, st, timer, fp8_ok)}
        prof["decode_floor_ms"] = {
            "bf16": {b: round(ModelShape.load(plan.shape).decode_floor_ms(
                int(b), plan.ctx, common["hbm_copy_GBps"], 2.0), 3)
                for b in prof["decode_ms"].get("bf16", {})},
        }
        results.append(prof)
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            stem = plan.name or f"{prof['shape']}-ctx{plan.ctx}"
            (out_dir / f"{stem}.json").write_text(json.dumps(prof, indent=1) + "\n")
    return results
