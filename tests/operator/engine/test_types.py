"""Engine input and output types: the value tuples, GPU sharing, the error text, immutability."""

from __future__ import annotations

import dataclasses

import pytest

from slo_operator.engine import (
    KV_CACHE_DTYPES,
    PRECISIONS,
    BatchBounds,
    EngineError,
    EnginePlan,
    EnginePrefs,
    GpuSharing,
    ModelFacts,
    Note,
)
from tests.support.golden import Golden


def test_value_tuples_are_the_literals() -> None:
    # The CRD enums are checked against these tuples.
    assert PRECISIONS == ("auto", "bf16", "fp16", "fp8")
    assert KV_CACHE_DTYPES == ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16")


@pytest.mark.parametrize(
    ("sharing", "want_shared", "want_whole"),
    [
        pytest.param(GpuSharing(), False, True, id="whole-gpus-unless-said-otherwise"),
        pytest.param(GpuSharing(replicas=1), False, True, id="one-replica-is-not-shared"),
        pytest.param(GpuSharing(replicas=2), True, False, id="time-sliced-two-ways"),
        pytest.param(GpuSharing(mig=True), False, False, id="mig-slice-is-not-whole"),
        pytest.param(GpuSharing(mig=True, replicas=2), True, False,
                     id="time-sliced-mig-slice"),
    ],
)
def test_gpu_sharing_kinds(sharing: GpuSharing, want_shared: bool, want_whole: bool) -> None:
    assert sharing.shared is want_shared
    assert sharing.whole is want_whole


def test_engine_error_names_the_field_then_the_message(golden: Golden) -> None:
    err = EngineError("spec.model.name", "must not be empty")
    assert (err.field, err.message) == ("spec.model.name", "must not be empty")
    golden.check("engine", "types-engine-error-text", str(err))


def _instances() -> list[object]:
    return [
        ModelFacts(name="m"), EnginePrefs(), GpuSharing(), BatchBounds(), Note("f", "R", "m"),
        EnginePlan(args=(), dtype="auto", quantization=None, kv_cache_dtype="auto",
                   tensor_parallel_size=1, max_num_seqs=1, max_num_batched_tokens=1,
                   gpu_memory_utilization=0.9, max_model_len=None, cudagraph_capture_sizes=(),
                   notes=(), conflicts=(), env=(), est_weight_gib_per_gpu=0.0,
                   est_kv_gib_per_gpu=0.0, est_max_concurrent_seqs=0),
    ]


@pytest.mark.parametrize("value", _instances(), ids=lambda v: type(v).__name__)
def test_inputs_and_plans_are_immutable_hashable_values(value: object) -> None:
    name = next(iter(dataclasses.asdict(value)))  # type: ignore[call-overload]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, None)
    assert hash(value) == hash(dataclasses.replace(value))  # type: ignore[type-var]
