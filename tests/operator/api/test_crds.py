"""The committed CRDs equal what the models generate, and are structural."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from slo_operator.api.crd import all_crds, crd_yaml
from tests.support.paths import REPO

ROOT = REPO


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["spec"]["names"]["kind"])
def test_committed_crd_matches_models(crd: dict[str, Any]) -> None:
    path = ROOT / "crds" / f"{crd['metadata']['name']}.yaml"
    assert path.read_text() == crd_yaml(crd), (
        f"{path} is stale: run `slo-operator crds --out-dir crds`"
    )


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node, dict):
        out.append((path, node))
        for k, v in node.items():
            out += _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _walk(v, f"{path}[{i}]")
    return out


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["spec"]["names"]["kind"])
def test_schema_is_structural(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node, path
        assert "anyOf" not in node and "oneOf" not in node, path
        assert "title" not in node, path
        if "exclusiveMinimum" in node:
            assert isinstance(node["exclusiveMinimum"], bool) and "minimum" in node, path
        if "properties" in node or "items" in node:
            assert node.get("type") in ("object", "array"), path


def test_names_columns_and_subresources() -> None:
    isvc, slo = all_crds()
    assert isvc["spec"]["names"]["shortNames"] == ["infsvc"]
    assert slo["spec"]["names"]["shortNames"] == ["slo"]
    for crd in (isvc, slo):
        v = crd["spec"]["versions"][0]
        assert v["subresources"] == {"status": {}}
        assert "slo-operator" in crd["spec"]["names"]["categories"]
    cols = [c["name"] for c in isvc["spec"]["versions"][0]["additionalPrinterColumns"]]
    for want in ("Replicas", "Batch", "E2Ems", "TTFTms", "SLO", "Age"):
        assert want in cols


def test_cel_rules_cover_cross_field_checks() -> None:
    text = yaml.safe_dump(all_crds())
    for rule in ("self.minReplicas <= self.maxReplicas", "self.minBatch <= self.maxBatch",
                 "self.min <= self.max"):
        assert rule in text


def test_nested_defaults_reach_the_api_server() -> None:
    slo = all_crds()[1]
    spec = slo["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    # Defaults are whole objects: the API server checks them against CEL as written.
    assert spec["default"]["scaling"]["minReplicas"] <= spec["default"]["scaling"]["maxReplicas"]
    assert spec["properties"]["objectives"]["default"]["e2eLatencyMs"] == 800
    assert spec["properties"]["objectives"]["properties"]["e2eLatencyMs"]["default"] == 800


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["spec"]["names"]["kind"])
def test_helm_chart_ships_the_same_crds(crd: dict[str, Any]) -> None:
    name = f"{crd['metadata']['name']}.yaml"
    chart_copy = ROOT / "charts" / "slo-operator" / "crds" / name
    assert chart_copy.read_text() == (ROOT / "crds" / name).read_text(), (
        "charts/slo-operator/crds is stale: run `make crds`"
    )
