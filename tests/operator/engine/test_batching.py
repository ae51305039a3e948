"""Batching rules at their boundaries: batch limit, chunked-prefill budget, CUDA-graph sizes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slo_operator.engine import (
    BatchBounds,
    ChunkBudget,
    EnginePrefs,
    Note,
    cudagraph_capture_sizes,
    default_max_num_batched_tokens,
)
from slo_operator.engine.batching import choose_batching
from slo_operator.hardware import HardwareClass
from tests.support.golden import Golden
from tests.support.hardware import hw

H100 = hw("H100")
GAUDI = hw("Gaudi3")
SMALL = (1, 2, 4)  # below the first multiple of 8


@pytest.mark.parametrize(
    ("max_seqs", "want"),
    [
        (1, (1,)),
        (2, (1, 2)),
        (3, (1, 2, 3)),
        (4, (1, 2, 4)),
        (6, (1, 2, 4, 6)),
        (7, (1, 2, 4, 7)),
        (8, (1, 2, 4, 8)),
        (9, (1, 2, 4, 8, 9)),
        (16, (1, 2, 4, 8, 16)),
        (17, (1, 2, 4, 8, 16, 17)),
        (64, (*SMALL, *range(8, 65, 8))),
        (248, (*SMALL, *range(8, 249, 8))),
        (255, (*SMALL, *range(8, 256, 8), 255)),
        (256, (*SMALL, *range(8, 256, 8), 256)),
        (257, (*SMALL, *range(8, 256, 8), 256, 257)),
        (272, (*SMALL, *range(8, 256, 8), 256, 272)),
        (300, (*SMALL, *range(8, 256, 8), 256, 272, 288, 300)),
    ],
)
def test_cudagraph_capture_sizes_follow_vllms_pattern_up_to_the_limit(
    max_seqs: int, want: tuple[int, ...]
) -> None:
    assert cudagraph_capture_sizes(max_seqs) == want


@pytest.mark.parametrize("max_seqs", [1, 6, 64, 300, 4096])
def test_every_batch_limit_pads_to_a_captured_graph(max_seqs: int) -> None:
    sizes = cudagraph_capture_sizes(max_seqs)
    assert list(sizes) == sorted(set(sizes))
    assert max(sizes) == max_seqs
    for limit in range(1, max_seqs + 1):
        assert any(s >= limit for s in sizes)


@pytest.mark.parametrize(
    ("product", "memory", "want"),
    [
        pytest.param("H100", None, 8192, id="hopper-large-gpu"),
        pytest.param("H200", None, 8192, id="h200-large-gpu"),
        pytest.param("B200", None, 8192, id="blackwell-large-gpu"),
        pytest.param("MI300X", None, 8192, id="mi300x-large-gpu"),
        pytest.param("H100", 70.0, 8192, id="70-gib-counts-as-large"),
        pytest.param("H100", 69.99, 2048, id="just-below-70-gib"),
        pytest.param("A100-80GB", None, 2048, id="a100-excluded-by-name-vllm-pr-17885"),
        pytest.param("L40S", None, 2048, id="l40s-48-gib"),
        pytest.param("L4", None, 2048, id="l4-24-gib"),
    ],
)
def test_default_budget_by_gpu_memory_and_name(product: str, memory: float | None,
                                               want: int) -> None:
    hardware = hw(product) if memory is None else replace(hw(product), memory_gib=memory)
    assert default_max_num_batched_tokens(hardware) == want


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


def test_defaults_start_at_the_policy_maximum(golden: Golden) -> None:
    (seqs, mnbt, graphs), notes = _choose(H100, BatchBounds(min_seqs=1, max_seqs=16))
    assert (seqs, mnbt, graphs) == (16, 8192, (1, 2, 4, 8, 16))
    assert [(n.field, n.reason) for n in notes] == [
        ("spec.engine.maxNumBatchedTokens", "ChunkedPrefillBudget")]
    golden.check("engine", "batching-budget-note-large-gpu", notes[0].message)


@pytest.mark.parametrize(
    ("initial", "want_seqs", "want_clamped"),
    [
        pytest.param(8, 8, False, id="at-the-minimum"),
        pytest.param(64, 64, False, id="inside-the-range"),
        pytest.param(128, 128, False, id="at-the-maximum"),
        pytest.param(7, 8, True, id="just-below-raised"),
        pytest.param(1, 8, True, id="far-below-raised"),
        pytest.param(2, 8, True, id="two-raised"),
        pytest.param(129, 128, True, id="just-above-lowered"),
        pytest.param(999, 128, True, id="far-above-lowered"),
    ],
)
def test_initial_limit_clamped_only_outside_the_policy_range(
    initial: int, want_seqs: int, want_clamped: bool, golden: Golden,
    request: pytest.FixtureRequest,
) -> None:
    batch = BatchBounds(min_seqs=8, max_seqs=128, initial=initial)
    (seqs, _, graphs), notes = _choose(H100, batch)
    assert seqs == want_seqs
    # Graphs always reach the policy's maximum, not the current limit.
    assert graphs[-1] == 128
    clamp = [n for n in notes if n.reason == "InitialBatchClamped"]
    assert [n.field for n in clamp] == (["spec.batching.maxBatch"] if want_clamped else [])
    if want_clamped:
        golden.check("engine", f"batching-clamped-{request.node.callspec.id}", clamp[0].message)


def test_user_budget_is_kept_as_given_without_a_note() -> None:
    prefs = EnginePrefs(max_num_batched_tokens=100)
    (seqs, mnbt, _), notes = _choose(H100, BatchBounds(max_seqs=256), prefs)
    # Not raised to the batch limit here: the overrides step refuses it later.
    assert (seqs, mnbt) == (256, 100)
    assert notes == []


@pytest.mark.parametrize(
    ("max_seqs", "want_budget"),
    [
        pytest.param(2047, 2048, id="below-the-default"),
        pytest.param(2048, 2048, id="at-the-default"),
        pytest.param(2049, 2049, id="above-the-default-raised"),
        pytest.param(4096, 4096, id="largest-batch-raised"),
    ],
)
def test_default_budget_never_below_the_batch_limit(max_seqs: int, want_budget: int,
                                                    golden: Golden,
                                                    request: pytest.FixtureRequest) -> None:
    (_, mnbt, _), notes = _choose(hw("L4"), BatchBounds(max_seqs=max_seqs))
    assert mnbt == want_budget
    assert [n.reason for n in notes] == ["ChunkedPrefillBudget"]
    golden.check("engine", f"batching-budget-{request.node.callspec.id}", notes[0].message)


def test_gaudi_gets_no_cuda_graphs(golden: Golden) -> None:
    (seqs, mnbt, graphs), notes = _choose(GAUDI, BatchBounds(max_seqs=64))
    assert (seqs, mnbt, graphs) == (64, 8192, ())
    assert (notes[-1].field, notes[-1].reason) == ("cudagraphCaptureSizes", "NotCUDA")
    golden.check("engine", "batching-gaudi-no-cuda-graphs", notes[-1].message)


def _chunk(tokens: int, fits: bool = True) -> ChunkBudget:
    # Figures of the reconciler's plan for an 8B model on H100 (FP8) at 50 ms and 28 ms.
    if not fits:
        return ChunkBudget(tokens=tokens, itl_target_ms=28.0, step_ms=22.5, decode_batch=210,
                           fits=False, basis="seed step times for H100-SXM-80GB fp8")
    return ChunkBudget(tokens=tokens, itl_target_ms=50.0, step_ms=39.9, decode_batch=183,
                       fits=fits, basis="seed step times for H100-SXM-80GB fp8")


def test_budget_for_the_itl_objective_replaces_vllms_default(golden: Golden) -> None:
    (seqs, mnbt, _), notes = _choose(H100, BatchBounds(max_seqs=256, chunk=_chunk(1792)))
    assert (seqs, mnbt) == (256, 1792)
    assert [(n.field, n.reason) for n in notes] == [
        ("spec.engine.maxNumBatchedTokens", "ChunkedPrefillBudget")]
    golden.check("engine", "batching-budget-for-itl", notes[0].message)


def test_user_budget_wins_over_the_objectives(golden: Golden) -> None:
    prefs = EnginePrefs(max_num_batched_tokens=4096)
    (_, mnbt, _), notes = _choose(H100, BatchBounds(max_seqs=256, chunk=_chunk(1792)), prefs)
    assert mnbt == 4096
    assert notes == []


def test_objective_budget_never_below_the_batch_limit() -> None:
    # The reconciler plans with --max-num-seqs as the floor; the engine holds it anyway.
    (seqs, mnbt, _), _ = _choose(H100, BatchBounds(max_seqs=1024, chunk=_chunk(512)))
    assert (seqs, mnbt) == (1024, 1024)


def test_objective_met_by_the_default_says_so(golden: Golden) -> None:
    (_, mnbt, _), notes = _choose(H100, BatchBounds(max_seqs=256, chunk=_chunk(8192)))
    assert mnbt == 8192
    assert [n.reason for n in notes] == ["ChunkedPrefillBudget"]
    golden.check("engine", "batching-budget-for-itl-default-suffices", notes[0].message)


def test_objective_out_of_reach_of_the_budget_is_reported(golden: Golden) -> None:
    (_, mnbt, _), notes = _choose(H100, BatchBounds(max_seqs=256, chunk=_chunk(512, False)))
    assert mnbt == 512
    assert [(n.field, n.reason) for n in notes] == [
        ("spec.engine.maxNumBatchedTokens", "ChunkedPrefillBudget"),
        ("spec.objectives.interTokenLatencyMs", "ITLOutOfChunkReach")]
    golden.check("engine", "batching-budget-for-itl-smallest", notes[0].message)
    golden.check("engine", "batching-itl-out-of-chunk-reach", notes[1].message)


def test_a_budget_lowered_for_jitter_names_the_bound_and_the_reading(golden: Golden) -> None:
    chunk = ChunkBudget(tokens=1024, itl_target_ms=None, step_ms=31.2, decode_batch=183,
                        basis="seed step times for H100-SXM-80GB fp8", jitter_max=0.4,
                        jitter_measured=0.9)
    (_, mnbt, _), notes = _choose(H100, BatchBounds(max_seqs=256, chunk=chunk))
    assert mnbt == 1024
    assert [(n.field, n.reason) for n in notes] == [
        ("spec.engine.maxNumBatchedTokens", "ChunkedPrefillBudget")]
    golden.check("engine", "batching-budget-for-jitter", notes[0].message)
    # A jitter cap under an inter-token budget that is lower still: the objective's note.
    (_, _, _), itl_notes = _choose(H100, BatchBounds(max_seqs=256, chunk=_chunk(1792)))
    assert "interTokenLatencyMs 50 ms" in itl_notes[0].message
    # Without an inter-token objective or a cap, the budget is vLLM's default and says so.
    plain = ChunkBudget(tokens=8192, itl_target_ms=None, step_ms=60.0, decode_batch=183)
    (_, mnbt, _), notes = _choose(H100, BatchBounds(max_seqs=256, chunk=plain))
    assert mnbt == 8192 and "default" in notes[0].message
