"""The argocd-cm snippet that installs the Argo CD health checks in deploy/argocd/health/.

``python -m slo_operator.gitops.argocd [DEPLOY_DIR]`` rewrites deploy/argocd/argocd-cm.yaml
from the Lua files, which are the tested source (tests/operator/gitops/test_argocd.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from slo_operator.api.models import GROUP

KINDS = {"InferenceService": "inferenceservice.lua", "SLOPolicy": "slopolicy.lua"}


class _Literal(str):
    pass


def _literal(dumper: yaml.SafeDumper, value: _Literal) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


class _Dumper(yaml.SafeDumper):
    """Scripts as literal blocks, readable in the ConfigMap."""


_Dumper.add_representer(_Literal, _literal)


def argocd_cm(health_dir: Path) -> str:
    """The argocd-cm ConfigMap data keys Argo CD reads custom health checks from."""
    data = {
        f"resource.customizations.health.{GROUP}_{kind}": _Literal((health_dir / f).read_text())
        for kind, f in KINDS.items()
    }
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "argocd-cm",
            "namespace": "argocd",
            "labels": {"app.kubernetes.io/name": "argocd-cm",
                       "app.kubernetes.io/part-of": "argocd"},
        },
        "data": data,
    }
    header = ("# Merge into Argo CD's argocd-cm (e.g. kubectl -n argocd patch cm argocd-cm "
              "--patch-file deploy/argocd/argocd-cm.yaml).\n"
              "# Generated from deploy/argocd/health/*.lua by "
              "`python -m slo_operator.gitops.argocd`; do not edit.\n")
    return header + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=200)


def main(argv: list[str]) -> None:
    deploy = Path(argv[0]) if argv else Path("deploy")
    out = deploy / "argocd" / "argocd-cm.yaml"
    out.write_text(argocd_cm(deploy / "argocd" / "health"))
    print(f"Wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
