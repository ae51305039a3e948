"""Numbers read back from what anybody may write (annotations, a hand-edited status)."""

from __future__ import annotations

import math
from typing import Any


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float; None for anything else: a string, a boolean, NaN, an
    infinity, or an integer beyond any float (JSON allows any number of digits)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        v = float(value)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None
