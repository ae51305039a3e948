"""Which tenant an SLOPolicy runs for, and whether it may (pure).

A tenant's GPU budget and priority ceiling belong to the platform team: a cluster-scoped
``Tenant`` object binds namespaces (``spec.namespaces`` by name, ``spec.namespaceSelector``
by label) and owns ``gpuBudget`` and ``maxPriority``. An SLOPolicy's tenant is resolved
from its namespace and ``spec.tenant``:

- ``spec.tenant`` names a Tenant object: the Tenant must bind the policy's namespace, or the
  policy is refused (``NamespaceNotBound``): a policy in namespace A cannot draw on tenant
  B's budget or priority by naming it.
- ``spec.tenant`` names no Tenant object: allowed only where no Tenant binds the namespace
  (``NamespaceBoundElsewhere`` otherwise: a free-text name would escape the binding
  tenant's budget) and tenants are not required.
- no ``spec.tenant``: the one Tenant that binds the namespace (``TenantAmbiguous`` when
  several do), else the namespace itself, as before Tenants existed.
- ``--require-tenants``: a namespace no Tenant binds gets no policy (``TenantRequired``).

A refused policy is treated like an invalid one: its services say so (``PolicyBound``
False) and hold what runs. Budgets: the Tenant's ``gpuBudget`` is a ceiling that policies
naming the tenant may lower, never raise (``loop.tenant_budgets``); a policy's
``priority`` above the Tenant's ``maxPriority`` takes effect at the ceiling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from slo_operator.api import conditions as C
from slo_operator.api.cluster import Snapshot
from slo_operator.api.errors import field_problems, summarize
from slo_operator.api.models import NamespaceSelector, TenantSpec

# The label the API server sets on every namespace (Kubernetes 1.22+): a namespace the
# cache has not seen yet still matches a selector on its name.
NAME_LABEL = "kubernetes.io/metadata.name"


def selects(selector: NamespaceSelector, labels: Mapping[str, str]) -> bool:
    """Whether ``selector`` selects a namespace with ``labels`` (the label-selector API's
    semantics; an empty selector selects nothing: binding every namespace takes a term)."""
    if not selector.match_labels and not selector.match_expressions:
        return False
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    for req in selector.match_expressions:
        has, value = req.key in labels, labels.get(req.key)
        ok = {"In": has and value in req.values,
              "NotIn": not has or value not in req.values,
              "Exists": has,
              "DoesNotExist": not has}[req.operator]
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class Claim:
    """A policy's tenant: ``tenant`` None when the policy is refused (``reason``,
    ``message`` say why); ``spec`` the Tenant object's spec when one governs it."""

    tenant: str | None
    reason: str
    message: str
    spec: TenantSpec | None = None

    @property
    def refused(self) -> bool:
        return self.tenant is None

    def priority(self, wanted: int) -> int:
        """The priority a policy asking ``wanted`` takes effect with."""
        ceiling = self.spec.max_priority if self.spec else None
        return wanted if ceiling is None else min(wanted, ceiling)


@dataclass(frozen=True)
class Tenancy:
    """The Tenant objects and namespace labels one pass reads."""

    tenants: Mapping[str, TenantSpec] = field(default_factory=dict)
    invalid: Mapping[str, str] = field(default_factory=dict)  # name -> field problems
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    require: bool = False

    @classmethod
    def of(cls, snap: Snapshot, require: bool = False) -> Tenancy:
        """From the snapshot's Tenant bodies and namespace labels; a Tenant that fails
        validation (its CRD bypassed) binds nothing and refuses the policies naming it.
        The last result is reused while the snapshot holds the same mappings (every
        service of a pass plans from one snapshot)."""
        last = _LAST.get("tenancy")
        if last is not None and last[0] is snap.tenants and (
                last[1] is snap.namespace_labels and last[2].require == require):
            return last[2]
        made = cls._parse(snap, require)
        _LAST["tenancy"] = (snap.tenants, snap.namespace_labels, made)
        return made

    @classmethod
    def _parse(cls, snap: Snapshot, require: bool) -> Tenancy:
        tenants: dict[str, TenantSpec] = {}
        invalid: dict[str, str] = {}
        for name, body in snap.tenants.items():
            try:
                tenants[name] = TenantSpec.model_validate(body.get("spec") or {})
            except ValidationError as err:
                invalid[name] = summarize(field_problems(err))
        return cls(tenants, invalid, snap.namespace_labels, require)

    def binds(self, name: str, namespace: str) -> bool:
        spec = self.tenants.get(name)
        if spec is None:
            return False
        if namespace in spec.namespaces:
            return True
        labels = self.labels.get(namespace) or {NAME_LABEL: namespace}
        return spec.namespace_selector is not None and selects(spec.namespace_selector, labels)

    def binding(self, namespace: str) -> list[str]:
        """The Tenants that bind ``namespace``, by name."""
        return sorted(t for t in self.tenants if self.binds(t, namespace))

    def claim(self, namespace: str, claimed: str | None) -> Claim:
        """The tenant a policy in ``namespace`` with ``spec.tenant`` = ``claimed`` runs
        for, or why it may not run."""
        where = f"namespace {namespace}"
        bound = self.binding(namespace)
        if claimed is not None:
            if claimed in self.invalid:
                return Claim(None, C.TENANT_INVALID,
                             f"Tenant {claimed} named in spec.tenant is invalid: "
                             f"{self.invalid[claimed]}")
            if claimed in self.tenants:
                if claimed in bound:
                    return Claim(claimed, C.TENANT_BOUND_BY_OBJECT,
                                 f"Tenant {claimed} binds {where}", self.tenants[claimed])
                return Claim(None, C.NAMESPACE_NOT_BOUND,
                             f"spec.tenant names tenant {claimed}, whose Tenant object does "
                             f"not bind {where} (Tenant spec.namespaces or "
                             "spec.namespaceSelector)")
            if bound:
                return Claim(None, C.NAMESPACE_BOUND_ELSEWHERE,
                             f"spec.tenant names {claimed}, but {where} belongs to tenant "
                             f"{', '.join(bound)}: leave spec.tenant out or name it")
            if self.require:
                return Claim(None, C.TENANT_REQUIRED,
                             f"no Tenant object named {claimed} (spec.tenant) binds {where}, "
                             "and this operator requires one (--require-tenants)")
            return Claim(claimed, C.TENANT_UNMANAGED,
                         f"Tenant {claimed} from spec.tenant (no Tenant object governs it)")
        if len(bound) > 1:
            return Claim(None, C.TENANT_AMBIGUOUS,
                         f"{where} is bound by several Tenants ({', '.join(bound)}): name one "
                         "in spec.tenant")
        if bound:
            return Claim(bound[0], C.TENANT_BOUND_BY_OBJECT, f"Tenant {bound[0]} binds {where}",
                         self.tenants[bound[0]])
        if self.require:
            return Claim(None, C.TENANT_REQUIRED,
                         f"no Tenant binds {where}, and this operator requires one "
                         "(--require-tenants)")
        return Claim(namespace, C.TENANT_UNMANAGED,
                     f"Tenant {namespace} (the namespace; no Tenant object binds it)")

    def budgets(self) -> dict[str, int | None]:
        """Each governed tenant's own budget (None: none set)."""
        return {name: spec.gpu_budget for name, spec in self.tenants.items()}


# The last Tenancy parsed and the snapshot mappings it was parsed from.
_LAST: dict[str, tuple[Mapping[str, Any], Mapping[str, Any], Tenancy]] = {}
