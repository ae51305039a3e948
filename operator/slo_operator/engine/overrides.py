"""User overrides: ``spec.engine.extraArgs`` merged into the generated options.

The user's options win over generated ones with the same destination (each reported as a
``UserOverride``), except the options the operator owns. The effective values follow the
overrides, each checked by the rule of the spec field it stands for, and every error names
the extra argument the user wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slo_operator.engine.batching import MAX_GRAPH_SIZE
from slo_operator.engine.fields import F_EXTRA, F_MAX_BATCH, F_MNBT, F_TP
from slo_operator.engine.limits import TooLarge, checked, parse_count
from slo_operator.engine.parallel import heads_ok, heads_text, no_tp_reason
from slo_operator.engine.precision import kv_cache_bytes, quant_bytes
from slo_operator.engine.types import EngineError, GpuSharing, ModelFacts, Note
from slo_operator.engine.vllm_args import ParsedOption, VllmArgSpec
from slo_operator.hardware import HardwareClass

# Options the operator owns; extra args may not set them (value: what to use instead).
_GATEWAY = "leave it out: the in-pod gateway serves the pod's port and reaches vLLM on loopback"
RESERVED_DESTS = {
    "model": "use spec.model.name",
    "host": _GATEWAY,
    "port": _GATEWAY,
    "uds": _GATEWAY,
    "headless": _GATEWAY,
}

@dataclass(frozen=True)
class EngineSettings:
    """The values of the options the operator generates, as planned or after overrides."""

    dtype: str
    quantization: str | None
    weight_bytes: float  # per parameter
    kv_cache_dtype: str
    kv_bytes: float  # per element
    tensor_parallel_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int | None
    cudagraph_capture_sizes: tuple[int, ...]


def merge_extra(
    spec: VllmArgSpec, generated: list[str], extra: Sequence[str]
) -> tuple[list[str], list[Note], dict[str, ParsedOption]]:
    """Merge the user's extra args into the generated options; the user's win.

    Returns (merged args, one ``UserOverride`` note per generated option the user
    replaced, the user's options by destination). Raises ``EngineError`` for extra args
    vLLM would reject and for options the operator owns (``RESERVED_DESTS``).
    """
    problems = spec.validate_extra_args(extra, F_EXTRA)
    if problems:
        p = problems[0]
        others = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise EngineError(p.path or F_EXTRA, p.message + others)
    user_opts, _ = spec.parse(extra)
    user: dict[str, ParsedOption] = {}
    for uo in user_opts:
        owner = RESERVED_DESTS.get(uo.action.dest)
        if owner is not None:
            raise EngineError(
                f"{F_EXTRA}[{uo.start}]", f"{uo.flag} is set by the operator; {owner}"
            )
        user[uo.action.dest] = uo  # argparse keeps the last occurrence
    gen_opts, gen_problems = spec.parse(generated)
    if gen_problems:  # pragma: no cover - a bug in this module, caught by the tests
        raise AssertionError(f"generated args do not parse: {gen_problems}")
    merged: list[str] = []
    conflicts: list[Note] = []
    for go in gen_opts:
        override = user.get(go.action.dest)
        if override is None:
            merged.extend(generated[go.start : go.end])
            continue
        conflicts.append(
            Note(
                f"{F_EXTRA}[{override.start}]",
                "UserOverride",
                f"{' '.join(extra[override.start : override.end])} replaces the generated "
                f"{' '.join(generated[go.start : go.end])}",
            )
        )
    merged.extend(extra)
    return merged, conflicts, user



def apply_overrides(
    planned: EngineSettings,
    user: Mapping[str, ParsedOption],
    *,
    gpus_per_node: int,
    model: ModelFacts,
    sharing: GpuSharing,
    hw: HardwareClass,
    notes: list[Note],
) -> EngineSettings:
    """Return the effective settings after the user's options (by destination) override them.

    Each overriding value goes through the rule of the spec field it stands for; every
    error names the extra argument the user wrote. Also refuses a batched-token budget
    below the batch limit, which vLLM rejects, whoever set either.
    """

    def user_value(dest: str) -> str | None:
        uo = user.get(dest)
        return uo.values[-1] if uo is not None and uo.values else None

    def where(dest: str) -> str:
        return f"{F_EXTRA}[{user[dest].start}]"

    def user_checked(dest: str) -> int | float | None:
        raw = user_value(dest)
        if raw is None:
            return None
        return checked(dest, raw, where(dest), user[dest].flag)

    max_num_seqs = planned.max_num_seqs
    mnbt = planned.max_num_batched_tokens
    gmu = planned.gpu_memory_utilization
    quantization = planned.quantization
    bpp = planned.weight_bytes
    kv_dtype = planned.kv_cache_dtype
    kv_bytes = planned.kv_bytes
    graphs = planned.cudagraph_capture_sizes

    tp_source, mns_source, mnbt_source = F_TP, F_MAX_BATCH, F_MNBT
    if (v := user_checked("tensor_parallel_size")) is not None:
        tp, tp_source = int(v), where("tensor_parallel_size")
        if tp > 1 and not sharing.whole:
            raise EngineError(tp_source, f"{tp}: {no_tp_reason(hw, sharing)}")
        if tp > gpus_per_node:
            raise EngineError(tp_source, f"{tp} exceeds the {gpus_per_node} GPUs per replica "
                              "of this pool")
        if not heads_ok(model, tp):
            raise EngineError(tp_source, f"{tp} does not divide the model's {heads_text(model)}")
    else:
        tp = planned.tensor_parallel_size
    if (v := user_checked("max_num_seqs")) is not None:
        max_num_seqs, mns_source = int(v), where("max_num_seqs")
    if (v := user_checked("max_num_batched_tokens")) is not None:
        mnbt, mnbt_source = int(v), where("max_num_batched_tokens")
    if mnbt < max_num_seqs:
        # vllm/config/scheduler.py: max_num_batched_tokens must be >= max_num_seqs.
        blame = mnbt_source if mnbt_source != F_MNBT or mns_source == F_MAX_BATCH else mns_source
        raise EngineError(blame, f"--max-num-batched-tokens {mnbt} is below --max-num-seqs "
                          f"{max_num_seqs}; vLLM rejects that")
    max_model_len = planned.max_model_len
    raw_len = user_value("max_model_len")
    if raw_len is not None and raw_len.strip().lower() not in ("auto", "-1"):
        max_model_len = int(checked("max_model_len", raw_len, where("max_model_len"),
                                    user["max_model_len"].flag))
    elif raw_len is not None:
        max_model_len = None  # vLLM's own maximum for the model
    if (v := user_checked("gpu_memory_utilization")) is not None:
        gmu = float(v)
        if sharing.shared and gmu > 1.0 / sharing.replicas:
            notes.append(Note(where("gpu_memory_utilization"), "SharedGPUMemory",
                              f"{gmu:g} of the GPU's memory is more than a "
                              f"1/{sharing.replicas} share; other pods on the same GPU may "
                              "fail to start"))
    dtype = user_value("dtype") or planned.dtype
    if "quantization" in user:
        quantization = user_value("quantization")
        bpp = quant_bytes(quantization, 2.0 if model.quantized_checkpoint is None else bpp)
    if "kv_cache_dtype" in user:
        kv_dtype = user_value("kv_cache_dtype") or kv_dtype
        kv_bytes = kv_cache_bytes(kv_dtype)
    if "cudagraph_capture_sizes" in user:
        sizes = []
        for token in user["cudagraph_capture_sizes"].values:
            try:
                size = parse_count(token)
            except TooLarge:
                size = None
            if size is None or not 1 <= size <= MAX_GRAPH_SIZE:
                raise EngineError(where("cudagraph_capture_sizes"),
                                  f"--cudagraph-capture-sizes {token}: not an integer from 1 "
                                  f"to {MAX_GRAPH_SIZE}")
            sizes.append(size)
        graphs = tuple(sorted(set(sizes)))
    for dest in ("pipeline_parallel_size", "data_parallel_size"):
        given = user_value(dest)
        if given is not None and given.strip() != "1":
            # Each multiplies the GPUs one pod needs; the operator plans and requests
            # GPUs for tensor parallelism only.
            raise EngineError(where(dest), f"{user[dest].flag} {given}: only 1 is supported; "
                              f"set {F_TP} (one pod per replica, GPUs = tensor parallel)")
    return EngineSettings(
        dtype=dtype,
        quantization=quantization,
        weight_bytes=bpp,
        kv_cache_dtype=kv_dtype,
        kv_bytes=kv_bytes,
        tensor_parallel_size=tp,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        gpu_memory_utilization=gmu,
        max_model_len=max_model_len,
        cudagraph_capture_sizes=graphs,
    )
