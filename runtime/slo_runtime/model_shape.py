"""Model shapes read from a Hugging Face ``config.json``.

Pure data and arithmetic (no torch): the profiler builds a decoder from a
:class:`ModelShape`, and the byte/FLOP counts here give the physical floor a measured
step time is compared with.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

# Shapes shipped with the runtime so a profile can run on a node without network access.
BUILTIN_SHAPES = {
    "llama-3.1-8b": "llama-3.1-8b.config.json",
    "llama-3.1-70b": "llama-3.1-70b.config.json",
}


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @classmethod
    def from_config(cls, cfg: dict[str, Any], name: str = "model") -> ModelShape:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        arch = cfg.get("architectures") or []
        # Only dense decoder blocks of the Llama family are modelled; an MoE or
        # sliding-window model would be profiled wrongly, so refuse it loudly.
        if cfg.get("num_local_experts") or cfg.get("num_experts"):
            raise ValueError(f"{name}: mixture-of-experts configs are not supported")
        if arch and not any(a.endswith("ForCausalLM") for a in arch):
            raise ValueError(f"{name}: not a causal LM config ({arch})")
        return cls(
            name=name,
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            vocab_size=int(cfg["vocab_size"]),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
        )

    @classmethod
    def load(cls, ref: str) -> ModelShape:
        """A built-in shape name (``llama-3.1-8b``) or a path to a ``config.json``."""
        if ref in BUILTIN_SHAPES:
            text = (
                resources.files("slo_runtime") / "data" / BUILTIN_SHAPES[ref]
            ).read_text()
            return cls.from_config(json.loads(text), name=ref)
        path = Path(ref)
        name = path.parent.name if path.name == "config.json" else path.stem
        return cls.from_config(json.loads(path.read_text()), name=name)

    def with_layers(self, num_layers: int) -> ModelShape:
        d = asdict(self)
        d["num_layers"] = num_layers
        return ModelShape(**d)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # --- sizes -------------------------------------------------------------------
    @property
    def qkv_out(self) -> int:
        return (self.num_heads + 2 * self.num_kv_heads) * self.head_dim

    def layer_params(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        attn = h * self.qkv_out + self.num_heads * self.head_dim * h
        mlp = 3 * h * i
        return attn + mlp + 2 * h

    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size + self.hidden_size

    def weight_bytes(self, weight_bytes_per_param: float, layers: int | None = None) -> float:
        """Bytes read per decode step: layer weights at the given width, LM head in BF16."""
        n = self.num_layers if layers is None else layers
        return n * self.layer_params() * weight_bytes_per_param + self.lm_head_params() * 2

    def kv_bytes(self, batch: int, ctx: int, kv_bytes_per_elem: float = 2.0,
                 layers: int | None = None) -> float:
        n = self.num_layers if layers is None else layers
        return n * 2 * batch * ctx * self.num_kv_heads * self.head_dim * kv_bytes_per_elem

    def decode_floor_ms(self, batch: int, ctx: int, bandwidth_gbps: float,
                        weight_bytes_per_param: float = 2.0) -> float:
        """Memory-bandwidth floor of one decode step (weights + KV read once)."""
        total = self.weight_bytes(weight_bytes_per_param) + self.kv_bytes(batch, ctx)
        return total / (bandwidth_gbps * 1e9) * 1e3
