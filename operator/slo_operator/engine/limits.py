"""One set of range checks per engine value, whichever way it arrives.

A value set through a spec field (``spec.engine.tensorParallelSize``) is checked by the
CRD schema and the pydantic model. The same value given as an extra argument
(``--tensor-parallel-size -1``) used to skip those checks; here it goes through the very
same field rule (the pydantic field, hence the CRD schema), and the error names the extra
argument the user wrote.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from slo_operator.api.models import Batching, EngineSpec, ModelSpec
from slo_operator.engine.fields import F_GMU, F_MAX_BATCH, F_MAX_LEN, F_MNBT, F_TP
from slo_operator.engine.types import EngineError

# vLLM's human_readable_int (vllm/engine/arg_utils.py): decimal k/m/g/t in lower case,
# binary K/M/G/T (and Ki/Mi/Gi/Ti) in upper case.
_SUFFIXES = {
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
    "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}  # fmt: skip

# Beyond any field's range; keeps int() of a huge Decimal from allocating gigabytes.
_MAX_DIGITS = 30


class TooLarge(ValueError):
    """A count with more digits than any engine field accepts."""


def parse_count(raw: str) -> int | None:
    """An integer such as ``8192``, ``8k`` or ``1.5Ki``; None when it is not one.

    Raises ``TooLarge`` for values with more than ``_MAX_DIGITS`` digits (``1e400k``),
    so no caller ever builds an astronomically large integer or hits OverflowError.
    """
    v = raw.strip()
    mult = 1
    for suffix, scale in _SUFFIXES.items():  # no suffix ends another: at most one matches
        if v.endswith(suffix):
            v, mult = v[: -len(suffix)], scale
            break
    try:
        d = Decimal(v)
    except (InvalidOperation, ValueError, ArithmeticError):
        return None
    if not d.is_finite():
        return None
    # Checked before scaling: Decimal arithmetic past its exponent limit raises Overflow.
    if d.adjusted() > _MAX_DIGITS:
        raise TooLarge(raw)
    if d and d.adjusted() < -_MAX_DIGITS:
        return None  # a fraction too small to be a count
    d *= mult
    if d != d.to_integral_value():
        return None
    return int(d)


def parse_fraction(raw: str) -> float | None:
    """A finite float, else None (``inf``, ``nan`` and garbage are not fractions)."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# vllm option dest -> (model, field, the CRD path whose rule applies).
OPTION_RULES: dict[str, tuple[type[BaseModel], str, str]] = {
    "tensor_parallel_size": (EngineSpec, "tensor_parallel_size", F_TP),
    "gpu_memory_utilization": (EngineSpec, "gpu_memory_utilization", F_GMU),
    "max_num_batched_tokens": (EngineSpec, "max_num_batched_tokens", F_MNBT),
    "max_model_len": (ModelSpec, "max_model_len", F_MAX_LEN),
    # --max-num-seqs is the per-replica batch ceiling: the policy's maxBatch rule.
    "max_num_seqs": (Batching, "max_batch", F_MAX_BATCH),
}


@cache
def _adapter(dest: str) -> TypeAdapter[Any]:
    model, name, _ = OPTION_RULES[dest]
    info = model.model_fields[name]
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]
    return TypeAdapter(annotation)


def checked(dest: str, raw: str, where: str, flag: str) -> int | float:
    """``raw`` parsed and held to the field rule of ``dest``; EngineError at ``where``."""
    rule_path = OPTION_RULES[dest][2]
    is_fraction = dest == "gpu_memory_utilization"
    try:
        value = parse_fraction(raw) if is_fraction else parse_count(raw)
    except TooLarge:
        raise EngineError(where, f"{flag} {raw}: far too large (the rule of {rule_path})") from None
    if value is None:
        kind = "a finite number" if is_fraction else "an integer such as 8192 or 8k"
        raise EngineError(where, f"{flag} {raw}: not {kind}")
    try:
        _adapter(dest).validate_python(value)
    except ValidationError as err:
        msg = err.errors()[0]["msg"]
        raise EngineError(where, f"{flag} {raw}: {msg} (the rule of {rule_path})") from None
    return value
