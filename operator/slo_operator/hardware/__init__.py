"""Node labels -> hardware class (GPU architecture, memory, BF16/FP8 support, bandwidth).

Pure: no Kubernetes client, no clock; the only I/O is reading the packaged catalogue.
"""

from slo_operator.hardware.catalogue import (
    RESOURCE_NAMES,
    VENDORS,
    Architecture,
    Catalogue,
    CatalogueEntry,
    Features,
    Fp8Format,
    HardwareClass,
    ResourceName,
    Vendor,
    architecture_for_cc,
    features_for_cc,
    features_for_gfx,
    load_catalogue,
    parse_catalogue,
    product_key,
)
from slo_operator.hardware.labels import (
    INCONSISTENT_LABELS,
    INVALID_LABEL,
    NO_GPU_LABELS,
    REASONS,
    RESOLVED,
    SELECTOR_KEYS,
    UNKNOWN_GPU_PRODUCT,
    HardwareResolution,
    classify_node,
    resolve_product,
)

__all__ = [
    "INCONSISTENT_LABELS",
    "INVALID_LABEL",
    "NO_GPU_LABELS",
    "REASONS",
    "RESOLVED",
    "RESOURCE_NAMES",
    "SELECTOR_KEYS",
    "UNKNOWN_GPU_PRODUCT",
    "VENDORS",
    "Architecture",
    "Catalogue",
    "CatalogueEntry",
    "Features",
    "Fp8Format",
    "HardwareClass",
    "HardwareResolution",
    "ResourceName",
    "Vendor",
    "architecture_for_cc",
    "classify_node",
    "features_for_cc",
    "features_for_gfx",
    "load_catalogue",
    "parse_catalogue",
    "product_key",
    "resolve_product",
]
