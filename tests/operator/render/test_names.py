"""Derived names and label values are valid whatever the user's name is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slo_operator.render.names import (
    child_name,
    is_dns1035_label,
    is_label_value,
    is_object_name,
    label_value,
    service_label,
)
from slo_operator.render.objects import instance_name, service_name

# Valid custom-resource names (DNS-1123 subdomains of up to 253 characters).
_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
OBJECT_NAMES = st.lists(_LABEL, min_size=1, max_size=6).map(".".join).filter(
    lambda n: len(n) <= 253)


@pytest.mark.parametrize(
    ("name", "want_service", "want_deployment"),
    [
        pytest.param("chat", "chat", "chat-vllm", id="plain-name-unchanged"),
        pytest.param("llama-8b", "llama-8b", "llama-8b-vllm", id="dashes-unchanged"),
        pytest.param("llama-3.1-8b", "llama-3-1-8b-", "llama-3-1-8b-vllm-", id="dots-replaced"),
        pytest.param("8b-chat", "x-8b-chat-", "x-8b-chat-vllm-", id="leading-digit"),
    ],
)
def test_child_names(name: str, want_service: str, want_deployment: str) -> None:
    svc, dep = service_name(name), instance_name(name)
    # A changed name carries a hash of the original; an unchanged one is the name itself.
    assert svc == want_service or (svc.startswith(want_service) and len(svc) == len(
        want_service) + 8)
    assert dep == want_deployment or dep.startswith(want_deployment)
    assert is_dns1035_label(svc) and is_dns1035_label(dep)


def test_long_name_is_truncated_with_a_stable_hash() -> None:
    name = "a" * 253
    assert len(service_name(name)) == 63
    assert service_name(name) == service_name("a" * 253)  # stable
    assert instance_name(name).endswith(instance_name(name)[-8:])
    assert service_name("a" * 252 + "b") != service_name(name)  # no collision on a shared prefix


def test_label_values() -> None:
    assert label_value("llama-3.1-8b") == "llama-3.1-8b"  # dots are fine in label values
    long = "p" * 200
    assert len(label_value(long)) == 63 and is_label_value(label_value(long))
    assert label_value("NVIDIA H100 (MIG 1g.10gb)").startswith("NVIDIA-H100-MIG-1g.10gb")
    assert is_label_value(label_value("---"))


@given(OBJECT_NAMES)
def test_any_object_name_gives_valid_children(name: str) -> None:
    assert is_object_name(name)
    for derived in (service_name(name), instance_name(name)):
        assert is_dns1035_label(derived), derived
    assert is_label_value(service_label(name))


@given(OBJECT_NAMES, OBJECT_NAMES)
def test_different_names_never_share_children(a: str, b: str) -> None:
    if a != b:
        assert service_name(a) != service_name(b)
        assert instance_name(a) != instance_name(b)
        assert service_label(a) != service_label(b)


@given(st.text(max_size=300))
def test_any_text_gives_a_valid_label_value(text: str) -> None:
    assert is_label_value(label_value(text))
    assert is_dns1035_label(child_name(text, "vllm"))


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
