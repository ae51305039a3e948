"""Range checks of engine values given as extra args: parsing, bounds and the error text."""

from __future__ import annotations

import pytest

from slo_operator.engine.limits import (
    OPTION_RULES,
    TooLarge,
    _adapter,
    checked,
    parse_count,
    parse_fraction,
)
from slo_operator.engine.types import EngineError


@pytest.mark.parametrize(("raw", "want"), [
    ("1k", 10**3), ("1m", 10**6), ("1g", 10**9), ("1t", 10**12),
    ("1K", 2**10), ("1M", 2**20), ("1G", 2**30), ("1T", 2**40),
    ("1Ki", 2**10), ("1Mi", 2**20), ("1Gi", 2**30), ("1Ti", 2**40),
    ("3Mi", 3 * 2**20), ("2.5k", 2500), ("0.5K", 512), (" 16 ", 16), ("0", 0), ("0k", 0),
    ("1e3", 1000), ("1.0", 1), ("-2k", -2000),
])
def test_parse_count_suffixes(raw: str, want: int) -> None:
    got = parse_count(raw)
    assert got == want
    assert type(got) is int


@pytest.mark.parametrize("raw", [
    "1.5", "0.0001k", "1.0001K", "k", "Ki", "i", "1i", "1x", "1kk", "1Kk", "1Mik", "", " ",
    "inf", "-inf", "nan", "infk", "snan", "1e-31", "1e-40k", "1e-30", "1e-20T",
    # Scaling would underflow these to zero.
    "1e-999999999", "1e-999999999k",
])
def test_parse_count_refuses_what_is_no_count(raw: str) -> None:
    assert parse_count(raw) is None


def test_parse_count_digit_limit() -> None:
    assert parse_count("1e30") == 10**30
    assert parse_count("9" * 28) == int("9" * 28)
    with pytest.raises(TooLarge) as err:
        parse_count("1e31")
    assert str(err.value) == "1e31"
    with pytest.raises(TooLarge):
        parse_count("1" + "0" * 31)
    # The digits are counted before the suffix scales them.
    assert parse_count("1e30T") == 10**30 * 2**40


@pytest.mark.parametrize(("raw", "want"), [
    ("0.5", 0.5), ("1", 1.0), (" 0.25 ", 0.25), ("1e-3", 0.001), ("-2", -2.0),
    ("inf", None), ("-inf", None), ("nan", None), ("abc", None), ("", None), ("0.5k", None),
])
def test_parse_fraction(raw: str, want: float | None) -> None:
    assert parse_fraction(raw) == want


def test_option_rules_name_the_crd_paths() -> None:
    assert {dest: rule[2] for dest, rule in OPTION_RULES.items()} == {
        "tensor_parallel_size": "spec.engine.tensorParallelSize",
        "gpu_memory_utilization": "spec.engine.gpuMemoryUtilization",
        "max_num_batched_tokens": "spec.engine.maxNumBatchedTokens",
        "max_model_len": "spec.model.maxModelLen",
        "max_num_seqs": "spec.batching.maxBatch",
    }


@pytest.mark.parametrize(("dest", "raw", "want"), [
    ("tensor_parallel_size", "1", 1),
    ("tensor_parallel_size", "64", 64),
    ("gpu_memory_utilization", "1", 1.0),
    ("gpu_memory_utilization", "0.001", 0.001),
    ("max_num_batched_tokens", "8k", 8000),
    ("max_num_batched_tokens", "10000000", 10_000_000),
    ("max_model_len", "16", 16),
    ("max_model_len", "32Ki", 32768),
    ("max_num_seqs", "1", 1),
    ("max_num_seqs", "4096", 4096),
    ("max_num_seqs", "4Ki", 4096),
])
def test_checked_accepts_the_field_range(dest: str, raw: str, want: float) -> None:
    got = checked(dest, raw, "spec.engine.extraArgs[1]", "--flag")
    assert got == want
    assert type(got) is type(want)


@pytest.mark.parametrize(("dest", "raw", "message"), [
    ("tensor_parallel_size", "0",
     "--flag 0: Input should be greater than or equal to 1 "
     "(the rule of spec.engine.tensorParallelSize)"),
    ("tensor_parallel_size", "65",
     "--flag 65: Input should be less than or equal to 64 "
     "(the rule of spec.engine.tensorParallelSize)"),
    ("gpu_memory_utilization", "0",
     "--flag 0: Input should be greater than 0 (the rule of spec.engine.gpuMemoryUtilization)"),
    ("gpu_memory_utilization", "1.01",
     "--flag 1.01: Input should be less than or equal to 1 "
     "(the rule of spec.engine.gpuMemoryUtilization)"),
    ("gpu_memory_utilization", "nan", "--flag nan: not a finite number"),
    ("gpu_memory_utilization", "half", "--flag half: not a finite number"),
    ("max_num_batched_tokens", "10000001",
     "--flag 10000001: Input should be less than or equal to 10000000 "
     "(the rule of spec.engine.maxNumBatchedTokens)"),
    ("max_num_batched_tokens", "1.5", "--flag 1.5: not an integer such as 8192 or 8k"),
    ("max_num_batched_tokens", "1e40",
     "--flag 1e40: far too large (the rule of spec.engine.maxNumBatchedTokens)"),
    ("max_model_len", "15",
     "--flag 15: Input should be greater than or equal to 16 (the rule of spec.model.maxModelLen)"),
    ("max_num_seqs", "0",
     "--flag 0: Input should be greater than or equal to 1 (the rule of spec.batching.maxBatch)"),
    ("max_num_seqs", "4097",
     "--flag 4097: Input should be less than or equal to 4096 "
     "(the rule of spec.batching.maxBatch)"),
    ("max_num_seqs", "lots", "--flag lots: not an integer such as 8192 or 8k"),
])
def test_checked_refuses_with_the_field_rule(dest: str, raw: str, message: str) -> None:
    with pytest.raises(EngineError) as err:
        checked(dest, raw, "spec.engine.extraArgs[3]", "--flag")
    assert err.value.field == "spec.engine.extraArgs[3]"
    assert err.value.message == message
    assert err.value.__cause__ is None
    assert err.value.__suppress_context__ or err.value.__context__ is None


@pytest.mark.parametrize("dest", sorted(OPTION_RULES))
def test_each_field_rule_is_built_once(dest: str) -> None:
    assert _adapter(dest) is _adapter(dest)
