"""Engine input and output types: the defaults users see, GPU sharing, error text."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from slo_operator.engine.types import (
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


def test_value_tuples_are_the_literals() -> None:
    assert PRECISIONS == ("auto", "bf16", "fp16", "fp8")
    assert KV_CACHE_DTYPES == ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16")


def test_prefs_defaults() -> None:
    prefs = EnginePrefs()
    assert prefs.precision == "auto"
    assert prefs.kv_cache_dtype == "auto"
    assert prefs.tensor_parallel_size is None
    assert prefs.tensor_parallel_source == "spec.engine.tensorParallelSize"
    assert prefs.allow_quantization is True
    assert prefs.gpu_memory_utilization is None
    assert prefs.max_num_batched_tokens is None
    assert prefs.extra_args == ()
    assert prefs.quant_config is None


def test_model_facts_defaults() -> None:
    m = ModelFacts(name="m")
    assert (m.served_name, m.params_billion, m.max_model_len, m.num_layers, m.num_kv_heads,
            m.num_attention_heads, m.head_dim, m.quantized_checkpoint) == (None,) * 8


def test_batch_bounds_defaults() -> None:
    b = BatchBounds()
    assert (b.min_seqs, b.max_seqs, b.initial) == (1, 256, None)


@pytest.mark.parametrize(("sharing", "shared", "whole"), [
    (GpuSharing(), False, True),
    (GpuSharing(replicas=1), False, True),
    (GpuSharing(replicas=2), True, False),
    (GpuSharing(mig=True), False, False),
    (GpuSharing(mig=True, replicas=2), True, False),
])
def test_gpu_sharing(sharing: GpuSharing, shared: bool, whole: bool) -> None:
    assert sharing.shared is shared
    assert sharing.whole is whole


def test_gpu_sharing_defaults() -> None:
    assert GpuSharing() == GpuSharing(mig=False, replicas=1)


def test_engine_error_names_the_field() -> None:
    err = EngineError("spec.model.name", "must not be empty")
    assert str(err) == "spec.model.name: must not be empty"
    assert err.field == "spec.model.name"
    assert err.message == "must not be empty"


def test_note_fields() -> None:
    n = Note("f", "Reason", "text")
    assert (n.field, n.reason, n.message) == ("f", "Reason", "text")


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
def test_values_are_frozen(value: object) -> None:
    name = next(iter(dataclasses.asdict(value)))  # type: ignore[call-overload]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, None)
    assert hash(value) == hash(dataclasses.replace(value))  # type: ignore[type-var]


@pytest.mark.parametrize(("cls", "optional"), [
    (ModelFacts, {"served_name": str, "params_billion": float, "max_model_len": int,
                  "num_layers": int, "num_kv_heads": int, "num_attention_heads": int,
                  "head_dim": int, "quantized_checkpoint": str}),
    (EnginePrefs, {"tensor_parallel_size": int, "gpu_memory_utilization": float,
                   "max_num_batched_tokens": int, "quant_config": str}),
    (BatchBounds, {"initial": int}),
    (EnginePlan, {"quantization": str, "max_model_len": int}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_optional_fields_are_typed_as_optional(cls: type, optional: dict[str, type]) -> None:
    hints = typing.get_type_hints(cls)
    assert {k for k, v in hints.items() if type(None) in typing.get_args(v)} == set(optional)
    for name, inner in optional.items():
        assert hints[name] == inner | None
