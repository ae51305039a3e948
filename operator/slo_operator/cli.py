"""``slo-operator``: run the operator, write the CRDs and packaged profiles, preview a service."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml
from pydantic import ValidationError

from slo_operator.api.activation import (
    ACTIVATOR_PORT,
    DEFAULT_QUEUE_PER_SERVICE,
    DEFAULT_WAKE_TIMEOUT_S,
)
from slo_operator.api.crd import all_crds, crd_yaml
from slo_operator.api.errors import field_problems
from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec
from slo_operator.engine.profiles import load_profiles, profile_files
from slo_operator.handlers import peering as kopf_peering
from slo_operator.hardware import resolve_product
from slo_operator.monitoring import operator_metrics
from slo_operator.monitoring import rules as alert_rules
from slo_operator.reconcile.desired import (
    NodeInfo,
    Problem,
    discover_pools,
    initial_replicas,
    plan_service,
    pool_from_product,
)
from slo_operator.render.names import is_label_value, is_namespace_name, is_object_name
from slo_operator.render.objects import build_all
from slo_operator.settings import OperatorSettings, operator_version, option

FC = TypeVar("FC", bound=Callable[..., Any])


class InputError(click.ClickException):
    exit_code = 2


def _read_text(path: str) -> str:
    if path == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    else:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError as err:
            raise InputError(f"{path}: no such file") from err
        except IsADirectoryError as err:
            raise InputError(f"{path}: is a directory, not a YAML file") from err
        except OSError as err:
            raise InputError(f"{path}: cannot be read: {err.strerror or err}") from err
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start}); YAML files are "
                         "UTF-8") from err


def _load_docs(path: str) -> list[Any]:
    text = _read_text(path)
    try:
        return [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML: {err}") from err
    except RecursionError as err:
        raise InputError(f"{path}: YAML nested too deeply") from err


def _find(docs: list[Any], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == kind]


def _mapping(value: Any, where: str) -> dict[str, Any]:
    """A YAML mapping with string keys, else exit 2 naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: must be a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise InputError(f"{where}: key {key!r} must be a string")
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    out = _mapping(value, where)
    for key, v in out.items():
        if not isinstance(v, str):
            raise InputError(f"{where}.{key}: must be a string (quote it: \"{v}\"), got "
                             f"{type(v).__name__}")
    return out


def _nodes_from_file(path: str) -> list[NodeInfo]:
    docs = _load_docs(path)
    nodes: list[NodeInfo] = []
    for i, doc in enumerate(docs):
        where = f"{path}: document {i + 1}"
        if isinstance(doc, list):
            objs, prefix = doc, where
        else:
            top = _mapping(doc, where)
            if top.get("kind") == "NodeList":
                items = top.get("items")
                if not isinstance(items, list):
                    raise InputError(f"{where}: items must be a list of Nodes")
                objs, prefix = items, f"{where}: items"
            else:
                objs, prefix = [top], where
        for j, obj in enumerate(objs):
            at = f"{prefix}[{j}]" if prefix != where or isinstance(doc, list) else where
            obj = _mapping(obj, at)
            if obj.get("kind") == "Node":
                meta = _mapping(obj.get("metadata"), f"{at}.metadata")
                status = _mapping(obj.get("status"), f"{at}.status")
                alloc = _mapping(status.get("allocatable"), f"{at}.status.allocatable")
                name = meta.get("name", f"node-{i}-{j}")
                nodes.append(NodeInfo(str(name),
                                      _string_map(meta.get("labels"), f"{at}.metadata.labels"),
                                      {k: str(v) for k, v in alloc.items()}))
            else:  # a plain label mapping, as `kubectl get node -o jsonpath={.metadata.labels}`
                nodes.append(NodeInfo(f"node-{i}-{j}", _string_map(obj, at)))
    return nodes


