"""Batching: the batch limit, the chunked-prefill budget and the CUDA-graph sizes.

``--max-num-seqs`` is the policy's ``maxBatch`` (``BatchBounds.max_seqs``) unless
``BatchBounds.initial`` is set; the reconciler sets it only for ``batching.mode: restart``,
to the controller's current limit, and it is then clamped into ``[minBatch, maxBatch]``
with an ``InitialBatchClamped`` note. So in ``live`` and ``off`` mode the flag is pinned
to ``maxBatch`` and the gateway enforces the live limit below it. A user's
``--max-num-batched-tokens`` is kept as given; otherwise it is the budget the caller chose
for the policy's inter-token objective (``BatchBounds.chunk``: the reconciler computes it
from the capacity model, which this package does not import), else vLLM's API-server
default for the GPU class; either is raised to at least ``--max-num-seqs``. CUDA graphs
are captured for every batch size up to ``maxBatch`` (none on Intel Gaudi). User
``extraArgs`` may still override any of these later (``engine.overrides``).
"""

from __future__ import annotations

from slo_operator.engine.fields import F_ITL, F_MAX_BATCH, F_MNBT
from slo_operator.engine.types import BatchBounds, ChunkBudget, EnginePrefs, Note
from slo_operator.hardware import HardwareClass

# vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: for the OpenAI API server,
# 8192 batched tokens on GPUs with >= 70 GiB that are not A100 ("For GPUs like H100 and
# MI300x"), else 2048; A100 is excluded because a large budget reduced its throughput
# (vLLM PR #17885). The budget bounds prefill work per step, hence inter-token latency.
LARGE_GPU_GIB = 70.0
BATCHED_TOKENS_LARGE_GPU = 8192
BATCHED_TOKENS_OTHER = 2048

# A CUDA graph per batch size beyond the largest batch ceiling (maxBatch <= 4096) is
# memory spent on batches that never run.
MAX_GRAPH_SIZE = 4096


def cudagraph_capture_sizes(max_seqs: int) -> tuple[int, ...]:
    """Batch sizes to capture CUDA graphs for, up to and including ``max_seqs``.

    Same pattern as vLLM's default (vllm/config/vllm.py _set_cudagraph_sizes: 1, 2, 4,
    multiples of 8 below 256, then multiples of 16), but it always reaches ``max_seqs``
    so every batch limit the controller may choose is padded to a captured graph instead
    of falling back to eager decode. Passed as ``--cudagraph-capture-sizes`` (type int,
    nargs "+" in the vLLM 0.32.0 serve-args capture).
    """
    sizes = {s for s in (1, 2, 4) if s <= max_seqs}
    sizes.update(range(8, min(256, max_seqs + 1), 8))
    sizes.update(range(256, max_seqs + 1, 16))
    sizes.add(max_seqs)
    return tuple(sorted(sizes))


def default_max_num_batched_tokens(hw: HardwareClass) -> int:
    """vLLM's API-server default chunked-prefill budget for a GPU class."""
    if hw.memory_gib >= LARGE_GPU_GIB and not hw.product.upper().startswith("A100"):
        return BATCHED_TOKENS_LARGE_GPU
    return BATCHED_TOKENS_OTHER


