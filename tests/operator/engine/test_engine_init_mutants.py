"""The engine package's public names: each listed, each the object of its home module."""

from __future__ import annotations

import slo_operator.engine as engine
from slo_operator.engine import batching, plan, sizing, types, vllm_args

HOMES = {
    "BATCHED_TOKENS_LARGE_GPU": batching,
    "BATCHED_TOKENS_OTHER": batching,
    "DEFAULT_CONTEXT_TOKENS": sizing,
    "DEFAULT_GPU_MEMORY_UTILIZATION": plan,
    "KV_CACHE_DTYPES": types,
    "PRECISIONS": types,
    "ArgAction": vllm_args,
    "BatchBounds": types,
    "EngineError": types,
    "EnginePlan": types,
    "EnginePrefs": types,
    "GpuSharing": types,
    "KvCacheDtype": types,
    "ModelFacts": types,
    "Note": types,
    "ParsedOption": vllm_args,
    "Precision": types,
    "Problem": vllm_args,
    "VllmArgSpec": vllm_args,
    "cudagraph_capture_sizes": batching,
    "default_max_num_batched_tokens": batching,
    "estimate_layers": sizing,
    "plan_engine": plan,
    "validate": vllm_args,
    "validate_extra_args": vllm_args,
}


def test_public_names_are_listed_and_come_from_their_homes() -> None:
    assert engine.__all__ == sorted(HOMES, key=lambda n: (not n.isupper(), n))
    for name, home in HOMES.items():
        assert getattr(engine, name) is getattr(home, name), name


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from slo_operator.engine import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(HOMES)
