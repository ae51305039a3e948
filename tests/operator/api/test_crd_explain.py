"""`kubectl explain` is the manual most users read: every schema node has a description.

Walks the generated CRDs (the same function `make crds` writes them with) and lists every
kind, object and field whose description is missing or empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from slo_operator.api.crd import all_crds


def nodes(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in (schema.get("properties") or {}).items():
        yield from nodes(prop, f"{path}.{name}")
    items = schema.get("items")
    if isinstance(items, dict) and items.get("properties"):
        # kubectl explain shows an array's element fields under the array's own path.
        for name, prop in items["properties"].items():
            yield from nodes(prop, f"{path}[].{name}")
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and extra.get("properties"):
        for name, prop in extra["properties"].items():
            yield from nodes(prop, f"{path}{{}}.{name}")


CRDS = {c["spec"]["names"]["kind"]: c for c in all_crds()}


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_schema_node_has_a_description(kind: str) -> None:
    root = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    # metadata may carry nothing but its type (the API server rejects a description).
    missing = [path for path, node in nodes(root, kind)
               if not str(node.get("description") or "").strip() and path != f"{kind}.metadata"]
    assert missing == [], f"{len(missing)} nodes without a description:\n" + "\n".join(missing)


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_numeric_fields_state_their_unit_or_range(kind: str) -> None:
    # A number without a unit is guesswork: say ms, s, GiB, tokens, replicas, a fraction...
    root = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    words = ("millisecond", "second", "gib", "token", "replica", "fraction", "ratio", "gpu",
             "percent", "count", "number", "generation", "in (0,1)", "request", "layer",
             "head", "billion", "sequence", "priority", "limit", "dimension", "per ")
    vague = [path for path, node in nodes(root, kind)
             if node.get("type") in ("integer", "number")
             and not any(w in str(node.get("description", "")).lower() for w in words)]
    assert vague == [], "numeric fields without a unit:\n" + "\n".join(vague)
