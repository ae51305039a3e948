"""Node profiles measured by ``slo-runtime profile``, as the engine rules use them.

FP8 weights pay only with fused kernels, so a GPU that computes FP8 natively is not
proof that FP8 is faster for a model on it (``tests/fixtures/calibration``). Where a profile
of the same GPU product and a similar model size exists, its ``fp8_recommended`` decides
what ``precision: auto`` means. The profile format is ``docs/profile-format.md``.

Pure apart from reading profile files; the operator ships its node profiles as package
data (``slo_operator/data/profiles``, the one copy code reads; ``make profiles
PROFILE_RUN=DIR`` writes them from a measurement run, see profiles/README.md) and can be
pointed at more (``--profiles-dir``, ``SLO_PROFILES_DIR``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from slo_operator.hardware import resolve_product

# A profile speaks for models within this factor of its own parameter count.
SIZE_TOLERANCE = 1.5


@dataclass(frozen=True)
class NodeProfile:
    """One measured node profile: GPU, model shape and size, context, FP8 verdict, knees."""

    source: str
    device: str
    product: str
    shape: str
    params_billion: float
    ctx: int
    fp8_recommended: bool
    knee_batch: Mapping[str, int]


def shape_params_billion(model: Mapping[str, Any]) -> float:
    """Parameter count of a Llama-style decoder from its config (embeddings included)."""
    h = int(model["hidden_size"])
    layers = int(model["num_layers"])
    heads = int(model["num_heads"])
    kv_heads = int(model.get("num_kv_heads", heads))
    head_dim = int(model.get("head_dim", h // heads))
    attention = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
    mlp = 3 * h * int(model["intermediate_size"])
    embeddings = 2 * int(model["vocab_size"]) * h
    return (layers * (attention + mlp) + embeddings) / 1e9


def parse_profile(data: object, source: str) -> NodeProfile | None:
    """Read one profile document; None if it is no node profile or names an unknown GPU."""
    if not isinstance(data, Mapping):
        return None
    if not str(data.get("format")).startswith("slo-runtime-profile/"):
        return None
    if "device" not in data or "model" not in data:
        return None
    resolved = resolve_product(str(data["device"]))
    if resolved.hardware is None:
        return None
    return NodeProfile(
        source=source,
        device=str(data["device"]),
        product=resolved.hardware.product,
        shape=str(data.get("shape", "")),
        params_billion=shape_params_billion(data["model"]),
        ctx=int(data.get("ctx", 0)),
        fp8_recommended=bool(data.get("fp8_recommended", False)),
        knee_batch={str(k): int(v) for k, v in (data.get("knee_batch") or {}).items()},
    )


def _parsed(texts: Iterable[tuple[str, str]]) -> list[tuple[str, str, NodeProfile]]:
    """(name, text, profile) of the node profiles among ``texts``, by name."""
    out = []
    for name, text in sorted(texts):
        try:
            profile = parse_profile(json.loads(text), name)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a broken file must not stop the operator; it is simply not used
        if profile is not None:
            out.append((name, text, profile))
    return out


def _directory_texts(directory: Path) -> list[tuple[str, str]]:
    return [(p.name, p.read_text()) for p in sorted(directory.glob("*.json"))]


def load_profiles(directory: Path | None = None) -> tuple[NodeProfile, ...]:
    """Load the node profiles from ``directory``, or the ones shipped with the operator."""
    if directory is None:
        root = resources.files("slo_operator") / "data" / "profiles"
        texts = [(p.name, p.read_text()) for p in root.iterdir() if p.name.endswith(".json")]
    else:
        texts = _directory_texts(directory)
    return tuple(profile for _, _, profile in _parsed(texts))


def profile_files(directory: Path) -> dict[str, str]:
    """Select the node-profile files of ``directory`` (name -> text), as shipped.

    These are the files ``load_profiles`` uses; probes, plans, logs and broken files
    beside them are left out. ``slo-operator profiles`` writes this set as package data.
    """
    return {name: text for name, text, _ in _parsed(_directory_texts(directory))}


def match_profiles(
    product: str, params_billion: float, profiles: Sequence[NodeProfile]
) -> tuple[NodeProfile, ...]:
    """Find the profiles of this GPU product at the model size nearest ``params_billion``.

    Only sizes within ``SIZE_TOLERANCE`` count; one profile per measured context length;
    empty when none applies.
    """
    scored = []
    for p in profiles:
        if p.product != product or params_billion <= 0 or p.params_billion <= 0:
            continue
        distance = abs(math.log(params_billion / p.params_billion))
        if distance <= math.log(SIZE_TOLERANCE):
            scored.append((round(distance, 6), p))
    if not scored:
        return ()
    nearest = min(d for d, _ in scored)
    return tuple(sorted((p for d, p in scored if d == nearest), key=lambda p: p.ctx))


def fp8_verdict(matches: Sequence[NodeProfile]) -> bool | None:
    """None without a profile; else FP8 only if every matching profile found it faster."""
    if not matches:
        return None
    return all(p.fp8_recommended for p in matches)
