"""Tensor-parallel rules at their boundaries: heads, powers of two, fit, and what errors say."""

from __future__ import annotations

import pytest

from slo_operator.engine.parallel import (
    MAX_TP_HINT,
    _powers_of_two,
    choose_tp,
    heads_ok,
    heads_text,
    no_tp_reason,
)
from slo_operator.engine.sizing import Fit, fit, model_shape, weight_gib
from slo_operator.engine.types import EngineError, EnginePrefs, GpuSharing, ModelFacts, Note
from slo_operator.hardware import HardwareClass
from tests.support.hardware import hw

H100 = hw("H100")
F_TP = "spec.engine.tensorParallelSize"
F_GPUS = "spec.hardware.gpusPerReplica"
F_SIZE = "spec.model.sizeBillions"


def m(size: float, heads: int | None = None, kv: int | None = None) -> ModelFacts:
    return ModelFacts(name="org/m", params_billion=size, num_attention_heads=heads,
                      num_kv_heads=kv)


def tp_for(gpus: int, model: ModelFacts, prefs: EnginePrefs | None = None,
           hw_: HardwareClass = H100, gmu: float = 0.9, ctx: int = 8192, reserve: int = 1
           ) -> tuple[Fit, list[Note]]:
    assert model.params_billion is not None
    notes: list[Note] = []
    shape = model_shape(model.params_billion, None, model.num_kv_heads, None)
    got = choose_tp(hw=hw_, gpus_per_node=gpus, model=model, prefs=prefs or EnginePrefs(),
                    shape=shape, total_weight=weight_gib(model.params_billion, 2.0),
                    kv_bytes=2.0, gmu=gmu, ctx=ctx, reserve_seqs=reserve,
                    dtype_desc="16-bit", notes=notes)
    return got, notes


def tp_error(gpus: int, model: ModelFacts, prefs: EnginePrefs | None = None,
             **kw: object) -> tuple[str, str]:
    with pytest.raises(EngineError) as err:
        tp_for(gpus, model, prefs, **kw)  # type: ignore[arg-type]
    return err.value.field, err.value.message


def test_max_tp_hint() -> None:
    assert MAX_TP_HINT == 64


@pytest.mark.parametrize(
    ("limit", "want"),
    [(-1, []), (0, []), (1, [1]), (2, [1, 2]), (3, [1, 2]), (7, [1, 2, 4]), (8, [1, 2, 4, 8]),
     (64, [1, 2, 4, 8, 16, 32, 64])],
)
def test_powers_of_two(limit: int, want: list[int]) -> None:
    assert _powers_of_two(limit) == want


@pytest.mark.parametrize(
    ("heads", "kv", "tp", "ok"),
    [
        (None, None, 3, True),
        (32, None, 4, True),
        (32, None, 3, False),
        (33, None, 2, False),  # remainder 1
        (32, 8, 4, True),  # TP divides the KV heads
        (32, 8, 16, True),  # KV heads divide TP: replicated
        (64, 8, 16, True),
        (28, 4, 2, True),
        (28, 4, 8, False),  # KV heads fine, attention heads not
        (28, 4, 7, False),  # attention heads fine, KV heads not
        (None, 8, 4, True),
        (None, 8, 16, True),
        (None, 8, 3, False),
        (None, 8, 12, False),
        (None, 3, 2, False),  # 3 % 2 == 1 and 2 % 3 == 2
        (None, 2, 3, False),  # 2 % 3 == 2 and 3 % 2 == 1
        (None, 1, 5, True),
    ],
)
def test_heads_ok(heads: int | None, kv: int | None, tp: int, ok: bool) -> None:
    model = ModelFacts(name="m", num_attention_heads=heads, num_kv_heads=kv)
    assert heads_ok(model, tp) is ok


@pytest.mark.parametrize(
    ("heads", "kv", "want"),
    [(32, 8, "32 attention heads and 8 KV heads"), (32, None, "32 attention heads"),
     (None, 8, "8 KV heads"), (None, None, "heads")],
)
def test_heads_text(heads: int | None, kv: int | None, want: str) -> None:
    assert heads_text(ModelFacts(name="m", num_attention_heads=heads, num_kv_heads=kv)) == want


