"""Names and label values derived from user input, valid whatever the user's name is.

An InferenceService may be named anything a custom resource allows: a DNS-1123 subdomain
of up to 253 characters, dots included (``llama-3.1-8b``). What the operator derives from
it must satisfy stricter rules:

- Service names are DNS-1035 labels: ``[a-z]([-a-z0-9]*[a-z0-9])?``, at most 63 characters
  (k8s.io/apimachinery validation.IsDNS1035Label; a Service name becomes a DNS label).
- Deployment and PodDisruptionBudget names follow the same rule here: the Deployment's
  name is the stem of its ReplicaSets' and Pods' names, and Kubernetes recommends a DNS
  label for it ("for best compatibility", Deployment docs).
- Label values: at most 63 characters, ``(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?``
  (validation.IsValidLabelValue).

A name that already satisfies the rule is used as it is, so ordinary names keep their
obvious children (``chat`` -> ``chat-vllm``). Any other is cleaned, truncated and given a
stable hash suffix of the full original, the way Kubernetes controllers name children
(e.g. the ReplicaSet's pod-template-hash): two different long names never collide and the
same name always maps to the same child. Pure, stdlib only.
"""

from __future__ import annotations

import hashlib
import re

from slo_operator.api.models import GROUP

MAX_LABEL = 63
HASH_LEN = 8

# The full InferenceService name on every object and pod the operator creates: label values
# cannot hold names longer than 63 characters, annotations can.
ANNOTATION_SERVICE_NAME = f"{GROUP}/service-name"

DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123 = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_RE = re.compile(rf"^{_DNS1123}(\.{_DNS1123})*$")
DNS1123_LABEL_RE = re.compile(rf"^{_DNS1123}$")


def short_hash(text: str) -> str:
    """First ``HASH_LEN`` hex digits of the SHA-256 of ``text`` (stable across runs)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LEN]


def is_dns1035_label(value: str) -> bool:
    """Whether ``value`` is a valid Service name (DNS-1035 label)."""
    return len(value) <= MAX_LABEL and DNS1035_RE.fullmatch(value) is not None


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid Kubernetes label value."""
    return len(value) <= MAX_LABEL and LABEL_VALUE_RE.fullmatch(value) is not None


def is_object_name(value: str) -> bool:
    """Whether ``value`` is a valid custom-resource name (DNS-1123 subdomain, <= 253)."""
    # The pattern needs at least one character: no separate test for the empty name.
    return len(value) <= 253 and DNS1123_SUBDOMAIN_RE.fullmatch(value) is not None


def is_namespace_name(value: str) -> bool:
    """Whether ``value`` is a valid namespace name (DNS-1123 label)."""
    return len(value) <= MAX_LABEL and DNS1123_LABEL_RE.fullmatch(value) is not None


def child_name(parent: str, suffix: str = "") -> str:
    """A DNS-1035 label naming a child of ``parent`` (``<parent>-<suffix>`` when valid)."""
    wanted = f"{parent}-{suffix}" if suffix else parent
    if is_dns1035_label(wanted):
        return wanted
    tail = f"-{suffix}-{short_hash(wanted)}" if suffix else f"-{short_hash(wanted)}"
    words = re.findall(r"[a-z0-9]+", parent.lower())
    if not words or not words[0][0].isalpha():
        # A DNS-1035 label starts with a letter; names such as "8b-chat" are valid
        # custom-resource names but not Service names.
        words.insert(0, "x")
    return "-".join(words)[: MAX_LABEL - len(tail)].rstrip("-") + tail


def label_value(value: str) -> str:
    """A valid label value standing for ``value`` (``value`` itself when valid)."""
    if is_label_value(value):
        return value
    h = short_hash(value)
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)
    cleaned = re.sub(r"^[^A-Za-z0-9]+", "", cleaned)
    cleaned = re.sub(r"[^A-Za-z0-9]+$", "", cleaned[: MAX_LABEL - HASH_LEN - 1])
    return f"{cleaned}-{h}" if cleaned else h


def service_label(name: str) -> str:
    """Value of the service label (pod label, Prometheus ``service``) for a service name."""
    return label_value(name)
