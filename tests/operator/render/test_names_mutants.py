"""Derived names at their edges: exact values, the 63/253-character limits, the hash suffix.

docs/bad-input.md ("Names") is the user-facing statement: the hash is the first 8 hex digits
of the SHA-256 of the original name, children are at most 63 characters, the full name is
kept in the annotation ``inference.slo-operator.io/service-name``.
"""

from __future__ import annotations

import hashlib

import pytest

from slo_operator.render.names import (
    ANNOTATION_SERVICE_NAME,
    HASH_LEN,
    MAX_LABEL,
    child_name,
    is_dns1035_label,
    is_label_value,
    is_namespace_name,
    is_object_name,
    label_value,
    service_label,
    short_hash,
)

CUT = "a" * 53 + "..." + "b" * 20


def sha8(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def test_documented_constants() -> None:
    assert ANNOTATION_SERVICE_NAME == "inference.slo-operator.io/service-name"
    assert (MAX_LABEL, HASH_LEN) == (63, 8)


def test_short_hash_is_the_first_eight_hex_digits_of_sha256() -> None:
    assert short_hash("llama-3.1-8b") == sha8("llama-3.1-8b")
    assert len(short_hash("x")) == 8
    # A lone surrogate (possible in a decoded JSON string) still hashes, as its raw bytes.
    assert short_hash("a\ud800") == hashlib.sha256(b"a\xed\xa0\x80").hexdigest()[:8]


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("a", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("", False),
        ("a-1", True),
        ("a--b", True),
        ("1a", False),
        ("-a", False),
        ("a-", False),
        ("A", False),
        ("a.b", False),
        ("a_b", False),
    ],
)
def test_is_dns1035_label(value: str, want: bool) -> None:
    assert is_dns1035_label(value) is want


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("", True),
        ("a", True),
        ("A" * 63, True),
        ("A" * 64, False),
        ("A_b.c-D9", True),
        ("1", True),
        ("_a", False),
        ("a_", False),
        (".a", False),
        ("a.", False),
        ("a b", False),
        ("a/b", False),
    ],
)
def test_is_label_value(value: str, want: bool) -> None:
    assert is_label_value(value) is want


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("", False),
        ("a", True),
        ("1", True),
        ("a" * 253, True),
        ("a" * 254, False),
        ("llama-3.1-8b", True),
        ("a.b.c", True),
        ("a..b", False),
        (".a", False),
        ("a.", False),
        ("-a", False),
        ("Bad_Name", False),
        ("A", False),
    ],
)
def test_is_object_name(value: str, want: bool) -> None:
    assert is_object_name(value) is want


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("team-a", True),
        ("1abc", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("", False),
        ("a.b", False),
        ("-a", False),
        ("a-", False),
        ("Team", False),
    ],
)
def test_is_namespace_name(value: str, want: bool) -> None:
    assert is_namespace_name(value) is want


@pytest.mark.parametrize(
    ("parent", "suffix", "want"),
    [
        pytest.param("chat", "", "chat", id="valid-unchanged"),
        pytest.param("chat", "vllm", "chat-vllm", id="valid-with-suffix"),
        pytest.param("a" * 58, "vllm", "a" * 58 + "-vllm", id="exactly-63-unchanged"),
        pytest.param("llama-3.1-8b", "", "llama-3-1-8b-" + sha8("llama-3.1-8b"), id="dots"),
        pytest.param("llama-3.1-8b", "vllm", "llama-3-1-8b-vllm-" + sha8("llama-3.1-8b-vllm"),
                     id="dots-with-suffix-hashes-the-whole-name"),
        pytest.param("Chat", "", "chat-" + sha8("Chat"), id="upper-case-lowered"),
        pytest.param("8b-chat", "", "x-8b-chat-" + sha8("8b-chat"), id="leading-digit"),
        pytest.param("9", "", "x-9-" + sha8("9"), id="single-digit"),
        pytest.param("...", "", "x-" + sha8("..."), id="nothing-left"),
        pytest.param("", "", "x-" + sha8(""), id="empty"),
        pytest.param("-.a.-", "", "a-" + sha8("-.a.-"), id="separators-stripped"),
        pytest.param("a__b", "vllm", "a-b-vllm-" + sha8("a__b-vllm"), id="runs-collapse"),
    ],
)
def test_child_name_exact(parent: str, suffix: str, want: str) -> None:
    assert child_name(parent, suffix) == want
    assert is_dns1035_label(want)


def test_child_name_default_suffix_is_none() -> None:
    assert child_name("chat") == "chat"
    assert child_name("a.b") == "a-b-" + sha8("a.b")


def test_long_child_names_fill_63_characters() -> None:
    name = "a" * 253
    assert child_name(name) == "a" * 54 + "-" + sha8(name)
    assert child_name(name, "vllm") == "a" * 49 + "-vllm-" + sha8(name + "-vllm")
    # One character over the limit is truncated too.
    assert child_name("a" * 64) == "a" * 54 + "-" + sha8("a" * 64)
    # A cut that ends on a separator drops it: no "--" before the hash.
    cut = "a" * 53 + "-" + "b" * 20
    assert child_name(cut) == "a" * 53 + "-" + sha8(cut)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("llama-3.1-8b", "llama-3.1-8b", id="valid-unchanged"),
        pytest.param("", "", id="empty-is-valid"),
        pytest.param("A_b", "A_b", id="underscore-inside"),
        pytest.param("NVIDIA H100 (MIG 1g.10gb)",
                     "NVIDIA-H100-MIG-1g.10gb-" + sha8("NVIDIA H100 (MIG 1g.10gb)"),
                     id="runs-replaced-trailing-stripped"),
        pytest.param("---", sha8("---"), id="nothing-left-hash-only"),
        pytest.param("_._abc", "abc-" + sha8("_._abc"), id="leading-stripped"),
        pytest.param("abc._", "abc-" + sha8("abc._"), id="trailing-stripped"),
        pytest.param("a/b", "a-b-" + sha8("a/b"), id="slash"),
        pytest.param("p" * 64, "p" * 54 + "-" + sha8("p" * 64), id="64-truncated"),
        pytest.param(CUT, "a" * 53 + "-" + sha8(CUT), id="cut-on-separator"),
    ],
)
def test_label_value_exact(value: str, want: str) -> None:
    assert label_value(value) == want
    assert is_label_value(want)


def test_service_label_is_the_label_value_of_the_name() -> None:
    assert service_label("llama") == "llama"
    assert service_label("a" * 100) == "a" * 54 + "-" + sha8("a" * 100)
