"""The operator's configuration: one object, built once from ``slo-operator run``'s options
(each also read from its environment variable) and handed to the handlers through kopf's
memo. Nothing else reads the environment for configuration.

Every setting has a flag and an environment variable; :data:`OPTIONS` is the table the CLI
builds its options from and docs/install.md lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version


def operator_version() -> str:
    """The installed slo-operator distribution's version: the one place it is read from."""
    try:
        return _dist_version("slo-operator")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return "0.0.0+unknown"


def default_runtime_image(version: str | None = None) -> str:
    """The image whose init container copies the runtime into vLLM pods: this release's."""
    return f"ghcr.io/slo-operator/slo-operator:{version or operator_version()}"


DEFAULT_PEERING_LIFETIME_S = 15


@dataclass(frozen=True)
class Option:
    """One setting: its field, flag, environment variable, help text."""

    field: str
    flag: str
    env: str
    help: str


@dataclass(frozen=True)
class OperatorSettings:
    """Everything ``slo-operator run`` is configured with (defaults are the documented ones)."""

    namespaces: tuple[str, ...] = ()
    kubeconfig: str | None = None
    liveness: str = "http://0.0.0.0:8080/healthz"
    prometheus_url: str | None = None
    prometheus_timeout: float = 10.0
    interval: float = 20.0
    apply_ttl: float = 600.0
    peering: str | None = None
    peering_priority: int | None = None
    peering_lifetime: int = DEFAULT_PEERING_LIFETIME_S
    metrics_port: int = 0
    workers: int = 8
    profiles_dir: str | None = None
    runtime_image: str | None = None
    manage_alert_rules: bool = False
    alert_rule_labels: tuple[str, ...] = ()
    require_tenants: bool = False
    activator_service: str | None = None

    @property
    def activator(self) -> tuple[str, str] | None:
        """``--activator-service NAMESPACE/NAME`` as (namespace, name)."""
        if not self.activator_service:
            return None
        ns, _, name = self.activator_service.partition("/")
        return ns, name

    @property
    def alert_labels(self) -> dict[str, str]:
        """``--alert-rule-label KEY=VALUE`` settings as a label map."""
        return dict(item.split("=", 1) for item in self.alert_rule_labels)

    @property
    def write_concurrency(self) -> int:
        """Services of one periodic pass whose writes run at once: half of ``--workers``.
        Each takes a worker thread for its API round trips; the other half is left to the
        handlers (creations, owned-object events), so a pass never starves them. With the
        default 8, a pass of 1,000 status patches (~10 ms each: the heartbeat's) takes
        about 2.5 s instead of 10 s one by one."""
        return max(1, self.workers // 2)

    @property
    def image(self) -> str:
        """The runtime image to use: the configured one, else this release's."""
        return self.runtime_image or default_runtime_image()

    def __post_init__(self) -> None:
        for name in ("prometheus_timeout", "interval", "apply_ttl"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{_flag(name)} must be positive, got {getattr(self, name)}")
        if self.workers < 1:
            raise ValueError(f"{_flag('workers')} must be at least 1, got {self.workers}")
        if self.activator_service:
            ns, sep, name = self.activator_service.partition("/")
            if not sep or not _dns_label(ns) or not _dns_label(name):
                raise ValueError(
                    f"{_flag('activator_service')} must be NAMESPACE/NAME of the activator's "
                    f"Service (e.g. slo-operator/slo-operator-activator), got "
                    f"{self.activator_service!r}")
        for item in self.alert_rule_labels:
            if "=" not in item:
                raise ValueError(
                    f"{_flag('alert_rule_labels')} must be KEY=VALUE "
                    f"(e.g. release=kube-prometheus-stack), got {item!r}")


OPTIONS: tuple[Option, ...] = (
    Option("namespaces", "--namespace", "SLO_NAMESPACES",
           "Watch only these namespaces (repeatable; the variable is space-separated); "
           "default: all."),
    Option("kubeconfig", "--kubeconfig", "SLO_KUBECONFIG", "Kubeconfig (default: in-cluster)."),
    Option("liveness", "--liveness", "SLO_LIVENESS", "Liveness endpoint URL ('' turns it off)."),
    Option("prometheus_url", "--prometheus-url", "SLO_PROMETHEUS_URL",
           "Prometheus base URL the SLO loop queries (default: no SLO signals)."),
    Option("prometheus_timeout", "--prometheus-timeout", "SLO_PROMETHEUS_TIMEOUT",
           "Seconds per PromQL query."),
    Option("interval", "--interval", "SLO_RECONCILE_INTERVAL",
           "Seconds between periodic SLO passes."),
    Option("apply_ttl", "--apply-ttl", "SLO_APPLY_TTL",
           "Seconds after which an unchanged owned object is applied again."),
    Option("peering", "--peering", "SLO_PEERING",
           "kopf peering object name: replicas sharing it elect one to act "
           "(default: standalone)."),
    Option("peering_priority", "--peering-priority", "SLO_PEERING_PRIORITY",
           "Peering priority (default: earlier start acts)."),
    Option("peering_lifetime", "--peering-lifetime", "SLO_PEERING_LIFETIME",
           "Seconds without keep-alive after which a peer is presumed dead."),
    Option("metrics_port", "--metrics-port", "SLO_METRICS_PORT",
           "Serve the operator's /metrics on this port (0: off)."),
    Option("workers", "--workers", "SLO_WORKERS",
           "Threads for the Kubernetes calls (and kopf's sync handlers); a periodic pass "
           "writes for at most half as many services at once."),
    Option("profiles_dir", "--profiles-dir", "SLO_PROFILES_DIR",
           "More node profiles (JSON) beside the shipped ones."),
    Option("runtime_image", "--runtime-image", "SLO_RUNTIME_IMAGE",
           "Image the vLLM pods' init container copies the runtime from "
           "(default: this release's operator image)."),
    Option("manage_alert_rules", "--manage-alert-rules", "SLO_MANAGE_ALERT_RULES",
           "Keep one PrometheusRule per SLOPolicy (the rules `slo-operator rules` prints), "
           "owned by the policy; needs the prometheus-operator CRDs (docs/alerting.md)."),
    Option("alert_rule_labels", "--alert-rule-label", "SLO_ALERT_RULE_LABELS",
           "Extra KEY=VALUE label on the managed PrometheusRules, for a Prometheus's "
           "ruleSelector (repeatable; the variable is space-separated)."),
    Option("require_tenants", "--require-tenants", "SLO_REQUIRE_TENANTS",
           "Serve only namespaces a Tenant object binds: elsewhere SLOPolicies are refused "
           "(TenantBound False) and their services hold (docs/reliability.md)."),
    Option("activator_service", "--activator-service", "SLO_ACTIVATOR_SERVICE",
           "NAMESPACE/NAME of the activator's Service: services whose policy sets "
           "scaling.scaleToZero go to zero when idle and are routed to it "
           "(docs/scale-to-zero.md); default: none, no service goes to zero."),
)


def option(name: str) -> Option:
    """The table's row for the setting ``name`` (a field of :class:`OperatorSettings`)."""
    return next(o for o in OPTIONS if o.field == name)


def _flag(name: str) -> str:
    return option(name).flag


def _dns_label(value: str) -> bool:
    return bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value)) and len(value) <= 63
