"""Batching rules at their boundaries: batch limit, chunked-prefill budget, CUDA-graph sizes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slo_operator.engine import BatchBounds, EngineError, EnginePrefs, ModelFacts, plan_engine
from slo_operator.engine.batching import (
    BATCHED_TOKENS_LARGE_GPU,
    BATCHED_TOKENS_OTHER,
    LARGE_GPU_GIB,
    MAX_GRAPH_SIZE,
    choose_batching,
    cudagraph_capture_sizes,
    default_max_num_batched_tokens,
)
from slo_operator.engine.types import Note
from slo_operator.hardware import HardwareClass
from tests.support.hardware import hw

H100 = hw("H100")
GAUDI = hw("Gaudi3")


def test_constants_follow_vllm_get_batch_defaults() -> None:
    assert LARGE_GPU_GIB == 70.0
    assert BATCHED_TOKENS_LARGE_GPU == 8192
    assert BATCHED_TOKENS_OTHER == 2048
    assert MAX_GRAPH_SIZE == 4096


SMALL = (1, 2, 4)  # below the first multiple of 8


@pytest.mark.parametrize(
    ("max_seqs", "want"),
    [
        (1, (1,)),
        (2, (1, 2)),
        (3, (1, 2, 3)),
        (4, (1, 2, 4)),
        (7, (1, 2, 4, 7)),
        (8, (1, 2, 4, 8)),
        (9, (1, 2, 4, 8, 9)),
        (16, (1, 2, 4, 8, 16)),
        (17, (1, 2, 4, 8, 16, 17)),
        (248, (*SMALL, *range(8, 249, 8))),
        (255, (*SMALL, *range(8, 256, 8), 255)),
        (256, (*SMALL, *range(8, 256, 8), 256)),
        (257, (*SMALL, *range(8, 256, 8), 256, 257)),
        (272, (*SMALL, *range(8, 256, 8), 256, 272)),
        (300, (*SMALL, *range(8, 256, 8), 256, 272, 288, 300)),
    ],
)
def test_cudagraph_capture_sizes_exact(max_seqs: int, want: tuple[int, ...]) -> None:
    assert cudagraph_capture_sizes(max_seqs) == want


@pytest.mark.parametrize(
    ("product", "memory", "want"),
    [
        ("H100", 80.0, 8192),
        ("H100", 70.0, 8192),  # the boundary is inclusive
        ("H100", 69.99, 2048),
        ("A100-80GB", 80.0, 2048),  # excluded by name
        ("L40S", 48.0, 2048),
        ("MI300X", 192.0, 8192),
    ],
)
def test_default_budget_by_memory_and_name(product: str, memory: float, want: int) -> None:
    assert default_max_num_batched_tokens(replace(hw(product), memory_gib=memory)) == want


def test_a100_excluded_whatever_the_case_of_its_product_name() -> None:
    big = replace(hw("A100-80GB"), product="a100-sxm4-80gb")
    assert default_max_num_batched_tokens(big) == 2048
    # Only a name that starts with A100 is excluded.
    assert default_max_num_batched_tokens(replace(big, product="XA100")) == 8192


def _choose(hw_: HardwareClass, batch: BatchBounds, prefs: EnginePrefs | None = None
            ) -> tuple[tuple[int, int, tuple[int, ...]], list[Note]]:
    notes: list[Note] = []
    out = choose_batching(hw_, prefs or EnginePrefs(), batch, notes)
    return out, notes


BUDGET_NOTE = Note(
    "spec.engine.maxNumBatchedTokens",
    "ChunkedPrefillBudget",
    "8192 tokens per step: vLLM's API-server default for this GPU class (get_batch_defaults); "
    "it bounds prefill work per step and so inter-token latency",
)


def test_defaults_start_at_the_policy_maximum() -> None:
    (seqs, mnbt, graphs), notes = _choose(H100, BatchBounds(min_seqs=1, max_seqs=16))
    assert (seqs, mnbt, graphs) == (16, 8192, (1, 2, 4, 8, 16))
    assert notes == [BUDGET_NOTE]


@pytest.mark.parametrize(
    ("initial", "want", "clamped"),
    [(8, 8, False), (128, 128, False), (64, 64, False), (7, 8, True), (129, 128, True),
     (1, 8, True)],
)
def test_initial_limit_clamped_only_outside_the_range(initial: int, want: int,
                                                      clamped: bool) -> None:
    batch = BatchBounds(min_seqs=8, max_seqs=128, initial=initial)
    (seqs, _, graphs), notes = _choose(H100, batch)
    assert seqs == want
    # Graphs always reach the policy's maximum, not the current limit.
    assert graphs[-1] == 128
    clamp_notes = [n for n in notes if n.reason == "InitialBatchClamped"]
    if clamped:
        assert clamp_notes == [
            Note("spec.batching.maxBatch", "InitialBatchClamped",
                 f"batch limit {initial} is outside [8, 128]; using {want}")
        ]
    else:
        assert clamp_notes == []


def test_user_budget_is_kept_as_given_without_a_note() -> None:
    prefs = EnginePrefs(max_num_batched_tokens=100)
    (seqs, mnbt, _), notes = _choose(H100, BatchBounds(max_seqs=256), prefs)
    # Not raised to the batch limit here: the overrides step refuses it later.
    assert (seqs, mnbt) == (256, 100)
    assert notes == []


@pytest.mark.parametrize(("max_seqs", "want"), [(2047, 2048), (2048, 2048), (2049, 2049),
                                                (4096, 4096)])
def test_default_budget_never_below_the_batch_limit(max_seqs: int, want: int) -> None:
    (_, mnbt, _), notes = _choose(hw("L4"), BatchBounds(max_seqs=max_seqs))
    assert mnbt == want
    assert [n.message.split(" ")[0] for n in notes] == [str(want)]


def test_gaudi_gets_no_cuda_graphs() -> None:
    (seqs, mnbt, graphs), notes = _choose(GAUDI, BatchBounds(max_seqs=64))
    assert (seqs, mnbt, graphs) == (64, 8192, ())
    assert notes[-1] == Note(
        "cudagraphCaptureSizes", "NotCUDA",
        "no CUDA-graph capture sizes on Intel Gaudi (HPU graphs use batch buckets)",
    )


def test_graph_size_limit_applies_to_user_capture_sizes() -> None:
    model = ModelFacts(name="m", params_billion=1.0)
    ok = plan_engine(H100, 1, model, EnginePrefs(extra_args=(
        "--cudagraph-capture-sizes", "1", str(MAX_GRAPH_SIZE))), BatchBounds())
    assert ok.cudagraph_capture_sizes == (1, 4096)
    with pytest.raises(EngineError, match="not an integer from 1 to 4096"):
        plan_engine(H100, 1, model, EnginePrefs(extra_args=(
            "--cudagraph-capture-sizes", "4097")), BatchBounds())