class _NoAliasDumper(yaml.SafeDumper):
    """Repeated values are written out in full: `kubectl apply` and reviewers get plain
    YAML, not anchors and aliases (&id001)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _object_meta(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    """metadata of an input object, its name and namespace checked as the API would."""
    meta = _mapping(doc.get("metadata"), f"{kind}.metadata")
    name = meta.get("name", "inference" if kind == "InferenceService" else "")
    if kind == "InferenceService" and not (isinstance(name, str) and is_object_name(name)):
        raise InputError(f"{kind}.metadata.name: {name!r} is not a valid name (lowercase "
                         "letters, digits, '-' and '.', at most 253 characters)")
    namespace = meta.get("namespace", "default")
    if not (isinstance(namespace, str) and is_namespace_name(namespace)):
        raise InputError(f"{kind}.metadata.namespace: {namespace!r} is not a valid namespace")
    uid = meta.get("uid", "")
    return {**meta, "name": name, "namespace": namespace, "uid": uid if isinstance(
        uid, str) else ""}


DEVTOOLS_COMMANDS = "slo_operator.commands"
"""Entry-point group through which other distributions (slo-devtools: ``demo``, ``bench``)
add commands to this CLI; the operator itself never imports them."""
DEVTOOLS_NAMES = ("demo", "bench")


class _Commands(click.Group):
    """The operator's commands plus those other installed distributions offer, looked up
    when asked for (so importing this module never imports a plugin)."""

    def _plugins(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group=DEVTOOLS_COMMANDS)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._plugins(), *DEVTOOLS_NAMES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        ep = self._plugins().get(cmd_name)
        if ep is not None:
            loaded: click.Command = ep.load()
            return loaded
        return _missing_devtools(cmd_name) if cmd_name in DEVTOOLS_NAMES else None


def _missing_devtools(name: str) -> click.Command:
    @click.command(name=name, context_settings={"ignore_unknown_options": True,
                                                "allow_extra_args": True},
                   add_help_option=False, help=f"(needs slo-devtools) {name}")
    def missing() -> None:
        raise InputError(f"'slo-operator {name}' comes with the development tools: "
                         "pip install ./devtools (from a clone of the repository)")
    return missing


@click.group(cls=_Commands)
@click.version_option(operator_version(), prog_name="slo-operator")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """Keep LLM inference on Kubernetes inside its latency SLOs at the lowest GPU cost."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@main.command()
@click.option("--out-dir", type=click.Path(file_okay=False), help="Write one file per CRD.")
def crds(out_dir: str | None) -> None:
    """Print the CustomResourceDefinitions generated from the API models."""
    docs = all_crds()
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for crd in docs:
            path = Path(out_dir) / f"{crd['metadata']['name']}.yaml"
            path.write_text(crd_yaml(crd))
            click.echo(f"Wrote {path}", err=True)
        return
    click.echo("---\n".join(crd_yaml(c) for c in docs), nl=False)


@main.command()
@click.option("--from", "source", type=click.Path(exists=True, file_okay=False),
              required=True,
              help="Directory of measured node profiles (slo-runtime profile output).")
@click.option("--out-dir", type=click.Path(file_okay=False),
              help="Write the packaged set here, removing any other *.json.")
def profiles(source: str, out_dir: str | None) -> None:
    """List, or write, the node profiles the operator ships as package data."""
    files = profile_files(Path(source))
    if not out_dir:
        for name in files:
            click.echo(name)
        return
    out = Path(out_dir)
    if out.exists() and out.resolve() == Path(source).resolve():
        raise click.UsageError("--out-dir must not be the --from directory")
    out.mkdir(parents=True, exist_ok=True)
    for stale in sorted(out.glob("*.json")):
        if stale.name not in files:
            stale.unlink()
            click.echo(f"Removed {stale}", err=True)
    for name, text in files.items():
        path = out / name
        path.write_text(text)
        click.echo(f"Wrote {path}", err=True)


@main.command()
@click.option("-f", "--filename", required=True, help="InferenceService YAML ('-' for stdin).")
@click.option("--gpu-product", help="Preview on this GPU product (e.g. H100, A100-80GB, T4).")
@click.option("--node-labels", type=click.Path(exists=True, dir_okay=False),
              help="YAML of node label maps or Node objects to place the service on.")
@click.option("--policy", "policy_file", type=click.Path(exists=True, dir_okay=False),
              help="SLOPolicy YAML (default: one in the same file, else defaults).")
@click.option("--profiles-dir", type=click.Path(exists=True, file_okay=False),
              help="More node profiles (slo-runtime profile output) beside the shipped ones.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml")
