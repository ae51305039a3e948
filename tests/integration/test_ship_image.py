"""The built image: the operator started from it against the local control plane, and the
checks a release needs from the image itself.

Needs an image built daemonlessly by ``hack/build-image.sh`` (``make image``; buildah, vfs
storage). Everything runs inside that filesystem with chroot isolation as UID 65532:

- ``slo-operator run`` serves its health endpoint and reconciles an example;
- ``slo-operator --version`` prints the installed version;
- the init container's command (rendered, not restated) copies slo_runtime out of the image,
  and the copy runs the launcher on a different Python than the image's own, in a fresh
  virtual environment holding only the runtime's declared dependencies (all inside vLLM's
  closure, tests/packaging/test_image.py), as vLLM's Python runs it in the pod;
- no compiler and no package manager is left in the image.

Locally they skip when buildah or the image is absent; under CI (``CI`` true) that is a
failure, as for the control-plane fixture: a CI run that skipped them would prove nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from slo_devtools.devenv.control_plane import LocalCluster, free_port
from slo_operator.cli import main as operator_cli
from slo_runtime.contract import ENGINE_INFO_FILE_NAME, RUNTIME_MOUNT
from tests.integration.operator_support import ROOT, conditions, install_crds
from tests.support.fixtures import _in_ci

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("SLO_TEST_IMAGE", "localhost/slo-operator:dev")
BUILDAH = ["buildah"]
# The storage settings hack/build-image.sh builds with.
ENV = {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}


def _buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BUILDAH, *args], capture_output=True, text=True, check=check,
                          timeout=300, env=ENV)


def _require_image() -> None:
    """Skip without buildah or the image; under CI, fail instead."""
    msg = ""
    if shutil.which("buildah") is None:
        msg = "buildah not installed (apt-get install buildah debootstrap), so no image test"
    elif _buildah("inspect", "--type", "image", IMAGE, check=False).returncode != 0:
        msg = f"{IMAGE} not built: run `make image` (hack/build-image.sh)"
    if msg and _in_ci():
        pytest.fail(msg, pytrace=False)
    if msg:
        pytest.skip(msg)


def _new_container() -> Iterator[str]:
    _require_image()
    ctr = _buildah("from", IMAGE).stdout.strip().splitlines()[-1]
    try:
        yield ctr
    finally:
        _buildah("rm", ctr, check=False)


@pytest.fixture
def container() -> Iterator[str]:
    """A working container the test may reconfigure (buildah config)."""
    yield from _new_container()


@pytest.fixture(scope="module")
def image_ctr() -> Iterator[str]:
    """One working container for the checks that only run commands in it."""
    yield from _new_container()


def _run_as_non_root(ctr: str, *argv: str, volume: str | None = None,
                     check: bool = True) -> subprocess.CompletedProcess[str]:
    """``argv`` inside the image as UID 65532, as the pod's securityContext runs it."""
    mount = ["-v", volume] if volume else []
    return _buildah("run", "--isolation", "chroot", "--user", "65532:65532", *mount, ctr,
                    "--", *argv, check=check)


