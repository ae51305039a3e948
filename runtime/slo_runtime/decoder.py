"""A Llama-shaped decoder with random weights, for timing serving steps.

It computes what a dense Llama block computes (RMSNorm, fused QKV with RoPE, grouped
query attention over a KV cache, SwiGLU MLP, LM head) so that its step time is what the
weights, the KV cache and the matrix units cost on this GPU. There is no tokenizer,
sampler or scheduler: the result is a floor for an engine such as vLLM.

FP8 mode follows what makes FP8 pay on Hopper-class GPUs: E4M3 weights with a
per-tensor scale, a *static* per-tensor activation scale found by one calibration pass,
and the activation quantization fused into the preceding elementwise kernel (RMSNorm or
SiLU-and-multiply) by ``torch.compile``. Computing activation scales at run time with
separate small kernels makes FP8 slower than BF16 (see ``tests/fixtures/calibration``). The LM
head stays in BF16, like vLLM's FP8 checkpoints.

torch is imported by this module; the rest of ``slo_runtime`` does not need it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from slo_runtime.model_shape import ModelShape

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)


# --- elementwise pieces (fused by torch.compile when enabled) -------------------------
def _rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()
    return y.to(x.dtype)


def _rmsnorm_quant(x: torch.Tensor, w: torch.Tensor, eps: float,
                   inv_scale: torch.Tensor) -> torch.Tensor:
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()
    return (y * inv_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _silu_mul(gu: torch.Tensor) -> torch.Tensor:
    g, u = gu.chunk(2, dim=-1)
    return (F.silu(g.float()) * u.float()).to(gu.dtype)


def _silu_mul_quant(gu: torch.Tensor, inv_scale: torch.Tensor) -> torch.Tensor:
    g, u = gu.chunk(2, dim=-1)
    y = F.silu(g.float()) * u.float()
    return (y * inv_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _quant(x: torch.Tensor, inv_scale: torch.Tensor) -> torch.Tensor:
    return (x.float() * inv_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _add_rmsnorm(h: torch.Tensor, delta: torch.Tensor, w: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    # Residual add fused with the next norm, as engines do: one pass over the hidden state.
    s = h + delta
    return s, _rmsnorm(s, w, eps)


def _add_rmsnorm_quant(h: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float,
                       inv_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = h + delta
    return s, _rmsnorm_quant(s, w, eps, inv_scale)


def _rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Rotate-half RoPE as in Llama; cos/sin broadcast over heads.
    d = t.shape[-1]
    t1, t2 = t[..., : d // 2], t[..., d // 2:]
    return t * cos + torch.cat([-t2, t1], -1) * sin


def _rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
             sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _rope(q, cos, sin), _rope(k, cos, sin)


@dataclass
class Kernels:
    rmsnorm: Callable[..., torch.Tensor] = _rmsnorm
    rmsnorm_quant: Callable[..., torch.Tensor] = _rmsnorm_quant
    silu_mul: Callable[..., torch.Tensor] = _silu_mul
    silu_mul_quant: Callable[..., torch.Tensor] = _silu_mul_quant
    quant: Callable[..., torch.Tensor] = _quant
    add_rmsnorm: Callable[..., tuple[torch.Tensor, torch.Tensor]] = _add_rmsnorm
    add_rmsnorm_quant: Callable[..., tuple[torch.Tensor, torch.Tensor]] = _add_rmsnorm_quant
    rope_qk: Callable[..., tuple[torch.Tensor, torch.Tensor]] = _rope_qk

    @classmethod
    def compiled(cls) -> Kernels:
        def c(fn: Callable[..., object]) -> Callable[..., object]:
            # Shapes vary with batch and token count; one dynamic graph per kernel
            # avoids a recompile for every size measured.
            return torch.compile(fn, dynamic=True)

        return cls(c(_rmsnorm), c(_rmsnorm_quant), c(_silu_mul), c(_silu_mul_quant), c(_quant),
                   c(_add_rmsnorm), c(_add_rmsnorm_quant), c(_rope_qk))


def scaled_mm_available(device: torch.device) -> bool:
    """Whether ``torch._scaled_mm`` runs FP8 x FP8 here (Hopper/Ada on CUDA)."""
    try:
        a = torch.ones(16, 16, device=device).to(FP8)
        one = torch.ones((), device=device)
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return True
    except (RuntimeError, NotImplementedError, AttributeError):
        return False


# --- linear layers --------------------------------------------------------------------
@dataclass
class Linear:
    weight: torch.Tensor            # [out, in]; BF16 or E4M3
    w_scale: torch.Tensor | None = None   # dequant scale of an FP8 weight
    x_scale: torch.Tensor | None = None   # static dequant scale of the FP8 input
    x_inv_scale: torch.Tensor | None = None
    calib_amax: float = 0.0
    native_fp8: bool = True

    @property
    def fp8(self) -> bool:
        return self.weight.dtype == FP8

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fp8:
            return x @ self.weight.t()
        assert x.dtype == FP8, "FP8 linear expects an input quantized by the fused kernel"
        if self.native_fp8:
            return torch._scaled_mm(
                x, self.weight.t(), scale_a=self.x_scale, scale_b=self.w_scale,
                out_dtype=torch.bfloat16, use_fast_accum=True,
            )
        # Reference path for CPUs without FP8 GEMM: same quantized operands, dequantized.
        xs = x.to(torch.bfloat16) * self.x_scale.to(torch.bfloat16)
        ws = self.weight.to(torch.bfloat16) * self.w_scale.to(torch.bfloat16)
        return xs @ ws.t()

    def observe(self, x: torch.Tensor) -> None:
        """Calibration: remember the largest input magnitude seen."""
        self.calib_amax = max(self.calib_amax, float(x.abs().max()))

    def freeze_scale(self) -> None:
        amax = self.calib_amax or 1.0
        dev = self.weight.device
        self.x_scale = torch.tensor(amax / FP8_MAX, dtype=torch.float32, device=dev)
        self.x_inv_scale = torch.tensor(FP8_MAX / amax, dtype=torch.float32, device=dev)


def _random_weight(out_f: int, in_f: int, *, device: torch.device, dtype: torch.dtype,
                   fp8: bool, gen: torch.Generator, native_fp8: bool) -> Linear:
    # std 1/sqrt(in) keeps activations O(1) through the stack, like a trained model's.
    w = torch.randn(out_f, in_f, device=device, dtype=dtype, generator=gen)
    w.mul_(1.0 / math.sqrt(in_f))
    if not fp8:
        return Linear(w)
    amax = float(w.abs().max())
    scale = amax / FP8_MAX
    wq = (w.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8) if w.numel() < 2**26 else \
        _chunked_quant(w, scale)
    del w
    return Linear(wq, w_scale=torch.tensor(scale, dtype=torch.float32, device=device),
                  native_fp8=native_fp8)


def _chunked_quant(w: torch.Tensor, scale: float) -> torch.Tensor:
    # Quantize row blocks so a 70B-class matrix never needs a float32 copy of itself.
    out = torch.empty(w.shape, dtype=FP8, device=w.device)
    step = max(1, (2**26) // w.shape[1])
    for r in range(0, w.shape[0], step):
        out[r:r + step] = (w[r:r + step].float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return out


@dataclass
class Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    qkv: Linear
    o: Linear
    gate_up: Linear
    down: Linear


@dataclass
class Decoder:
    shape: ModelShape
    layers: list[Layer]
    final_norm: torch.Tensor
    lm_head: Linear
    fp8: bool
    dtype: torch.dtype
    device: torch.device
    kernels: Kernels = field(default_factory=Kernels)
    calibrating: bool = False

    # --- construction -----------------------------------------------------------
    @classmethod
    def build(cls, shape: ModelShape, *, device: str | torch.device = "cpu",
              dtype: torch.dtype = torch.bfloat16, fp8: bool = False,
              compile: bool = False, seed: int = 0) -> Decoder:
        dev = torch.device(device)
        gen = torch.Generator(device=dev).manual_seed(seed)
        native = scaled_mm_available(dev) if fp8 else True
        h, i = shape.hidden_size, shape.intermediate_size
        layers = []
        for _ in range(shape.num_layers):
            def lin(o_: int, i_: int) -> Linear:
                return _random_weight(o_, i_, device=dev, dtype=dtype, fp8=fp8, gen=gen,
                                      native_fp8=native)
            layers.append(Layer(
                ln1=1.0 + 0.1 * torch.randn(h, device=dev, dtype=dtype, generator=gen),
                ln2=1.0 + 0.1 * torch.randn(h, device=dev, dtype=dtype, generator=gen),
                qkv=lin(shape.qkv_out, h),
                o=lin(h, shape.num_heads * shape.head_dim),
                gate_up=lin(2 * i, h),
                down=lin(h, i),
            ))
        head = _random_weight(shape.vocab_size, h, device=dev, dtype=dtype, fp8=False,
                              gen=gen, native_fp8=True)
        dec = cls(shape, layers, torch.ones(h, device=dev, dtype=dtype), head, fp8, dtype, dev,
                  Kernels.compiled() if compile else Kernels())
        return dec

    def linears(self) -> list[Linear]:
        return [lin for ly in self.layers for lin in (ly.qkv, ly.o, ly.gate_up, ly.down)]

    def calibrate(self, x: torch.Tensor, k_cache: list[torch.Tensor],
                  v_cache: list[torch.Tensor], pos: int) -> None:
        """One eager step that records activation ranges and fixes static FP8 scales."""
        if not self.fp8:
            return
        self.calibrating = True
        try:
            for lin in self.linears():
                lin.x_scale = torch.ones((), device=self.device)
                lin.x_inv_scale = torch.ones((), device=self.device)
            self.decode(x, k_cache, v_cache, pos)
        finally:
            self.calibrating = False
        for lin in self.linears():
            lin.freeze_scale()

    # --- pieces -----------------------------------------------------------------
    def _cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.shape.head_dim
        inv = 1.0 / (self.shape.rope_theta ** (
            torch.arange(0, d, 2, device=positions.device, dtype=torch.float32) / d))
        ang = positions.float()[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], -1)
        return ang.cos().to(self.dtype), ang.sin().to(self.dtype)

    def _norm_in(self, x: torch.Tensor, w: torch.Tensor, lin: Linear) -> torch.Tensor:
        eps = self.shape.rms_norm_eps
        if not lin.fp8:
            return self.kernels.rmsnorm(x, w, eps)
        if self.calibrating:
            y = _rmsnorm(x, w, eps)
            lin.observe(y)
            return _quant(y, lin.x_inv_scale)
        return self.kernels.rmsnorm_quant(x, w, eps, lin.x_inv_scale)

    def _add_norm_in(self, h: torch.Tensor, delta: torch.Tensor, w: torch.Tensor,
                     lin: Linear) -> tuple[torch.Tensor, torch.Tensor]:
        eps = self.shape.rms_norm_eps
        if not lin.fp8:
            return self.kernels.add_rmsnorm(h, delta, w, eps)
        if self.calibrating:
            s, y = _add_rmsnorm(h, delta, w, eps)
            lin.observe(y)
            return s, _quant(y, lin.x_inv_scale)
        return self.kernels.add_rmsnorm_quant(h, delta, w, eps, lin.x_inv_scale)

    def _act_in(self, gu: torch.Tensor, lin: Linear) -> torch.Tensor:
        if not lin.fp8:
            return self.kernels.silu_mul(gu)
        if self.calibrating:
            y = _silu_mul(gu)
            lin.observe(y)
            return _quant(y, lin.x_inv_scale)
        return self.kernels.silu_mul_quant(gu, lin.x_inv_scale)

    def _plain_in(self, x: torch.Tensor, lin: Linear) -> torch.Tensor:
        if not lin.fp8:
            return x
        if self.calibrating:
            lin.observe(x)
            return _quant(x, lin.x_inv_scale)
        return self.kernels.quant(x, lin.x_inv_scale)

    def _blocks(self, h: torch.Tensor, attend: Callable[[int, Layer, torch.Tensor],
                                                        torch.Tensor]) -> torch.Tensor:
        """Run all layers; ``attend(i, layer, qkv)`` returns the attention output rows."""
        layers = self.layers
        n = self._norm_in(h, layers[0].ln1, layers[0].qkv)
        for li, ly in enumerate(layers):
            attn = attend(li, ly, ly.qkv(n))
            o = ly.o(self._plain_in(attn, ly.o))
            h, n = self._add_norm_in(h, o, ly.ln2, ly.gate_up)
            down = ly.down(self._act_in(ly.gate_up(n), ly.down))
            if li + 1 < len(layers):
                nxt = layers[li + 1]
                h, n = self._add_norm_in(h, down, nxt.ln1, nxt.qkv)
            else:
                h = h + down
        return h

    # --- steps ------------------------------------------------------------------
    def decode(self, x: torch.Tensor, k_cache: list[torch.Tensor],
               v_cache: list[torch.Tensor], pos: int) -> torch.Tensor:
        """One decode step for a batch: x [B, hidden] is the new token's embedding.

        The caches are [B', kv_heads, >= pos+1, head_dim] per layer (B' >= B); the new
        key/value is written at ``pos`` and attention reads positions 0..pos.
        """
        s = self.shape
        b = x.shape[0]
        hq, hkv, d = s.num_heads, s.num_kv_heads, s.head_dim
        group = hq // hkv
        cos, sin = self._cos_sin(torch.full((1,), pos, device=x.device, dtype=torch.long))

        def attend(li: int, ly: Layer, qkv: torch.Tensor) -> torch.Tensor:
            q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
            q, k = self.kernels.rope_qk(q.view(b, hq, 1, d), k.view(b, hkv, 1, d), cos, sin)
            k_cache[li][:b, :, pos:pos + 1] = k
            v_cache[li][:b, :, pos:pos + 1] = v.view(b, hkv, 1, d)
            # Grouped-query decode: the `group` query heads that share a KV head become
            # `group` query rows of one attention problem, so no KV copy is needed.
            out = F.scaled_dot_product_attention(
                q.view(b, hkv, group, d), k_cache[li][:b, :, : pos + 1],
                v_cache[li][:b, :, : pos + 1])
            return out.reshape(b, hq * d)

        h = self._blocks(x, attend)
        return self.lm_head(self.kernels.rmsnorm(h, self.final_norm, s.rms_norm_eps))

    def prefill(self, x: torch.Tensor, return_kv: bool = False
                ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Prefill one sequence: x [T, hidden]; returns last-token logits (and K/V)."""
        s = self.shape
        t = x.shape[0]
        hq, hkv, d = s.num_heads, s.num_kv_heads, s.head_dim
        cos, sin = self._cos_sin(torch.arange(t, device=x.device))
        kvs: list[tuple[torch.Tensor, torch.Tensor]] = []

        def attend(li: int, ly: Layer, qkv: torch.Tensor) -> torch.Tensor:
            q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
            q, k = self.kernels.rope_qk(q.view(t, hq, d).transpose(0, 1),
                                        k.view(t, hkv, d).transpose(0, 1), cos, sin)
            v = v.view(t, hkv, d).transpose(0, 1)
            if return_kv:
                kvs.append((k, v))
            out = F.scaled_dot_product_attention(
                q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=True,
                enable_gqa=hq != hkv)
            return out[0].transpose(0, 1).reshape(t, hq * d)

        h = self._blocks(x, attend)
        # Like an engine, only the last position's logits are computed during prefill.
        last = self.kernels.rmsnorm(h[-1:], self.final_norm, s.rms_norm_eps)
        return self.lm_head(last), kvs

    def lm_head_step(self, h: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head alone, timed apart to scale partial-depth runs."""
        return self.lm_head(self.kernels.rmsnorm(h, self.final_norm, self.shape.rms_norm_eps))


def new_kv_cache(shape: ModelShape, batch: int, ctx: int, *, device: str | torch.device,
                 dtype: torch.dtype, seed: int = 1) -> tuple[list[torch.Tensor],
                                                             list[torch.Tensor]]:
    """Random (never zero) K/V caches of ``ctx + 1`` positions for each layer."""
    gen = torch.Generator(device=torch.device(device)).manual_seed(seed)
    dims = (batch, shape.num_kv_heads, ctx + 1, shape.head_dim)
    ks = [torch.randn(dims, device=device, dtype=dtype, generator=gen)
          for _ in range(shape.num_layers)]
    vs = [torch.randn(dims, device=device, dtype=dtype, generator=gen)
          for _ in range(shape.num_layers)]
    return ks, vs