def choose_batching(
    hw: HardwareClass, prefs: EnginePrefs, batch: BatchBounds, notes: list[Note]
) -> tuple[int, int, tuple[int, ...]]:
    """Choose the batch limit, batched-token budget and CUDA-graph capture sizes.

    Returns (``--max-num-seqs``, ``--max-num-batched-tokens``, capture sizes); notes say
    why. The budget is not yet checked against the batch limit: user overrides may change
    either.
    """
    max_num_seqs = batch.initial if batch.initial is not None else batch.max_seqs
    if not batch.min_seqs <= max_num_seqs <= batch.max_seqs:
        # The current limit comes from the controller's state and may predate a policy
        # change; clamp it into the policy's range rather than refuse to plan.
        clamped = min(max(max_num_seqs, batch.min_seqs), batch.max_seqs)
        notes.append(
            Note(
                F_MAX_BATCH,
                "InitialBatchClamped",
                f"batch limit {max_num_seqs} is outside [{batch.min_seqs}, {batch.max_seqs}]; "
                f"using {clamped}",
            )
        )
        max_num_seqs = clamped
    if prefs.max_num_batched_tokens is not None:
        mnbt = prefs.max_num_batched_tokens
    elif batch.chunk is not None:
        mnbt = max(batch.chunk.tokens, max_num_seqs)
        notes += chunk_notes(batch.chunk, mnbt, default_max_num_batched_tokens(hw))
    else:
        mnbt = default_max_num_batched_tokens(hw)
        if mnbt < max_num_seqs:
            mnbt = max_num_seqs
        notes.append(
            Note(
                F_MNBT,
                "ChunkedPrefillBudget",
                f"{mnbt} tokens per step: vLLM's API-server default for this GPU class "
                "(get_batch_defaults); it bounds prefill work per step and so inter-token "
                "latency",
            )
        )
    graphs: tuple[int, ...] = ()
    if hw.vendor == "intel":
        # Gaudi runs HPU graphs warmed up per batch bucket by the vllm-gaudi plugin, not
        # CUDA graphs, so no capture sizes are passed.
        notes.append(
            Note(
                "cudagraphCaptureSizes",
                "NotCUDA",
                "no CUDA-graph capture sizes on Intel Gaudi (HPU graphs use batch buckets)",
            )
        )
    else:
        graphs = cudagraph_capture_sizes(batch.max_seqs)
    return max_num_seqs, mnbt, graphs


def chunk_notes(chunk: ChunkBudget, tokens: int, default: int) -> list[Note]:
    """Why the budget is ``tokens``: for the inter-token objective (and, when even the
    smallest budget misses it, that the objective is out of reach of this lever), or for
    the jitter bound where measured jitter lowered it below that."""
    # vLLM counts a decoding sequence's token against the budget too.
    b = chunk.decode_batch
    step = (f"a step filled to the budget ({b} decoding sequences and {max(0, tokens - b)} "
            f"prompt tokens) takes about {chunk.step_ms:.1f} ms ({chunk.basis})")
    if chunk.jitter_max is not None and chunk.jitter_measured is not None:
        return [Note(F_MNBT, "ChunkedPrefillBudget",
                     f"{tokens} tokens per step, below vLLM's default {default} for this GPU "
                     f"class, for throughputCVMax {chunk.jitter_max:g}: jitter measured "
                     f"{chunk.jitter_measured:.2f} with a larger budget; {step}")]
    if chunk.itl_target_ms is None:
        return [Note(F_MNBT, "ChunkedPrefillBudget",
                     f"{tokens} tokens per step: vLLM's API-server default for this GPU "
                     "class (no inter-token objective, jitter within throughputCVMax)")]
    itl = f"interTokenLatencyMs {chunk.itl_target_ms:g} ms"
    if not chunk.fits:
        return [
            Note(F_MNBT, "ChunkedPrefillBudget",
                 f"{tokens} tokens per step, the smallest budget planned, for {itl}: {step}"),
            Note(F_ITL, "ITLOutOfChunkReach",
                 f"{itl} is out of reach of the chunked-prefill budget: even {step}; fewer "
                 "sequences per replica (the in-flight limit, maxBatch), a faster GPU, FP8 "
                 "weights or tensor parallelism shorten the step"),
        ]
    if tokens >= default:
        raised = " (raised to --max-num-seqs)" if tokens > default else ""
        return [Note(F_MNBT, "ChunkedPrefillBudget",
                     f"{tokens} tokens per step: vLLM's API-server default for this GPU "
                     f"class{raised} already keeps {itl}: {step}")]
    return [Note(F_MNBT, "ChunkedPrefillBudget",
                 f"{tokens} tokens per step, below vLLM's default {default} for this GPU "
                 f"class, for {itl}: {step}")]