def render(filename: str, gpu_product: str | None, node_labels: str | None,
           policy_file: str | None, profiles_dir: str | None, output: str) -> None:
    """Print the objects the operator would create for an InferenceService."""
    if gpu_product and node_labels:
        raise click.UsageError("give --gpu-product or --node-labels, not both")
    docs = _load_docs(filename)
    services = _find(docs, "InferenceService")
    if len(services) != 1:
        raise InputError(f"{filename}: expected one InferenceService, found {len(services)}")
    svc = services[0]
    meta = _object_meta(svc, "InferenceService")
    try:
        spec = InferenceServiceSpec.model_validate(svc.get("spec") or {})
    except ValidationError as err:
        raise InputError(_problems_text(filename, field_problems(err))) from err

    policies = _find(_load_docs(policy_file), "SLOPolicy") if policy_file else _find(
        docs, "SLOPolicy")
    ref = spec.slo_policy_ref.name if spec.slo_policy_ref else ""
    chosen = [p for p in policies
              if _mapping(p.get("metadata"), "SLOPolicy.metadata").get("name") == ref] or policies
    if ref and not chosen:
        click.echo(f"warning: SLOPolicy {ref!r} not in the input; using policy defaults",
                   err=True)
    try:
        policy = SLOPolicySpec.model_validate((chosen[0].get("spec") or {}) if chosen else {})
    except ValidationError as err:
        raise InputError(_problems_text("SLOPolicy", field_problems(err))) from err

    if node_labels:
        nodes = _nodes_from_file(node_labels)
        pools = discover_pools(nodes)
        if not pools:
            raise InputError(f"--node-labels {node_labels}: no node carries GPU labels "
                             "(nvidia.com/gpu.*, amd.com/gpu.*, habana.ai/*)")
    else:
        product = gpu_product or (spec.hardware.gpu_products[0]
                                  if spec.hardware.gpu_products else None)
        if not product:
            raise InputError("spec.hardware.gpuProducts is empty: pass --gpu-product NAME "
                             "or --node-labels FILE to choose the hardware to render for")
        pool = pool_from_product(product)
        if pool is None:
            field = "--gpu-product" if gpu_product else "spec.hardware.gpuProducts[0]"
            raise InputError(f"{field}: {resolve_product(product).message}")
        nodes, pools = [], [pool]
        if gpu_product:
            # An explicit preview product overrides the spec's preference list.
            spec = spec.model_copy(update={"hardware": spec.hardware.model_copy(
                update={"gpu_products": [gpu_product]})})

    lo, _hi = initial_replicas(spec, policy)
    result = plan_service(
        name=meta["name"],
        namespace=meta["namespace"],
        # A preview has no UID unless the input carries one; objects rendered without one
        # carry no owner reference (one with a made-up UID is garbage-collected at once).
        uid=meta["uid"],
        spec=spec, policy=policy, policy_name=ref, pools=pools, nodes=nodes,
        replicas=max(lo, 1),
        profiles=load_profiles() + (load_profiles(Path(profiles_dir)) if profiles_dir else ()),
    )
    if isinstance(result, Problem):
        raise InputError(f"{result.field}: {result.message} ({result.reason})")
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if len(result.variants) > 1:
        others = ", ".join(v.option.product for v in result.variants[1:])
        click.echo(f"note: replicas start on {result.variants[0].option.product}; they spill "
                   f"to {others} in that order when it is full (docs/placement.md)", err=True)
    if not meta["uid"]:
        click.echo("note: no metadata.uid in the input: objects carry no ownerReferences "
                   "(the operator sets them to the live InferenceService)", err=True)
    objects = build_all(result.render)
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        click.echo("---\n".join(yaml.dump(o, Dumper=_NoAliasDumper, sort_keys=False, width=100)
                                 for o in objects), nl=False)


def _problems_text(source: str, problems: list[Any]) -> str:
    lines = [f"{source}: invalid spec"] + [f"  {p}" for p in problems]
    return "\n".join(lines)


@main.command()
@click.option("-f", "--filename", required=True,
              help="SLOPolicy YAML ('-' for stdin); InferenceServices in it bind services.")
@click.option("--format", "fmt", type=click.Choice(["prometheusrule", "file"]),
              default="prometheusrule", show_default=True,
              help="A PrometheusRule per policy, or one plain Prometheus rule file.")
def rules(filename: str, fmt: str) -> None:
    """Print SLO recording rules and multi-window burn-rate alerts for SLOPolicies."""
    try:
        policies = alert_rules.policies_from_documents(_load_docs(filename), filename)
    except alert_rules.RulesInputError as err:
        raise InputError(str(err)) from err
    built = [(ref, alert_rules.rule_groups(ref, spec)) for ref, spec in policies]
    if fmt == "file":
        groups = [g for _, gs in built for g in gs]
        click.echo(alert_rules.dump(alert_rules.rule_file(groups)), nl=False)
    else:
        click.echo("---\n".join(alert_rules.dump(alert_rules.prometheus_rule(ref, gs))
                               for ref, gs in built), nl=False)


def _setting(field: str, *extra: str, **kwargs: Any) -> Callable[[FC], FC]:
    """A ``run`` option for one field of :class:`OperatorSettings`: flag, environment
    variable and help from the settings table, default from the dataclass."""
    opt = option(field)
    default = OperatorSettings.__dataclass_fields__[field].default
    if "multiple" not in kwargs:
        kwargs.setdefault("default", default)
        kwargs.setdefault("show_default", default not in (None, ""))
    return click.option(*extra, opt.flag, field, envvar=opt.env, help=opt.help, **kwargs)


def _label_pair(item: str) -> bool:
    """Whether ``item`` is KEY=VALUE with a valid label key ([prefix/]name) and value."""
    key, sep, value = item.partition("=")
    prefix, slash, name = key.rpartition("/")
    return (bool(sep) and bool(name) and is_label_value(name) and is_label_value(value)
            and (not slash or is_object_name(prefix)))