def test_no_tp_reason_names_the_kind_of_sharing() -> None:
    assert no_tp_reason(H100, GpuSharing(mig=True)) == (
        "NVIDIA H100 SXM 80GB is a MIG slice; vLLM cannot run tensor parallel across MIG "
        "instances (NCCL has no peer-to-peer path between them): use 1, or a larger MIG "
        "profile or whole GPUs")
    assert no_tp_reason(H100, GpuSharing(replicas=4)) == (
        "NVIDIA H100 SXM 80GB is time-sliced 4 ways; tensor-parallel ranks could share one "
        "physical GPU: use 1, or whole GPUs")


def _fit(tp: int, model: ModelFacts, gmu: float = 0.9) -> Fit:
    assert model.params_billion is not None
    return fit(tp=tp, total_weight_gib=weight_gib(model.params_billion, 2.0),
               shape=model_shape(model.params_billion, None, model.num_kv_heads, None),
               kv_bytes=2.0, memory_gib=80.0, gpu_memory_utilization=gmu,
               context_tokens=8192, reserve_seqs=1)


def test_smallest_fitting_tp_and_its_note() -> None:
    got, notes = tp_for(8, m(8))
    assert got == _fit(1, m(8))
    assert notes == [Note(F_TP, "SmallestFittingTP",
                          "TP 1: smallest size where 16-bit weights (15.2 GiB per GPU) and KV "
                          "for 1 sequence(s) of 8192 tokens fit in 72.0 GiB per GPU")]


@pytest.mark.parametrize(("gpus", "note"), [(1, False), (2, False), (8, False), (6, True),
                                            (3, True)])
def test_power_of_two_note_only_for_other_pool_sizes(gpus: int, note: bool) -> None:
    got, notes = tp_for(gpus, m(8))
    assert got.tp == 1
    power = [n for n in notes if n.reason == "PowerOfTwoTP"]
    want = [Note(F_TP, "PowerOfTwoTP", f"TP sizes tried are powers of two up to {gpus} GPUs")]
    assert power == (want if note else [])


def test_70b_takes_two_gpus() -> None:
    got, notes = tp_for(6, m(70))
    assert got == _fit(2, m(70))
    assert notes[-1].message == (
        "TP 2: smallest size where 16-bit weights (66.5 GiB per GPU) and KV for 1 sequence(s) "
        "of 8192 tokens fit in 72.0 GiB per GPU")


def test_tp_skips_sizes_the_heads_refuse() -> None:
    # 70B fits from TP 2, but 3 KV heads refuse every power of two above 1; the first
    # refused size that fits is named, with the divisors up to the pool's size.
    assert tp_error(8, m(70, heads=24, kv=3)) == (
        F_TP,
        "TP 2 would fit in memory but does not divide the model's 24 attention heads and 3 KV "
        "heads; set tensorParallelSize to one of 1, 3, 6 that fits")


def test_blocked_tp_names_the_divisors() -> None:
    assert tp_error(8, m(150, heads=20, kv=4)) == (
        F_TP,
        "TP 8 would fit in memory but does not divide the model's 20 attention heads and 4 KV "
        "heads; set tensorParallelSize to one of 1, 2, 4 that fits")


def test_more_gpus_needed_names_the_smallest_fitting_size() -> None:
    assert tp_error(2, m(300)) == (
        F_GPUS,
        "org/m (300B) needs 16 NVIDIA H100 SXM 80GB GPUs per replica, the pool offers 2: "
        "weights 285.0 GiB + overhead + KV for 1 sequence(s) of 8192 tokens (1.8 GiB) exceed "
        "72.0 GiB per GPU (80.0 GiB x 0.9) at TP 2")


def test_larger_sizes_the_heads_refuse_are_not_suggested() -> None:
    # TP 4 is allowed but does not fit; 8 and up would fit but 20 heads refuse them.
    field, message = tp_error(2, m(150, heads=20, kv=4))
    assert field == F_SIZE
    assert message == (
        "org/m (150B) does not fit on 64 NVIDIA H100 SXM 80GB GPUs: weights 142.5 GiB + "
        "overhead + KV for 1 sequence(s) of 8192 tokens (0.8 GiB) exceed 72.0 GiB per GPU "
        "(80.0 GiB x 0.9) at TP 2")


