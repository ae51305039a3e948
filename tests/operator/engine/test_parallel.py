"""Tensor-parallel rules at their boundaries: heads, powers of two, fit, and what errors say."""

from __future__ import annotations

import pytest

from slo_operator.engine.parallel import choose_tp, heads_ok, heads_text, no_tp_reason
from slo_operator.engine.sizing import Fit, fit, model_shape, weight_gib
from slo_operator.engine.types import EngineError, EnginePrefs, GpuSharing, ModelFacts, Note
from slo_operator.hardware import HardwareClass
from tests.support.golden import Golden
from tests.support.hardware import hw

H100 = hw("H100")
F_TP = "spec.engine.tensorParallelSize"
F_GPUS = "spec.hardware.gpusPerReplica"
F_SIZE = "spec.model.sizeBillions"
HINT = "FP8 weights would halve the weight memory if the policy allowed quantization"


def case_id(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.id)


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
             **kw: object) -> EngineError:
    with pytest.raises(EngineError) as err:
        tp_for(gpus, model, prefs, **kw)  # type: ignore[arg-type]
    return err.value


def _fit(tp: int, model: ModelFacts, gmu: float = 0.9) -> Fit:
    assert model.params_billion is not None
    return fit(tp=tp, total_weight_gib=weight_gib(model.params_billion, 2.0),
               shape=model_shape(model.params_billion, None, model.num_kv_heads, None),
               kv_bytes=2.0, memory_gib=80.0, gpu_memory_utilization=gmu,
               context_tokens=8192, reserve_seqs=1)


@pytest.mark.parametrize(
    ("heads", "kv", "tp", "want_ok"),
    [
        pytest.param(None, None, 3, True, id="heads-unknown-any-size"),
        pytest.param(32, None, 4, True, id="divides-attention-heads"),
        pytest.param(32, None, 3, False, id="does-not-divide-attention-heads"),
        pytest.param(33, None, 2, False, id="remainder-one"),
        pytest.param(32, 8, 4, True, id="tp-divides-kv-heads"),
        pytest.param(32, 8, 16, True, id="kv-heads-divide-tp-replicated"),
        pytest.param(64, 8, 16, True, id="replicated-kv-heads-of-a-large-model"),
        pytest.param(28, 4, 2, True, id="qwen-7b-tp-2"),
        pytest.param(28, 4, 8, False, id="kv-heads-fine-attention-heads-not"),
        pytest.param(28, 4, 7, False, id="attention-heads-fine-kv-heads-not"),
        pytest.param(None, 8, 4, True, id="only-kv-heads-known-divisor"),
        pytest.param(None, 8, 16, True, id="only-kv-heads-known-multiple"),
        pytest.param(None, 8, 3, False, id="neither-divisor-nor-multiple"),
        pytest.param(None, 8, 12, False, id="above-kv-heads-not-a-multiple"),
        pytest.param(None, 3, 2, False, id="three-kv-heads-tp-two"),
        pytest.param(None, 2, 3, False, id="two-kv-heads-tp-three"),
        pytest.param(None, 1, 5, True, id="one-kv-head-replicates-anywhere"),
    ],
)
def test_heads_allow_a_tp_size(heads: int | None, kv: int | None, tp: int,
                               want_ok: bool) -> None:
    model = ModelFacts(name="m", num_attention_heads=heads, num_kv_heads=kv)
    assert heads_ok(model, tp) is want_ok


@pytest.mark.parametrize(
    ("heads", "kv"),
    [
        pytest.param(32, 8, id="both-known"),
        pytest.param(32, None, id="attention-heads-only"),
        pytest.param(None, 8, id="kv-heads-only"),
        pytest.param(None, None, id="none-known"),
    ],
)
def test_heads_text_names_the_known_counts(heads: int | None, kv: int | None, golden: Golden,
                                           request: pytest.FixtureRequest) -> None:
    text = heads_text(ModelFacts(name="m", num_attention_heads=heads, num_kv_heads=kv))
    golden.check("engine", f"parallel-heads-text-{case_id(request)}", text)


@pytest.mark.parametrize(
    "sharing",
    [pytest.param(GpuSharing(mig=True), id="mig-slice"),
     pytest.param(GpuSharing(replicas=4), id="time-sliced")],
)
def test_no_tp_reason_names_the_kind_of_sharing(sharing: GpuSharing, golden: Golden,
                                                request: pytest.FixtureRequest) -> None:
    golden.check("engine", f"parallel-no-tp-{case_id(request)}", no_tp_reason(H100, sharing))


def test_smallest_fitting_tp_and_its_note(golden: Golden) -> None:
    got, notes = tp_for(8, m(8))
    assert got == _fit(1, m(8))
    assert [(n.field, n.reason) for n in notes] == [(F_TP, "SmallestFittingTP")]
    golden.check("engine", "parallel-smallest-fitting-tp-8b", notes[0].message)


@pytest.mark.parametrize(
    ("gpus", "want_note"),
    [
        pytest.param(1, False, id="one-gpu"),
        pytest.param(2, False, id="two-gpus"),
        pytest.param(8, False, id="eight-gpus"),
        pytest.param(6, True, id="six-gpus"),
        pytest.param(3, True, id="three-gpus"),
    ],
)
def test_power_of_two_note_only_for_other_pool_sizes(gpus: int, want_note: bool,
                                                     golden: Golden,
                                                     request: pytest.FixtureRequest) -> None:
    got, notes = tp_for(gpus, m(8))
    assert got.tp == 1
    power = [n for n in notes if n.reason == "PowerOfTwoTP"]
    assert [n.field for n in power] == ([F_TP] if want_note else [])
    if want_note:
        golden.check("engine", f"parallel-power-of-two-{case_id(request)}", power[0].message)


