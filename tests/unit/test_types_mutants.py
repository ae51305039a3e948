"""Engine input and output types: the defaults users see, GPU sharing, error text."""

from __future__ import annotations

import pytest

from slo_operator.engine.types import (
    KV_CACHE_DTYPES,
    PRECISIONS,
    BatchBounds,
    EngineError,
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
