"""Derived names and label values: valid whatever the user's name is, exact at the edges.

docs/bad-input.md ("Names") is the user-facing statement: the hash is the first 8 hex digits
of the SHA-256 of the original name, children are at most 63 characters, the full name is
kept in the annotation ``inference.slo-operator.io/service-name``.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slo_operator.render.names import (
    child_name,
    is_dns1035_label,
    is_label_value,
    is_namespace_name,
    is_object_name,
    label_value,
    service_label,
    short_hash,
)

# Valid custom-resource names (DNS-1123 subdomains of up to 253 characters).
_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
OBJECT_NAMES = st.lists(_LABEL, min_size=1, max_size=6).map(".".join).filter(
    lambda n: len(n) <= 253)
CUT = "a" * 53 + "..." + "b" * 20


def sha8(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def test_short_hash_is_the_first_eight_hex_digits_of_sha256() -> None:
    assert short_hash("llama-3.1-8b") == sha8("llama-3.1-8b")
    assert len(short_hash("x")) == 8
    # A lone surrogate (possible in a decoded JSON string) still hashes, as its raw bytes.
    assert short_hash("a\ud800") == hashlib.sha256(b"a\xed\xa0\x80").hexdigest()[:8]


# ------------------------------------------------------------------ the validity checks


@pytest.mark.parametrize(
    ("value", "want_valid"),
    [
        pytest.param("a", True, id="one-letter"),
        pytest.param("a" * 63, True, id="63-characters"),
        pytest.param("a" * 64, False, id="64-characters"),
        pytest.param("", False, id="empty"),
        pytest.param("a-1", True, id="dash-and-digit"),
        pytest.param("a--b", True, id="double-dash"),
        pytest.param("1a", False, id="leading-digit"),
        pytest.param("-a", False, id="leading-dash"),
        pytest.param("a-", False, id="trailing-dash"),
        pytest.param("A", False, id="upper-case"),
        pytest.param("a.b", False, id="dot"),
        pytest.param("a_b", False, id="underscore"),
    ],
)
def test_service_names_are_dns1035_labels(value: str, want_valid: bool) -> None:
    assert is_dns1035_label(value) is want_valid


@pytest.mark.parametrize(
    ("value", "want_valid"),
    [
        pytest.param("", True, id="empty"),
        pytest.param("a", True, id="one-letter"),
        pytest.param("A" * 63, True, id="63-characters"),
        pytest.param("A" * 64, False, id="64-characters"),
        pytest.param("A_b.c-D9", True, id="all-allowed-characters"),
        pytest.param("1", True, id="one-digit"),
        pytest.param("_a", False, id="leading-underscore"),
        pytest.param("a_", False, id="trailing-underscore"),
        pytest.param(".a", False, id="leading-dot"),
        pytest.param("a.", False, id="trailing-dot"),
        pytest.param("a b", False, id="space"),
        pytest.param("a/b", False, id="slash"),
    ],
)
def test_label_values(value: str, want_valid: bool) -> None:
    assert is_label_value(value) is want_valid


@pytest.mark.parametrize(
    ("value", "want_valid"),
    [
        pytest.param("", False, id="empty"),
        pytest.param("a", True, id="one-letter"),
        pytest.param("1", True, id="one-digit"),
        pytest.param("a" * 253, True, id="253-characters"),
        pytest.param("a" * 254, False, id="254-characters"),
        pytest.param("llama-3.1-8b", True, id="dotted"),
        pytest.param("a.b.c", True, id="three-labels"),
        pytest.param("a..b", False, id="empty-label"),
        pytest.param(".a", False, id="leading-dot"),
        pytest.param("a.", False, id="trailing-dot"),
        pytest.param("-a", False, id="leading-dash"),
        pytest.param("Bad_Name", False, id="upper-case-and-underscore"),
        pytest.param("A", False, id="upper-case"),
    ],
)
def test_object_names_are_dns1123_subdomains(value: str, want_valid: bool) -> None:
    assert is_object_name(value) is want_valid


@pytest.mark.parametrize(
    ("value", "want_valid"),
    [
        pytest.param("team-a", True, id="plain"),
        pytest.param("1abc", True, id="leading-digit-allowed"),
        pytest.param("a" * 63, True, id="63-characters"),
        pytest.param("a" * 64, False, id="64-characters"),
        pytest.param("", False, id="empty"),
        pytest.param("a.b", False, id="dot"),
        pytest.param("-a", False, id="leading-dash"),
        pytest.param("a-", False, id="trailing-dash"),
        pytest.param("Team", False, id="upper-case"),
    ],
)
def test_namespace_names_are_dns1123_labels(value: str, want_valid: bool) -> None:
    assert is_namespace_name(value) is want_valid


@pytest.mark.parametrize("name", ["abc\n", "llama-3.1-8b\n"])
def test_a_trailing_newline_is_no_valid_name(name: str) -> None:
    # A regular expression's "$" also matches before a final newline: the checks match the
    # whole string instead, so such a name is refused, hashed or rebuilt, never passed on.
    assert not is_object_name(name)
    assert not is_dns1035_label(name)
    assert not is_label_value(name)
    assert is_dns1035_label(child_name(name))
    assert "\n" not in child_name(name, "vllm")
    assert is_label_value(label_value(name))


# ------------------------------------------------------------------ child names


@pytest.mark.parametrize(
    ("parent", "suffix", "want"),
    [
        pytest.param("chat", "", "chat", id="valid-unchanged"),
        pytest.param("chat", "vllm", "chat-vllm", id="valid-with-suffix"),
        pytest.param("llama-8b", "vllm", "llama-8b-vllm", id="dashes-unchanged"),
        pytest.param("a" * 58, "vllm", "a" * 58 + "-vllm", id="exactly-63-unchanged"),
        pytest.param("llama-3.1-8b", "", "llama-3-1-8b-" + sha8("llama-3.1-8b"), id="dots"),
        pytest.param("llama-3.1-8b", "vllm", "llama-3-1-8b-vllm-" + sha8("llama-3.1-8b-vllm"),
                     id="dots-with-suffix-hashes-the-whole-name"),
        pytest.param("Chat", "", "chat-" + sha8("Chat"), id="upper-case-lowered"),
        pytest.param("8b-chat", "", "x-8b-chat-" + sha8("8b-chat"), id="leading-digit"),
        pytest.param("8b-chat", "vllm", "x-8b-chat-vllm-" + sha8("8b-chat-vllm"),
                     id="leading-digit-with-suffix"),
        pytest.param("9", "", "x-9-" + sha8("9"), id="single-digit"),
        pytest.param("...", "", "x-" + sha8("..."), id="nothing-left"),
        pytest.param("", "", "x-" + sha8(""), id="empty"),
        pytest.param("-.a.-", "", "a-" + sha8("-.a.-"), id="separators-stripped"),
        pytest.param("a__b", "vllm", "a-b-vllm-" + sha8("a__b-vllm"), id="runs-collapse"),
    ],
)
def test_child_name_exact(parent: str, suffix: str, want: str) -> None:
    got = child_name(parent, suffix) if suffix else child_name(parent)
    assert got == want
    assert is_dns1035_label(got)


def test_long_child_names_fill_63_characters() -> None:
    name = "a" * 253
    assert child_name(name) == "a" * 54 + "-" + sha8(name)
    assert child_name(name, "vllm") == "a" * 49 + "-vllm-" + sha8(name + "-vllm")
    # One character over the limit is truncated too.
    assert child_name("a" * 64) == "a" * 54 + "-" + sha8("a" * 64)
    # A cut that ends on a separator drops it: no "--" before the hash.
    cut = "a" * 53 + "-" + "b" * 20
    assert child_name(cut) == "a" * 53 + "-" + sha8(cut)
    # Names that share the kept prefix still differ by the hash of the whole name.
    assert child_name("a" * 252 + "b") != child_name(name)


@given(OBJECT_NAMES)
def test_any_object_name_gives_valid_children(name: str) -> None:
    assert is_object_name(name)
    for derived in (child_name(name), child_name(name, "vllm")):
        assert is_dns1035_label(derived), derived
    assert is_label_value(service_label(name))


@given(OBJECT_NAMES, OBJECT_NAMES)
def test_different_names_never_share_children(a: str, b: str) -> None:
    if a != b:
        assert child_name(a) != child_name(b)
        assert child_name(a, "vllm") != child_name(b, "vllm")
        assert service_label(a) != service_label(b)


@given(st.text(max_size=300))
def test_any_text_gives_a_valid_label_value_and_child_name(text: str) -> None:
    assert is_label_value(label_value(text))
    assert is_dns1035_label(child_name(text, "vllm"))


# ------------------------------------------------------------------ label values


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("llama-3.1-8b", "llama-3.1-8b", id="dots-are-fine-in-label-values"),
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
        pytest.param("p" * 200, "p" * 54 + "-" + sha8("p" * 200), id="200-truncated-to-63"),
        pytest.param(CUT, "a" * 53 + "-" + sha8(CUT), id="cut-on-separator"),
    ],
)
def test_label_value_exact(value: str, want: str) -> None:
    got = label_value(value)
    assert got == want
    assert is_label_value(got)


def test_service_label_is_the_label_value_of_the_name() -> None:
    assert service_label("llama") == "llama"
    assert service_label("a" * 100) == "a" * 54 + "-" + sha8("a" * 100)