def test_too_big_for_any_pool() -> None:
    assert tp_error(8, m(5000)) == (
        F_SIZE,
        "org/m (5000B) does not fit on 64 NVIDIA H100 SXM 80GB GPUs: weights 1187.4 GiB + "
        "overhead + KV for 1 sequence(s) of 8192 tokens (0.5 GiB) exceed 72.0 GiB per GPU "
        "(80.0 GiB x 0.9) at TP 8")


def test_shortfall_shows_the_memory_fraction_and_reserve() -> None:
    _, message = tp_error(2, m(8), hw_=hw("L4"), gmu=0.25, ctx=4096, reserve=3)
    assert message == (
        "org/m (8B) needs 8 NVIDIA L4 GPUs per replica, the pool offers 2: weights 7.6 GiB + "
        "overhead + KV for 3 sequence(s) of 4096 tokens (0.8 GiB) exceed 6.0 GiB per GPU "
        "(24.0 GiB x 0.25) at TP 2")


HINT = "; FP8 weights would halve the weight memory if the policy allowed quantization"


@pytest.mark.parametrize(
    ("product", "prefs", "hint"),
    [
        ("H100", EnginePrefs(allow_quantization=False), True),
        ("H100", EnginePrefs(), False),
        ("H100", EnginePrefs(precision="fp16", allow_quantization=False), False),
        ("H100", EnginePrefs(precision="bf16", allow_quantization=False), False),
        ("A100-80GB", EnginePrefs(allow_quantization=False), False),  # no FP8 compute
    ],
)
def test_fp8_hint_only_when_the_policy_is_what_stops_it(product: str, prefs: EnginePrefs,
                                                        hint: bool) -> None:
    _, message = tp_error(2, m(300), prefs, hw_=hw(product))
    assert message.endswith(HINT) is hint
    _, message = tp_error(8, m(5000), prefs, hw_=hw(product))
    assert message.endswith(HINT) is hint


def user(tp: int) -> EnginePrefs:
    return EnginePrefs(tensor_parallel_size=tp, tensor_parallel_source="src")


def test_user_tp_is_checked_and_kept() -> None:
    got, notes = tp_for(4, m(70), user(4))
    assert got == _fit(4, m(70))
    assert notes == []
    got, _ = tp_for(4, m(8), user(1))
    assert got.tp == 1


@pytest.mark.parametrize(
    ("gpus", "model", "tp", "want"),
    [
        (8, m(8), 0, "must be at least 1, got 0"),
        (8, m(8), -2, "must be at least 1, got -2"),
        (4, m(8), 8, "8 exceeds the 4 GPUs per replica of this pool"),
        (4, m(8), 5, "5 exceeds the 4 GPUs per replica of this pool"),
        (8, m(150, heads=20, kv=4), 8,
         "8 does not divide the model's 20 attention heads and 4 KV heads (KV heads may also "
         "be a divisor of it)"),
        (8, m(70), 1,
         "model does not fit: weights 133.0 GiB + overhead + KV for 1 sequence(s) of 8192 "
         "tokens (2.5 GiB) exceed 72.0 GiB per GPU (80.0 GiB x 0.9) at TP 1"),
    ],
)
def test_user_tp_errors_name_its_source(gpus: int, model: ModelFacts, tp: int,
                                        want: str) -> None:
    assert tp_error(gpus, model, user(tp)) == ("src", want)


@pytest.mark.parametrize(("gpus", "divisors"), [(5, "1, 3"), (6, "1, 3, 6"), (8, "1, 3, 6")])
def test_divisors_offered_go_up_to_the_pool_size(gpus: int, divisors: str) -> None:
    assert tp_error(gpus, m(70, heads=24, kv=3)) == (
        F_TP,
        "TP 2 would fit in memory but does not divide the model's 24 attention heads and 3 KV "
        f"heads; set tensorParallelSize to one of {divisors} that fits")


def test_sizes_the_heads_refuse_are_named_only_when_they_fit() -> None:
    # TP 8 is refused by 20 heads but would not fit either: the model is too big.
    assert tp_error(8, m(300, heads=20, kv=4)) == (
        F_SIZE,
        "org/m (300B) does not fit on 64 NVIDIA H100 SXM 80GB GPUs: weights 142.5 GiB + "
        "overhead + KV for 1 sequence(s) of 8192 tokens (0.5 GiB) exceed 72.0 GiB per GPU "
        "(80.0 GiB x 0.9) at TP 4")
