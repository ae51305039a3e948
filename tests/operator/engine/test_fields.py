"""The CRD paths engine errors and notes name: exact, and present in the CRD schemas."""

from __future__ import annotations

from typing import Any

import pytest

from slo_operator.api.crd import openapi_schema
from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec
from slo_operator.engine import fields

SERVICE = openapi_schema(InferenceServiceSpec)
POLICY = openapi_schema(SLOPolicySpec)

PATHS = [
    ("F_NAME", "spec.model.name", SERVICE),
    ("F_SERVED", "spec.model.servedName", SERVICE),
    ("F_SIZE", "spec.model.sizeBillions", SERVICE),
    ("F_MAX_LEN", "spec.model.maxModelLen", SERVICE),
    ("F_CHECKPOINT", "spec.model.quantizedCheckpoint", SERVICE),
    ("F_PRECISION", "spec.engine.precision", SERVICE),
    ("F_KV", "spec.engine.kvCacheDtype", SERVICE),
    ("F_TP", "spec.engine.tensorParallelSize", SERVICE),
    ("F_GMU", "spec.engine.gpuMemoryUtilization", SERVICE),
    ("F_MNBT", "spec.engine.maxNumBatchedTokens", SERVICE),
    ("F_EXTRA", "spec.engine.extraArgs", SERVICE),
    ("F_GPUS", "spec.hardware.gpusPerReplica", SERVICE),
    ("F_PRODUCTS", "spec.hardware.gpuProducts", SERVICE),
    ("F_ALLOW_Q", "spec.allowQuantization", POLICY),
    ("F_MIN_BATCH", "spec.batching.minBatch", POLICY),
    ("F_MAX_BATCH", "spec.batching.maxBatch", POLICY),
    ("F_ITL", "spec.objectives.interTokenLatencyMs", POLICY),
]


def _resolve(schema: dict[str, Any], path: str) -> dict[str, Any]:
    head, *parts = path.split(".")
    assert head == "spec"
    node = schema
    for part in parts:
        node = node["properties"][part]
    return node


@pytest.mark.parametrize(("const", "path", "schema"), PATHS, ids=[p[0] for p in PATHS])
def test_field_paths_exist_in_the_crd_schema(const: str, path: str,
                                             schema: dict[str, Any]) -> None:
    assert getattr(fields, const) == path
    assert _resolve(schema, path)


def test_every_field_path_is_checked_against_the_schema() -> None:
    # A new path added without a row above would go unchecked.
    constants = {name for name in vars(fields) if name.startswith("F_")}
    assert constants == {p[0] for p in PATHS}
