"""Memory arithmetic of the planner, against the figures docs/hardware-and-engine.md (E8) gives."""

from __future__ import annotations

import dataclasses

import pytest

from slo_operator.engine import estimate_layers
from slo_operator.engine.sizing import (
    Fit,
    ModelShape,
    checkpoint_bytes_per_param,
    fit,
    kv_bytes_per_token_per_gpu,
    kv_heads_per_gpu,
    model_shape,
    overhead_gib,
    weight_gib,
)


# Anchors (1B:16, 3B:28, 8B:32, 14B:48, 32B:64, 70B:80, 405B:126) and the points a quarter,
# half and three quarters of the way between them on log(params).
@pytest.mark.parametrize(("params", "want"), [
    (0.1, 16), (0.5, 16), (1.0, 16), (1.3161, 19), (1.7321, 22), (2.2795, 25),
    (3.0, 28), (3.8337, 29), (4.899, 30), (6.2603, 31),
    (8.0, 32), (9.2013, 36), (10.583, 40), (12.1722, 44),
    (14.0, 48), (17.2141, 52), (21.166, 56), (26.0252, 60),
    (32.0, 64), (38.9168, 68), (47.3286, 72), (57.5587, 76),
    (70.0, 80), (108.5644, 92), (168.3746, 103), (261.1354, 114),
    (405.0, 126), (404.99, 126), (1000.0, 126), (1e6, 126),
])
def test_estimate_layers_interpolates_between_llama_anchors(params: float, want: int) -> None:
    got = estimate_layers(params)
    assert got == want
    assert type(got) is int


def test_estimate_layers_grows_with_the_model() -> None:
    sizes = [0.5, 1, 2, 3, 7, 8, 13, 14, 30, 32, 34, 65, 70, 180, 405]
    layers = [estimate_layers(s) for s in sizes]
    assert layers == sorted(layers)


@pytest.mark.parametrize(("given", "want"), [
    ((None, None, None), ModelShape(32, 8, 128, estimated=True)),
    ((40, None, None), ModelShape(40, 8, 128, estimated=True)),
    ((None, 4, None), ModelShape(32, 4, 128, estimated=True)),
    ((None, None, 64), ModelShape(32, 8, 64, estimated=True)),
    ((40, 4, None), ModelShape(40, 4, 128, estimated=True)),
    ((None, 4, 64), ModelShape(32, 4, 64, estimated=True)),
    ((40, None, 64), ModelShape(40, 8, 64, estimated=True)),
    ((40, 4, 64), ModelShape(40, 4, 64, estimated=False)),
])
def test_model_shape_given_facts_win(given: tuple[int | None, int | None, int | None],
                                     want: ModelShape) -> None:
    assert model_shape(8.0, *given) == want


EIGHT_BIT = ["fp8", "fbgemm_fp8", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel",
             "modelopt", "modelopt_mxfp8", "mxfp8", "experts_int8", "int8", "w8a8",
             "compressed-tensors"]
FOUR_BIT = ["awq", "auto_awq", "awq_marlin", "gptq", "auto_gptq", "gptq_marlin", "int4", "mxfp4",
            "gpt_oss_mxfp4", "modelopt_fp4", "nvfp4", "moe_wna16", "bitsandbytes"]


@pytest.mark.parametrize("method", EIGHT_BIT)
def test_eight_bit_checkpoints_take_one_byte(method: str) -> None:
    assert checkpoint_bytes_per_param(method) == 1.0


@pytest.mark.parametrize("method", FOUR_BIT)
def test_four_bit_checkpoints_take_half_a_byte(method: str) -> None:
    assert checkpoint_bytes_per_param(method) == 0.5


@pytest.mark.parametrize(("method", "want"), [
    (" FP8 ", 1.0), ("AWQ", 0.5), ("GPTQ\n", 0.5), ("bf16", None), ("", None), ("fp9", None),
])
def test_checkpoint_method_is_matched_loosely(method: str, want: float | None) -> None:
    assert checkpoint_bytes_per_param(method) == want


@pytest.mark.parametrize(("bytes_per_param", "factor"), [
    (2.0, 1.02), (1.0, 1.10), (0.5, 1.25), (4.0, 1.0), (0.25, 1.0),
])
def test_weight_gib_keeps_embeddings_at_16_bits(bytes_per_param: float, factor: float) -> None:
    assert weight_gib(8.0, bytes_per_param) == pytest.approx(
        8e9 * bytes_per_param * factor / 1024**3, rel=1e-12)


def test_weight_gib_figures_for_8b_and_70b() -> None:
    assert weight_gib(8.0, 2.0) == pytest.approx(15.19918441772461, rel=1e-12)
    assert weight_gib(8.0, 1.0) == pytest.approx(8.195638656616211, rel=1e-12)
    assert weight_gib(8.0, 0.5) == pytest.approx(4.656612873077393, rel=1e-12)
    assert weight_gib(70.0, 2.0) == pytest.approx(70e9 * 2 * 1.02 / 1024**3, rel=1e-12)


@pytest.mark.parametrize(("kv_heads", "tp", "want"), [
    (8, 1, 8), (8, 2, 4), (8, 8, 1), (8, 16, 1), (1, 4, 1), (4, 3, 1), (28, 8, 3),
])
def test_kv_heads_are_replicated_when_tp_exceeds_them(kv_heads: int, tp: int, want: int) -> None:
    assert kv_heads_per_gpu(kv_heads, tp) == want