def test_operator_runs_from_the_image_as_non_root(cluster: LocalCluster, container: str,
                                                  namespace: str, tmp_path: Path) -> None:
    cfg = _buildah("inspect", "--type", "container", "--format",
                   "{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}", container).stdout
    assert cfg.startswith("65532:65532 [slo-operator]"), cfg
    install_crds(cluster)
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(cluster.kubeconfig, kubeconfig)
    kubeconfig.chmod(0o644)  # readable by the image's non-root user
    port = free_port()
    _buildah("config", "--env", "KUBECONFIG=/kube/config", "--env", "SLO_RECONCILE_INTERVAL=3",
             container)
    log = (tmp_path / "operator.log").open("w")
    proc = subprocess.Popen(
        [*BUILDAH, "run", "--isolation", "chroot", "--user", "65532:65532",
         "-v", f"{kubeconfig}:/kube/config:ro", container, "--",
         "slo-operator", "run", "--liveness", f"http://127.0.0.1:{port}/healthz"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=ENV)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError((tmp_path / "operator.log").read_text())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        cluster.wait_for(healthy, timeout=120, desc="operator from the image healthy")
        docs = [d for d in yaml.safe_load_all(
            (ROOT / "examples" / "llama-8b-h100.yaml").read_text()) if d]
        for d in docs:
            d["metadata"]["namespace"] = namespace
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
        cluster.wait_for(lambda: "Ready" in conditions(
            cluster.kubectl_json("get", "infsvc", "-n", namespace, "llama-8b")),
            timeout=120, desc="example reconciled by the operator from the image")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_version_runs_as_non_root_in_the_image(image_ctr: str) -> None:
    proc = _run_as_non_root(image_ctr, "slo-operator", "--version", check=False)
    assert proc.returncode == 0, proc.stderr
    # The version the sources declare (the host's editable install of the same tree).
    assert proc.stdout.strip() == f"slo-operator, version {version('slo-operator')}"
    ident = _run_as_non_root(image_ctr, "id", "-u").stdout.strip()
    assert ident == "65532"


def _rendered_pod() -> dict[str, Any]:
    res = CliRunner().invoke(operator_cli, ["render", "-f",
                                            str(ROOT / "examples" / "llama-8b-h100.yaml"),
                                            "-o", "json"])
    assert res.exit_code == 0, res.output
    items = json.loads(res.output[res.output.index("{"):])["items"]
    dep = next(i for i in items if i["kind"] == "Deployment")
    pod: dict[str, Any] = dep["spec"]["template"]["spec"]
    return pod


def _foreign_python() -> Path:
    """A CPython other than the image's: SLO_TEST_FOREIGN_PYTHON, else pyenv's 3.12 (the
    minor version vLLM's image runs), else the interpreter running the tests."""
    if env := os.environ.get("SLO_TEST_FOREIGN_PYTHON"):
        return Path(env)
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(pyenv.glob("3.12.*/bin/python3"))
    return found[-1] if found else Path(sys.executable)


# The interpreter's version and build (patch level, build date, compiler).
PYTHON_BUILD = ["-c", "import sys; print(sys.version.replace(chr(10), ' '))"]


def test_runtime_copied_by_the_init_container_launches_on_another_python(
        image_ctr: str, tmp_path: Path) -> None:
    pod = _rendered_pod()
    (inject,) = pod["initContainers"]
    mount = inject["volumeMounts"][0]["mountPath"]
    assert mount == RUNTIME_MOUNT
    shared = tmp_path / "slo-runtime"
    shared.mkdir()
    shared.chmod(0o777)  # the pod's emptyDir, writable by the non-root init container
    # The init container's own command, inside the image, as UID 65532.
    proc = _run_as_non_root(image_ctr, *inject["command"], volume=f"{shared}:{mount}",
                            check=False)
    assert proc.returncode == 0, proc.stderr
    assert (shared / "slo_runtime" / "launch.py").is_file()
    assert (shared / "slo_runtime" / "data").is_dir(), "package data travels with it"

    # vLLM's Python stands in: another CPython build, in a fresh venv with the runtime's
    # declared dependencies only (no slo_runtime installed: the copy is the only one).
    foreign = _foreign_python()
    image_python = _run_as_non_root(image_ctr, "python3", *PYTHON_BUILD).stdout.strip()
    foreign_build = subprocess.run([str(foreign), *PYTHON_BUILD], capture_output=True,
                                   text=True, check=True, timeout=60).stdout.strip()
    assert foreign_build != image_python, (
        f"{foreign} is the image's Python build ({image_python}); the check needs another")
    venv = tmp_path / "vllm-python"
    subprocess.run([str(foreign), "-m", "venv", str(venv)], check=True, timeout=300)
    deps = tomllib.loads((ROOT / "runtime" / "pyproject.toml").read_text())
    deps = deps["project"]["dependencies"]
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                          *deps], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr

    # The vLLM container's rendered command and environment, with the pod's paths moved
    # here and vLLM itself replaced by a command that prints the argv it was given.
    (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
    assert vllm["command"][0] == "python3"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {e["name"]: e["value"] for e in vllm["env"] if "value" in e}
    probe_file = run_dir / Path(env["SLO_PROBE_FILE"]).name
    printer = [str(venv / "bin" / "python"), "-c",
               "import json, sys; print('ARGV ' + json.dumps(sys.argv[1:]))"]
    env |= {"PYTHONPATH": str(shared), "SLO_PROBE_FILE": str(probe_file),
            "HOME": str(tmp_path), "SLO_VLLM_ENTRYPOINT": json.dumps(printer),
            "PATH": "/usr/bin:/bin"}
    launch = subprocess.run([str(venv / "bin" / "python"), *vllm["command"][1:]],
                            capture_output=True, text=True, env=env, timeout=120,
                            cwd=tmp_path)
    assert launch.returncode == 0, launch.stderr
    out = re.search(r"^ARGV (.*)$", launch.stdout, re.M)
    assert out, launch.stdout + launch.stderr
    argv = json.loads(out.group(1))
    planned = json.loads(env["SLO_ENGINE_ARGS"])
    assert argv[argv.index("--model") + 1] == planned[planned.index("--model") + 1]
    info = json.loads((run_dir / ENGINE_INFO_FILE_NAME).read_text())
    assert info["args"] == argv and info["planned_args"] == planned
    # No GPU here while the node promised one: the launcher says so and falls back.
    assert "GPUs differ from the node labels" in launch.stderr


# Compilers and package managers (apt-get, dpkg-query), with Debian's versioned names
# (gcc-12, pip3.11) and the cross names (x86_64-linux-gnu-gcc-12).
FORBIDDEN = re.compile(r"(\w+-linux-gnu-)?"
                       r"(gcc|cc|c\+\+|g\+\+|clang|clang\+\+|pip|pip3|apt(-\w+)?|dpkg(-\w+)?)"
                       r"(-?[0-9][0-9.]*)?")
# Searched inside the image by its own Python: every PATH directory plus the usual ones.
FIND_TOOLS = r"""
import importlib.util, json, os, re, sys
dirs = set(os.environ["PATH"].split(":")) | {"/usr/local/bin", "/usr/local/sbin", "/usr/bin",
    "/usr/sbin", "/bin", "/sbin", "/venv/bin"}
pattern = re.compile(sys.argv[1])
tools = sorted(os.path.join(d, f) for d in dirs if os.path.isdir(d)
               for f in os.listdir(d) if pattern.fullmatch(f))
state = [p for p in ("/var/lib/dpkg", "/var/lib/apt", "/etc/apt", "/usr/share/python-wheels")
         if os.path.exists(p)]
modules = [m for m in ("pip", "ensurepip") if importlib.util.find_spec(m)]
print(json.dumps({"tools": tools, "state": state, "modules": modules}))
"""


def test_image_has_no_compiler_and_no_package_manager(image_ctr: str) -> None:
    proc = _run_as_non_root(image_ctr, "python3", "-c", FIND_TOOLS, FORBIDDEN.pattern)
    found = json.loads(proc.stdout)
    assert found == {"tools": [], "state": [], "modules": []}, found
    # What the init container needs is still there.
    needed = _run_as_non_root(image_ctr, "sh", "-c",
                              'for t in sh cp python3; do command -v "$t" || exit 1; done',
                              check=False)
    assert needed.returncode == 0 and len(needed.stdout.split()) == 3, needed