def test_70b_takes_two_gpus(golden: Golden) -> None:
    got, notes = tp_for(6, m(70))
    assert got == _fit(2, m(70))
    golden.check("engine", "parallel-smallest-fitting-tp-70b", notes[-1].message)


@pytest.mark.parametrize(
    ("gpus", "model", "want_field"),
    [
        # 70B fits from TP 2, but 3 KV heads refuse every power of two above 1; the first
        # refused size that fits is named, with the divisors up to the pool's size.
        pytest.param(8, m(70, heads=24, kv=3), F_TP, id="heads-refuse-the-sizes-that-fit"),
        pytest.param(8, m(150, heads=20, kv=4), F_TP, id="blocked-tp-names-the-divisors"),
        pytest.param(5, m(70, heads=24, kv=3), F_TP, id="divisors-up-to-a-pool-of-5"),
        pytest.param(6, m(70, heads=24, kv=3), F_TP, id="divisors-up-to-a-pool-of-6"),
        pytest.param(2, m(300), F_GPUS, id="more-gpus-names-the-smallest-fitting-size"),
        # TP 4 is allowed but does not fit; 8 and up would fit but 20 heads refuse them.
        pytest.param(2, m(150, heads=20, kv=4), F_SIZE,
                     id="larger-sizes-the-heads-refuse-are-not-suggested"),
        pytest.param(8, m(5000), F_SIZE, id="too-big-for-any-pool"),
        # TP 8 is refused by 20 heads but would not fit either: the model is too big.
        pytest.param(8, m(300, heads=20, kv=4), F_SIZE,
                     id="refused-sizes-named-only-when-they-fit"),
    ],
)
def test_no_fitting_tp_names_what_to_change(gpus: int, model: ModelFacts, want_field: str,
                                            golden: Golden,
                                            request: pytest.FixtureRequest) -> None:
    err = tp_error(gpus, model)
    assert err.field == want_field
    golden.check("engine", f"parallel-{case_id(request)}", err.message)


def test_shortfall_shows_the_memory_fraction_and_reserve(golden: Golden) -> None:
    err = tp_error(2, m(8), hw_=hw("L4"), gmu=0.25, ctx=4096, reserve=3)
    assert err.field == F_GPUS
    golden.check("engine", "parallel-shortfall-memory-fraction-and-reserve", err.message)


@pytest.mark.parametrize(
    ("product", "prefs", "want_hint"),
    [
        pytest.param("H100", EnginePrefs(allow_quantization=False), True,
                     id="policy-forbids-on-fp8-gpu"),
        pytest.param("H100", EnginePrefs(), False, id="quantization-allowed"),
        pytest.param("H100", EnginePrefs(precision="fp16", allow_quantization=False), False,
                     id="fp16-asked"),
        pytest.param("H100", EnginePrefs(precision="bf16", allow_quantization=False), False,
                     id="bf16-asked"),
        pytest.param("A100-80GB", EnginePrefs(allow_quantization=False), False,
                     id="no-fp8-compute"),
    ],
)
def test_fp8_hint_only_when_the_policy_is_what_stops_it(
    product: str, prefs: EnginePrefs, want_hint: bool, golden: Golden,
    request: pytest.FixtureRequest,
) -> None:
    more_gpus = tp_error(2, m(300), prefs, hw_=hw(product))
    too_big = tp_error(8, m(5000), prefs, hw_=hw(product))
    assert more_gpus.message.endswith(HINT) is want_hint
    assert too_big.message.endswith(HINT) is want_hint
    if want_hint:
        golden.check("engine", f"parallel-hint-more-gpus-{case_id(request)}", more_gpus.message)
        golden.check("engine", f"parallel-hint-too-big-{case_id(request)}", too_big.message)


def user(tp: int) -> EnginePrefs:
    return EnginePrefs(tensor_parallel_size=tp, tensor_parallel_source="src")


def test_user_tp_is_checked_and_kept() -> None:
    got, notes = tp_for(4, m(70), user(4))
    assert got == _fit(4, m(70))
    assert notes == []
    got, _ = tp_for(4, m(8), user(1))
    assert got.tp == 1


@pytest.mark.parametrize(
    ("gpus", "model", "tp"),
    [
        pytest.param(8, m(8), 0, id="zero"),
        pytest.param(8, m(8), -2, id="negative"),
        pytest.param(4, m(8), 8, id="above-the-pool"),
        pytest.param(4, m(8), 5, id="one-above-the-pool"),
        pytest.param(8, m(150, heads=20, kv=4), 8, id="does-not-divide-the-heads"),
        pytest.param(8, m(70), 1, id="does-not-fit"),
    ],
)
def test_user_tp_errors_name_its_source(gpus: int, model: ModelFacts, tp: int, golden: Golden,
                                        request: pytest.FixtureRequest) -> None:
    err = tp_error(gpus, model, user(tp))
    assert err.field == "src"
    golden.check("engine", f"parallel-user-tp-{case_id(request)}", err.message)