@pytest.mark.parametrize(("tp", "kv_bytes", "want"), [
    (1, 2.0, 2 * 32 * 8 * 128 * 2),
    (2, 2.0, 2 * 32 * 4 * 128 * 2),
    (16, 1.0, 2 * 32 * 1 * 128 * 1),
    (1, 1.0, 2 * 32 * 8 * 128),
])
def test_kv_bytes_per_token_of_this_ranks_heads(tp: int, kv_bytes: float, want: float) -> None:
    shape = ModelShape(num_layers=32, num_kv_heads=8, head_dim=128, estimated=False)
    assert kv_bytes_per_token_per_gpu(shape, tp, kv_bytes) == want


@pytest.mark.parametrize(("tp", "want"), [(1, 1.5), (2, 2.0), (8, 2.0)])
def test_overhead_grows_once_sharded(tp: int, want: float) -> None:
    assert overhead_gib(tp) == want


SHAPE = ModelShape(num_layers=32, num_kv_heads=8, head_dim=128, estimated=False)


def test_fit_shares_weights_and_leaves_the_rest_for_kv() -> None:
    # Per GPU: 10 GiB weights of 72 GiB budget, 2 GiB overhead -> 60 GiB KV; a sequence of
    # 8192 tokens needs 2 x 32 x 4 x 128 x 2 bytes x 8192 = 0.5 GiB.
    got = fit(tp=2, total_weight_gib=20.0, shape=SHAPE, kv_bytes=2.0, memory_gib=80.0,
              gpu_memory_utilization=0.9, context_tokens=8192, reserve_seqs=4)
    assert got == Fit(tp=2, weight_gib_per_gpu=10.0,
                      kv_gib_per_gpu=pytest.approx(60.0),  # type: ignore[arg-type]
                      kv_reserve_gib_per_gpu=2.0, max_concurrent_seqs=120)
    assert got.fits


def test_fit_on_one_gpu_at_half_the_memory() -> None:
    # 80 x 0.5 = 40 GiB budget - 20 weights - 1.5 overhead = 18.5 GiB; 1 GiB per sequence.
    got = fit(tp=1, total_weight_gib=20.0, shape=SHAPE, kv_bytes=2.0, memory_gib=80.0,
              gpu_memory_utilization=0.5, context_tokens=8192, reserve_seqs=3)
    assert got.weight_gib_per_gpu == 20.0
    assert got.kv_gib_per_gpu == pytest.approx(18.5)
    assert got.kv_reserve_gib_per_gpu == pytest.approx(3.0)
    assert got.max_concurrent_seqs == 18
    assert got.fits


def test_fit_without_room_for_kv() -> None:
    got = fit(tp=1, total_weight_gib=100.0, shape=SHAPE, kv_bytes=2.0, memory_gib=80.0,
              gpu_memory_utilization=0.9, context_tokens=8192, reserve_seqs=1)
    assert got.kv_gib_per_gpu == 0.0
    assert got.max_concurrent_seqs == 0
    assert not got.fits


def test_fit_with_zero_sized_sequences_holds_none() -> None:
    got = fit(tp=1, total_weight_gib=10.0, shape=SHAPE, kv_bytes=2.0, memory_gib=80.0,
              gpu_memory_utilization=0.9, context_tokens=0, reserve_seqs=1)
    assert got.max_concurrent_seqs == 0
    assert got.kv_reserve_gib_per_gpu == 0.0
    assert got.fits


@pytest.mark.parametrize(("kv", "reserve", "fits"), [
    (2.0, 2.0, True), (2.1, 2.0, True), (1.9, 2.0, False), (0.0, 0.0, False), (0.1, 0.0, True),
])
def test_fits_needs_the_reserve_and_some_kv(kv: float, reserve: float, fits: bool) -> None:
    f = Fit(tp=1, weight_gib_per_gpu=1.0, kv_gib_per_gpu=kv, kv_reserve_gib_per_gpu=reserve,
            max_concurrent_seqs=0)
    assert f.fits is fits


def test_fit_counts_a_sequence_in_less_than_a_gib() -> None:
    # 10 GiB - 7.7 weights - 1.5 overhead = 0.8 GiB; 0.5 GiB per sequence of 4096 tokens.
    got = fit(tp=1, total_weight_gib=7.7, shape=SHAPE, kv_bytes=2.0, memory_gib=10.0,
              gpu_memory_utilization=1.0, context_tokens=4096, reserve_seqs=1)
    assert got.kv_gib_per_gpu == pytest.approx(0.8)
    assert got.max_concurrent_seqs == 1
    assert got.fits


def test_shapes_and_fits_are_frozen() -> None:
    shape = ModelShape(num_layers=1, num_kv_heads=1, head_dim=1, estimated=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        shape.num_layers = 2  # type: ignore[misc]
    f = Fit(tp=1, weight_gib_per_gpu=1.0, kv_gib_per_gpu=1.0, kv_reserve_gib_per_gpu=1.0,
            max_concurrent_seqs=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.tp = 2  # type: ignore[misc]


def test_fit_never_counts_a_sequence_that_does_not_fit() -> None:
    # 10 - 7.5 - 1.5 = 1.0 GiB of KV; at 16384 tokens a sequence takes kv_bytes GiB. The
    # binary 0.1 is a little above 0.1, so ten such sequences exceed 1.0 GiB: nine fit.
    got = fit(tp=1, total_weight_gib=7.5, shape=SHAPE, kv_bytes=0.1, memory_gib=10.0,
              gpu_memory_utilization=1.0, context_tokens=16384, reserve_seqs=1)
    assert got.kv_gib_per_gpu == 1.0
    assert got.kv_reserve_gib_per_gpu == 0.1
    assert got.max_concurrent_seqs == 9
