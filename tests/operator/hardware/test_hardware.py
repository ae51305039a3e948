"""The hardware package itself (hardware/__init__.py): one import for the whole public API."""

from __future__ import annotations

import slo_operator.hardware as hardware
from slo_operator.hardware import catalogue, labels

PUBLIC = {
    "INCONSISTENT_LABELS", "INVALID_LABEL", "NO_GPU_LABELS", "REASONS", "RESOLVED",
    "RESOURCE_NAMES", "SELECTOR_KEYS", "UNKNOWN_GPU_PRODUCT", "VENDORS", "Architecture",
    "Catalogue", "CatalogueEntry", "Features", "Fp8Format", "HardwareClass",
    "HardwareResolution", "ResourceName", "Vendor", "architecture_for_cc", "classify_node",
    "classify_node_pools", "features_for_cc", "features_for_gfx", "load_catalogue",
    "parse_catalogue", "product_key", "resolve_product",
}


def test_star_import_gives_the_public_names_as_the_modules_define_them() -> None:
    assert len(hardware.__all__) == len(set(hardware.__all__))  # each name once
    namespace: dict[str, object] = {}
    exec("from slo_operator.hardware import *", namespace)
    got = {k: v for k, v in namespace.items() if k != "__builtins__"}
    assert set(got) == PUBLIC
    for name, value in got.items():
        source = catalogue if hasattr(catalogue, name) else labels
        assert value is getattr(source, name), name
