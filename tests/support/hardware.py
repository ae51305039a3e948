"""The GPU class of a product name, for tests of the engine rules."""

from __future__ import annotations

from slo_operator.hardware import HardwareClass, resolve_product


def hw(name: str) -> HardwareClass:
    """The catalogue's class for ``name`` (fails the test when the name resolves to none)."""
    res = resolve_product(name)
    assert res.hardware is not None, res.message
    return res.hardware
