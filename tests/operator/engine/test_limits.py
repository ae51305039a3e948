"""Range checks of engine values given as extra args: parsing, bounds and the error text."""

from __future__ import annotations

import pytest

from slo_operator.engine.limits import TooLarge, checked, parse_count, parse_fraction
from slo_operator.engine.types import EngineError
from tests.support.golden import Golden


@pytest.mark.parametrize(("raw", "want"), [
    ("8192", 8192), ("16", 16), (" 16 ", 16), ("0", 0), ("0k", 0), ("-3", -3), ("-2k", -2000),
    # vLLM's human_readable_int: decimal suffixes in lower case, binary in upper case.
    ("1k", 10**3), ("8k", 8000), ("1m", 10**6), ("2m", 2_000_000), ("1g", 10**9), ("1t", 10**12),
    ("1K", 2**10), ("8K", 8192), ("1M", 2**20), ("1G", 2**30), ("1T", 2**40),
    ("1Ki", 2**10), ("1Mi", 2**20), ("1Gi", 2**30), ("1Ti", 2**40), ("3Mi", 3 * 2**20),
    ("1.5Ki", 1536), ("2.5k", 2500), ("0.5K", 512), ("1e3", 1000), ("1.0", 1),
])
def test_parse_count_reads_vllms_human_readable_ints(raw: str, want: int) -> None:
    got = parse_count(raw)
    assert got == want
    assert type(got) is int


@pytest.mark.parametrize("raw", [
    "1.5", "0.0001k", "1.0001K", "abc", "k", "Ki", "i", "1i", "1x", "1kk", "1Kk", "1Mik", "",
    " ", "inf", "-inf", "nan", "infk", "snan", "1e-31", "1e-40k", "1e-30", "1e-20T",
    # Scaling would underflow these to zero.
    "1e-999999999", "1e-999999999k",
])
def test_parse_count_refuses_what_is_no_count(raw: str) -> None:
    assert parse_count(raw) is None


def test_parse_count_refuses_astronomical_numbers_without_building_them() -> None:
    assert parse_count("1e30") == 10**30
    assert parse_count("9" * 28) == int("9" * 28)
    with pytest.raises(TooLarge) as err:
        parse_count("1e31")
    assert str(err.value) == "1e31"
    with pytest.raises(TooLarge):
        parse_count("1" + "0" * 31)
    with pytest.raises(TooLarge):
        parse_count("1e999999999")
    # The digits are counted before the suffix scales them.
    assert parse_count("1e30T") == 10**30 * 2**40


@pytest.mark.parametrize(("raw", "want"), [
    ("0.5", 0.5), ("1", 1.0), (" 0.25 ", 0.25), ("1e-3", 0.001), ("-2", -2.0),
    ("inf", None), ("-inf", None), ("nan", None), ("abc", None), ("", None), ("0.5k", None),
])
def test_parse_fraction_takes_finite_floats_only(raw: str, want: float | None) -> None:
    assert parse_fraction(raw) == want


@pytest.mark.parametrize(("dest", "raw", "want"), [
    pytest.param("tensor_parallel_size", "1", 1, id="tp-lowest"),
    pytest.param("tensor_parallel_size", "64", 64, id="tp-highest"),
    pytest.param("gpu_memory_utilization", "1", 1.0, id="memory-fraction-whole-gpu"),
    pytest.param("gpu_memory_utilization", "0.001", 0.001, id="memory-fraction-tiny"),
    pytest.param("max_num_batched_tokens", "8k", 8000, id="budget-with-suffix"),
    pytest.param("max_num_batched_tokens", "10000000", 10_000_000, id="budget-highest"),
    pytest.param("max_model_len", "16", 16, id="context-shortest"),
    pytest.param("max_model_len", "32Ki", 32768, id="context-binary-suffix"),
    pytest.param("max_num_seqs", "1", 1, id="batch-lowest"),
    pytest.param("max_num_seqs", "4096", 4096, id="batch-highest"),
    pytest.param("max_num_seqs", "4Ki", 4096, id="batch-highest-with-suffix"),
])
def test_checked_accepts_the_field_range(dest: str, raw: str, want: float) -> None:
    got = checked(dest, raw, "spec.engine.extraArgs[1]", "--flag")
    assert got == want
    assert type(got) is type(want)


@pytest.mark.parametrize(("dest", "raw"), [
    pytest.param("tensor_parallel_size", "0", id="tp-zero"),
    pytest.param("tensor_parallel_size", "65", id="tp-above-64"),
    pytest.param("gpu_memory_utilization", "0", id="memory-fraction-zero"),
    pytest.param("gpu_memory_utilization", "1.01", id="memory-fraction-above-one"),
    pytest.param("gpu_memory_utilization", "nan", id="memory-fraction-nan"),
    pytest.param("gpu_memory_utilization", "half", id="memory-fraction-word"),
    pytest.param("max_num_batched_tokens", "10000001", id="budget-above-ten-million"),
    pytest.param("max_num_batched_tokens", "1.5", id="budget-fraction"),
    pytest.param("max_num_batched_tokens", "1e40", id="budget-astronomical"),
    pytest.param("max_model_len", "15", id="context-below-16"),
    pytest.param("max_num_seqs", "0", id="batch-zero"),
    pytest.param("max_num_seqs", "4097", id="batch-above-4096"),
    pytest.param("max_num_seqs", "lots", id="batch-word"),
])
def test_checked_refuses_with_the_spec_fields_rule(dest: str, raw: str, golden: Golden,
                                                   request: pytest.FixtureRequest) -> None:
    with pytest.raises(EngineError) as err:
        checked(dest, raw, "spec.engine.extraArgs[3]", "--flag")
    assert err.value.field == "spec.engine.extraArgs[3]"
    # No pydantic traceback chained to what the user reads.
    assert err.value.__cause__ is None
    assert err.value.__suppress_context__ or err.value.__context__ is None
    golden.check("engine", f"limits-{request.node.callspec.id}", err.value.message)
