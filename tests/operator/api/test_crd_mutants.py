"""JSON Schema 2020-12 to structural OpenAPI v3.0, rule by rule (api.crd)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from slo_operator.api.crd import _inline, all_crds, crd_yaml, openapi_schema


class Inner(BaseModel):
    """Inner doc."""

    a: int = 1
    b: list[int] = Field(default_factory=lambda: [1])


class Tags(BaseModel):
    tags: dict[str, list[str]] = {"k": ["x"]}


class Wrap(BaseModel):
    t: Tags = Field(default_factory=Tags)


class Req(BaseModel):
    x: int


class Deep(BaseModel):
    inner: Inner = Field(default_factory=Inner)


class Sample(BaseModel):
    inner: Inner = Field(default_factory=Inner, description="the inner")
    opt: Inner | None = Field(default=None, description="maybe")
    req: Req | None = None
    must: Inner
    preset: Inner = Inner(a=2)
    deep: Deep = Field(default_factory=Deep)
    n: Annotated[float, Field(gt=0, lt=1)] = 0.5
    count: int | None = 3
    lit: Literal["only"] = "only"
    either: int | str = 1
    free: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    mapping: dict[str, Inner] = {}
    items: list[Req] = []


INNER = {"description": "Inner doc.",
         "properties": {"a": {"default": 1, "type": "integer"},
                        "b": {"items": {"type": "integer"}, "type": "array"}},
         "type": "object"}
REQ = {"properties": {"x": {"type": "integer"}}, "required": ["x"], "type": "object"}


def test_a_model_becomes_a_structural_schema() -> None:
    got = openapi_schema(Sample)
    assert got["required"] == ["must"]
    assert got["type"] == "object"
    assert set(got) == {"properties", "required", "type"}
    assert got["properties"] == {
        "inner": {**INNER, "description": "the inner", "default": {"a": 1}},
        "opt": {**INNER, "description": "maybe", "default": {"a": 1}},
        "req": REQ,
        "must": INNER,
        "preset": {**INNER, "default": {"a": 2, "b": [1]}},
        # Inner defaults first, so the outer default holds them.
        "deep": {"properties": {"inner": {**INNER, "default": {"a": 1}}}, "type": "object",
                 "default": {"inner": {"a": 1}}},
        "n": {"default": 0.5, "maximum": 1, "exclusiveMaximum": True, "minimum": 0,
              "exclusiveMinimum": True, "type": "number"},
        "count": {"type": "integer", "default": 3},
        "lit": {"enum": ["only"], "default": "only", "type": "string"},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 1},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "mapping": {"additionalProperties": INNER, "default": {}, "type": "object"},
        "items": {"default": [], "items": REQ, "type": "array"},
    }


def test_a_materialized_default_is_a_copy() -> None:
    tags = openapi_schema(Wrap)["properties"]["t"]
    assert tags["default"] == {"tags": {"k": ["x"]}}
    tags["default"]["tags"]["k"].append("y")
    assert tags["properties"]["tags"]["default"] == {"k": ["x"]}


@pytest.mark.parametrize(("raw", "want"), [
    pytest.param([{"title": "T", "type": "string"}, 3], [{"type": "string"}, 3], id="list"),
    pytest.param("text", "text", id="scalar"),
    pytest.param({"enum": ["a", "b"]}, {"enum": ["a", "b"], "type": "string"},
                 id="enum-gets-string-type"),
    pytest.param({"enum": [1], "type": "integer"}, {"enum": [1], "type": "integer"},
                 id="enum-keeps-its-type"),
    pytest.param({"const": 2, "type": "integer"}, {"enum": [2], "type": "integer"},
                 id="const-is-a-one-value-enum"),
    pytest.param({"minimum": 0, "exclusiveMinimum": True}, {"minimum": 0,
                                                           "exclusiveMinimum": True},
                 id="openapi-exclusive-minimum-kept"),
    pytest.param({"maximum": 9, "exclusiveMaximum": False}, {"maximum": 9,
                                                            "exclusiveMaximum": False},
                 id="openapi-exclusive-maximum-kept"),
    pytest.param({"exclusiveMaximum": 5}, {"maximum": 5, "exclusiveMaximum": True},
                 id="exclusive-maximum-number"),
    pytest.param({"type": "object", "additionalProperties": False}, {"type": "object"},
                 id="closed-object"),
    pytest.param({"type": "object", "additionalProperties": True},
                 {"type": "object", "additionalProperties": True}, id="open-object"),
    pytest.param({"type": "object", "additionalProperties": True,
                  "x-kubernetes-preserve-unknown-fields": True},
                 {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                 id="free-form-object"),
    pytest.param({"type": "object", "additionalProperties": True,
                  "x-kubernetes-preserve-unknown-fields": False},
                 {"type": "object", "additionalProperties": True,
                  "x-kubernetes-preserve-unknown-fields": False},
                 id="open-object-not-preserved"),
    pytest.param({"type": "array", "items": [{"title": "x"}]},
                 {"type": "array", "items": [{"title": "x"}]}, id="tuple-items-left-alone"),
    pytest.param({"default": None, "type": "string"}, {"type": "string"}, id="null-default"),
    pytest.param({"default": 0, "type": "integer"}, {"default": 0, "type": "integer"},
                 id="zero-default"),
    pytest.param({"anyOf": [{"type": "null"}, {"type": "integer", "default": 4}],
                  "description": "d"},
                 {"type": "integer", "default": 4, "description": "d"}, id="nullable-first"),
    pytest.param({"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 7},
                 {"type": "integer", "default": 7}, id="nullable-with-default"),
])
def test_inline_rules(raw: Any, want: Any) -> None:
    assert _inline(raw, {}) == want


def test_a_reference_takes_the_definition_and_its_own_keys_win() -> None:
    defs = {"D": {"type": "object", "title": "D", "description": "def doc",
                  "properties": {"k": {"title": "K", "type": "string"}}}}
    got = _inline({"$ref": "#/$defs/D", "description": "use doc"}, defs)
    assert got == {"type": "object", "description": "use doc",
                   "properties": {"k": {"type": "string"}}}
    assert defs["D"]["description"] == "def doc"


def test_a_nullable_reference_does_not_change_its_definition() -> None:
    defs = {"D": {"type": "integer", "minimum": 1}}
    raw = {"anyOf": [{"$ref": "#/$defs/D"}, {"type": "null"}], "default": None,
           "description": "n"}
    assert _inline(raw, defs) == {"type": "integer", "minimum": 1, "description": "n"}
    assert raw["anyOf"] == [{"$ref": "#/$defs/D"}, {"type": "null"}]
    assert defs == {"D": {"type": "integer", "minimum": 1}}


def test_crd_identity_and_shape() -> None:
    isvc, slo = all_crds()
    for crd, kind, plural in ((isvc, "InferenceService", "inferenceservices"),
                              (slo, "SLOPolicy", "slopolicies")):
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["metadata"] == {"name": f"{plural}.inference.slo-operator.io",
                                   "labels": {"app.kubernetes.io/part-of": "slo-operator"}}
        spec = crd["spec"]
        assert spec["group"] == "inference.slo-operator.io"
        assert spec["scope"] == "Namespaced"
        assert spec["names"]["kind"] == kind
        assert spec["names"]["listKind"] == f"{kind}List"
        assert spec["names"]["plural"] == plural
        assert spec["names"]["singular"] == kind.lower()
        assert spec["names"]["categories"] == ["slo-operator"]
        (version,) = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == (
            "v1alpha1", True, True)
        root = version["schema"]["openAPIV3Schema"]
        assert root["type"] == "object"
        assert root["properties"]["metadata"] == {"type": "object"}
        assert root["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True
    isvc_root = isvc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    slo_root = slo["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert isvc_root["required"] == ["spec"]
    assert "default" not in isvc_root["properties"]["spec"]
    assert "required" not in slo_root
    assert slo_root["properties"]["spec"]["default"]["window"] == "60s"


def test_the_committed_form_has_the_generated_header_and_keeps_key_order() -> None:
    text = crd_yaml({"b": 1, "a": "x" * 120})
    assert text.startswith(
        "# Generated by `slo-operator crds` from slo_operator.api; do not edit.\nb: 1\na: ")


def test_long_descriptions_fold_near_100_columns() -> None:
    text = crd_yaml({"description": "ab " + "abcd " * 60})
    widths = [len(line) for line in text.splitlines()[1:]]
    assert len(widths) > 2
    assert 95 <= max(widths) <= 101
