"""Check ``vllm serve`` options against vLLM's own argument parser, as captured.

The captured parser (every action of ``vllm serve``'s argparse parser and the
``--quantization`` method list of vLLM 0.32.0) and the code that reads it live once, in
``slo_runtime.contract``, which the in-pod launcher uses too. This module keeps the
operator's names for them and the module-level helpers over the packaged capture.
"""

from __future__ import annotations

from collections.abc import Sequence

from slo_operator.engine.fields import F_EXTRA
from slo_runtime.contract import (
    ArgAction,
    ParsedOption,
    Problem,
    VllmArgSpec,
    is_option,
    load_vllm_spec,
    normalize_flag,
)

__all__ = [
    "ArgAction",
    "ParsedOption",
    "Problem",
    "VllmArgSpec",
    "is_option",
    "normalize_flag",
    "sets_option",
    "validate",
    "validate_extra_args",
]


def validate(args: Sequence[str]) -> list[Problem]:
    """Validate a whole argument list against the packaged vLLM capture."""
    return load_vllm_spec().validate(args)


def validate_extra_args(extra: Sequence[str], path: str = F_EXTRA) -> list[Problem]:
    """Validate a user's extra arguments; problems name ``path[i]``."""
    return load_vllm_spec().validate_extra_args(extra, path)


def sets_option(args: Sequence[str], dest: str) -> bool:
    """Whether ``args`` set the option whose argparse destination is ``dest``, in any
    spelling vLLM accepts (``--max-num-batched-tokens=4k``, ``--max_num_batched_tokens``)."""
    options, _ = load_vllm_spec().parse(args)
    return any(o.action.dest == dest for o in options)