@main.command()
@_setting("namespaces", "-n", multiple=True)
@_setting("kubeconfig")
@_setting("liveness")
@_setting("prometheus_url")
@_setting("prometheus_timeout", type=click.FloatRange(min=0.1))
@_setting("interval", type=click.FloatRange(min=0.1))
@_setting("apply_ttl", type=click.FloatRange(min=1))
@_setting("peering")
@_setting("peering_priority", type=int)
@_setting("peering_lifetime", type=click.IntRange(min=2))
@_setting("metrics_port", type=click.IntRange(min=0, max=65535))
@_setting("workers", type=click.IntRange(min=1, max=256))
@_setting("profiles_dir", type=click.Path(exists=True, file_okay=False))
@_setting("runtime_image")
@_setting("manage_alert_rules", is_flag=True)
@_setting("alert_rule_labels", multiple=True)
@_setting("require_tenants", is_flag=True)
@_setting("activator_service")
def run(**options: Any) -> None:
    """Run the operator (kopf) against the current cluster."""
    import kopf

    import slo_operator.handlers.indexes
    import slo_operator.handlers.inference_service
    import slo_operator.handlers.periodic
    import slo_operator.handlers.slo_policy  # noqa: F401  (registers handlers)
    from slo_operator.handlers.setup import register_login

    options["namespaces"] = tuple(options["namespaces"])
    options["alert_rule_labels"] = tuple(options["alert_rule_labels"])
    try:
        settings = OperatorSettings(**options)
    except ValueError as err:
        raise InputError(str(err)) from err
    for item in settings.alert_rule_labels:
        if not _label_pair(item):
            raise InputError(
                f"{option('alert_rule_labels').flag} must be KEY=VALUE with a Kubernetes "
                f"label key and value (e.g. release=kube-prometheus-stack), got {item!r}")
    register_login(settings)
    operator_metrics.track_peering(bool(settings.peering))
    if settings.metrics_port:
        operator_metrics.serve(settings.metrics_port)
    kopf.run(
        **kopf_peering.run_kwargs(settings.peering, settings.peering_priority,
                                  settings.peering_lifetime, time.time()),
        clusterwide=not settings.namespaces,
        namespaces=list(settings.namespaces),
        liveness_endpoint=settings.liveness or None,
        memo=kopf.Memo(config=settings),
    )


@main.command()
@click.option("--port", type=click.IntRange(min=0, max=65535), default=ACTIVATOR_PORT,
              show_default=True, envvar="SLO_ACTIVATOR_PORT", show_envvar=True,
              help="Port the activator serves on (the InferenceServices' requests, "
                   "/metrics, /healthz, /readyz).")
@click.option("--host", default="0.0.0.0", show_default=True, envvar="SLO_ACTIVATOR_HOST",
              show_envvar=True,
              help="Address to listen on.")
@click.option("--queue-per-service", type=click.IntRange(min=1),
              default=DEFAULT_QUEUE_PER_SERVICE, show_default=True,
              envvar="SLO_ACTIVATOR_QUEUE_PER_SERVICE", show_envvar=True,
              help="Requests held per service while it has no Ready replica; more are "
                   "answered 429 with Retry-After.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=DEFAULT_WAKE_TIMEOUT_S,
              show_default=True, envvar="SLO_ACTIVATOR_TIMEOUT", show_envvar=True,
              help="Seconds a service has, from its first held request, to get a Ready "
                   "replica; then its held requests are answered 504.")
@click.option("--kubeconfig", envvar="SLO_KUBECONFIG", show_envvar=True,
              help="Kubeconfig (default: in-cluster).")
@click.option("--pod-name", envvar="POD_NAME", default="", show_envvar=True,
              help="This pod's name, recorded in the wake annotation (from the downward API: "
                   "metadata.name).")
def activator(port: int, host: str, queue_per_service: int, timeout: float,
              kubeconfig: str | None, pod_name: str) -> None:
    """Run the activator: hold the requests of a service scaled to zero, wake it, forward
    them once a replica is Ready (docs/activator.md)."""
    import asyncio

    from slo_operator.activator.app import ActivatorConfig
    from slo_operator.activator.serve import serve
    from slo_operator.adapters.kube import load_api_client

    config = ActivatorConfig(queue_per_service=queue_per_service, timeout_s=timeout,
                             pod_name=pod_name)
    try:
        api = load_api_client(kubeconfig)
    except Exception as err:  # no kubeconfig, a broken one: one line, no traceback
        raise InputError(f"cannot load the Kubernetes configuration: {err}") from err
    asyncio.run(serve(api, config, host, port))


if __name__ == "__main__":
    main()
