"""Generate the CustomResourceDefinitions from the pydantic models.

Kubernetes wants a *structural* OpenAPI v3.0 schema: no ``$ref``, no ``anyOf`` with
``null``, ``exclusiveMinimum`` as a boolean beside ``minimum``, no ``title``. Pydantic
emits JSON Schema 2020-12, so this module rewrites one into the other. It is pure: models
in, plain dicts out; ``slo-operator crds`` prints them and a test holds ``crds/`` equal.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from pydantic import BaseModel

from slo_operator.api.models import (
    GROUP,
    VERSION,
    InferenceServiceSpec,
    InferenceServiceStatus,
    SLOPolicySpec,
    SLOPolicyStatus,
    TenantSpec,
)

CATEGORY = "slo-operator"

# What `kubectl explain` shows for the fields every object has.
_API_VERSION_DOC = (
    "APIVersion defines the versioned schema of this representation of an object. "
    "Servers should convert recognized schemas to the latest internal value, and may reject "
    "unrecognized values."
)
_KIND_DOC = (
    "Kind is a string value representing the REST resource this object represents. "
    "In CamelCase."
)

_DROP_KEYS = {"title"}


def _inline(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """Resolve $ref, collapse Optional, convert 2020-12 keywords to OpenAPI 3.0."""
    if isinstance(schema, list):
        return [_inline(s, defs) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        # _inline builds new dicts and never changes its input: a shallow merge will do.
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        return _inline({**defs[name], **extra}, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        if len(options) == 1:
            return _inline({**options[0], **rest}, defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROP_KEYS:
            continue
        if key == "properties":
            out[key] = {k: _inline(v, defs) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _inline(value, defs)
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key == "const":
            out["enum"] = [value]
        elif key == "default" and value is None:
            continue
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "additionalProperties" in out and out["additionalProperties"] is False:
        # extra="forbid" in pydantic; the API server prunes unknown fields anyway.
        del out["additionalProperties"]
    if out.get("additionalProperties") is True and out.get("x-kubernetes-preserve-unknown-fields"):
        # A free-form object (dict[str, Any]): preserving unknown fields already says so.
        del out["additionalProperties"]
    return out


def _defaults_for_nested_objects(schema: dict[str, Any]) -> None:
    """Optional objects whose fields all have defaults get those defaults as a whole.

    The API server applies defaults only inside objects that exist, so without this an
    omitted ``spec.objectives`` would come back without its 800 ms default. The default
    must be the fully defaulted object, not ``{}``: the API server checks a default
    against the CEL rules as written, before defaulting inside it.
    """
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        if prop.get("type") == "object" and "properties" in prop:
            _defaults_for_nested_objects(prop)
            if name not in required and "default" not in prop and not prop.get("required"):
                prop["default"] = _materialized_default(prop)


def _materialized_default(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        k: copy.deepcopy(v["default"])
        for k, v in schema.get("properties", {}).items()
        if "default" in v
    }


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A pydantic model as a structural OpenAPI v3.0 schema."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _inline(raw, defs)
    _defaults_for_nested_objects(schema)
    return schema


def _without_defaults(schema: Any) -> Any:
    """``schema`` with every ``default`` removed (recursively)."""
    if isinstance(schema, dict):
        return {k: _without_defaults(v) for k, v in schema.items() if k != "default"}
    if isinstance(schema, list):
        return [_without_defaults(v) for v in schema]
    return schema


def _status_schema(model: type[BaseModel]) -> dict[str, Any]:
    # No defaults in status: the operator writes all of it, and a default the API server
    # fills in (an optional object whose fields all have defaults) is a field the
    # operator did not write, so every pass would find the status changed and write it.
    schema: dict[str, Any] = _without_defaults(openapi_schema(model))
    # Status is written by the operator only; keep it open for fields added in newer
    # versions so an older operator never fails to read what a newer one wrote.
    schema["x-kubernetes-preserve-unknown-fields"] = True
    return schema


def _crd(
    kind: str,
    plural: str,
    short: str,
    spec_model: type[BaseModel],
    status_model: type[BaseModel] | None,
    columns: list[dict[str, Any]],
    spec_required: bool,
    description: str,
    scope: str = "Namespaced",
) -> dict[str, Any]:
    spec_schema = openapi_schema(spec_model)
    root: dict[str, Any] = {
        "description": description,
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "description": _API_VERSION_DOC},
            "kind": {"type": "string", "description": _KIND_DOC},
            # The API server forbids anything but the type here (kubectl explain shows
            # ObjectMeta's own documentation for metadata).
            "metadata": {"type": "object"},
            "spec": spec_schema,
        },
    }
    if status_model is not None:
        root["properties"]["status"] = _status_schema(status_model)
    if spec_required:
        root["required"] = ["spec"]
    else:
        spec_schema["default"] = _materialized_default(spec_schema)
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "slo-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    **({"subresources": {"status": {}}} if status_model is not None else {}),
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }
    return crd


def inference_service_crd() -> dict[str, Any]:
    """The InferenceService CustomResourceDefinition."""
    columns: list[dict[str, Any]] = [
        {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
        {"name": "Batch", "type": "integer", "jsonPath": ".status.batchLimit"},
        {"name": "GPU", "type": "string", "jsonPath": ".status.hardware.product"},
        {"name": "E2Ems", "type": "number", "jsonPath": ".status.observed.e2eMs"},
        {"name": "TTFTms", "type": "number", "jsonPath": ".status.observed.ttftMs"},
        {
            "name": "SLO",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="SLOCompliant")].status',
        },
        {
            "name": "Status",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
            "priority": 1,
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(
        "InferenceService",
        "inferenceservices",
        "infsvc",
        InferenceServiceSpec,
        InferenceServiceStatus,
        columns,
        spec_required=True,
        description=(
            "InferenceService runs a vLLM model server (short name infsvc). slo-operator "
            "chooses engine settings for the GPUs it lands on and moves replicas and the batch "
            "limit to keep it inside its SLOPolicy at the lowest GPU cost."
        ),
    )


def slo_policy_crd() -> dict[str, Any]:
    """The SLOPolicy CustomResourceDefinition."""
    columns: list[dict[str, Any]] = [
        {"name": "E2Ems", "type": "integer", "jsonPath": ".spec.objectives.e2eLatencyMs"},
        {"name": "TTFTms", "type": "integer", "jsonPath": ".spec.objectives.ttftMs"},
        {"name": "Target", "type": "number", "jsonPath": ".spec.attainmentTarget"},
        {"name": "Attainment", "type": "number", "jsonPath": ".status.attainment"},
        {"name": "Services", "type": "integer", "jsonPath": ".status.boundCount"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(
        "SLOPolicy",
        "slopolicies",
        "slo",
        SLOPolicySpec,
        SLOPolicyStatus,
        columns,
        spec_required=False,
        description=(
            "SLOPolicy (short name slo) declares, per tenant or service class, what good "
            "latency means and how InferenceServices that reference it may scale and batch."
        ),
    )


def tenant_crd() -> dict[str, Any]:
    """The Tenant CustomResourceDefinition (cluster-scoped: the platform team's)."""
    columns: list[dict[str, Any]] = [
        {"name": "GPUBudget", "type": "integer", "jsonPath": ".spec.gpuBudget"},
        {"name": "MaxPriority", "type": "integer", "jsonPath": ".spec.maxPriority"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(
        "Tenant",
        "tenants",
        "slotenant",
        TenantSpec,
        None,
        columns,
        spec_required=True,
        description=(
            "Tenant (cluster-scoped, short name slotenant) binds namespaces to a tenant and "
            "owns its GPU budget and priority ceiling: an SLOPolicy may name a tenant in "
            "spec.tenant only from a namespace the tenant binds."
        ),
        scope="Cluster",
    )


def all_crds() -> list[dict[str, Any]]:
    """Every CustomResourceDefinition of the API."""
    return [inference_service_crd(), slo_policy_crd(), tenant_crd()]


def crd_yaml(crd: dict[str, Any]) -> str:
    """The committed form of one CRD (``crds/<name>.yaml``)."""
    header = "# Generated by `slo-operator crds` from slo_operator.api; do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=100)
