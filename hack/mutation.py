#!/usr/bin/env python3
"""Mutation testing of the pure packages with mutmut 2.x (outside CI; see docs/mutation-testing.md).

    python hack/mutation.py control/law.py            # run one module
    python hack/mutation.py --package engine          # every module of a package
    python hack/mutation.py --summary                 # counts of every module run so far
    python hack/mutation.py --survivors control/law.py  # the surviving mutants as diffs

Each module runs in its own copy of the repository under $MUTATION_WORK (default
/tmp/slo-mutation/<module>), refreshed from this checkout before every run, so mutmut never
edits the working tree and several modules can run at once. The runner is the unit tests
named in TESTS below, with every failure (collection errors and hangs included) reported as
exit status 1: mutmut 2.x counts any other status as "tests pass".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "operator" / "slo_operator"
WORK = Path(os.environ.get("MUTATION_WORK", "/tmp/slo-mutation"))
TOOLS = Path(os.environ.get("MUTATION_TOOLS", "/tmp/slo-mutation/tools"))
PURE_PACKAGES = ("api", "slo", "hardware", "engine", "control", "render")

T = "tests/operator"

# The test tree mirrors the packages: a module pkg/mod.py is exercised first by its own
# tests/operator/pkg/test_mod.py (most mutants die there, in a second or two), then by the
# rest of its package's tests. Extra test files for modules whose behaviour other suites
# also pin are listed here.
EXTRA: dict[str, tuple[str, ...]] = {
    "slo/histogram.py": ("tests/devtools/sim/test_scrape.py", f"{T}/monitoring/test_rules.py"),
    "slo/evaluate.py": (f"{T}/reconcile/test_status.py",),
    "control/law.py": (f"{T}/control/test_policy.py",),
    "control/placement.py": (f"{T}/reconcile/test_placing.py",),
    "control/prices.py": (f"{T}/control/test_placement.py", f"{T}/reconcile/test_placing.py"),
    "render/objects.py": (f"{T}/engine/test_plan.py",),
    "hardware/labels.py": (f"{T}/engine/test_plan.py",),
    "hardware/catalogue.py": (f"{T}/engine/test_plan.py",),
}


def _package_tests(module: str) -> tuple[str, ...]:
    package, _, name = module.partition("/")
    stem = Path(name).stem
    own = f"{T}/{package}/test_{package if stem == '__init__' else stem}.py"
    rest = sorted(str(p.relative_to(ROOT)) for p in (ROOT / T / package).glob("test_*.py"))
    return (own, *EXTRA.get(module, ()), *rest)


TESTS: dict[str, tuple[str, ...]] = {
    str(p.relative_to(PKG)): _package_tests(str(p.relative_to(PKG)))
    for package in PURE_PACKAGES for p in sorted((PKG / package).glob("*.py"))
}

RUNNER = """#!/bin/bash
timeout -k 5 {timeout} "{python}" -m pytest -x -q -p no:cacheprovider "$@" || exit 1
"""


# Runtime modules: their tests are asynchronous and need the asyncio plugin, which the
# runner does not autoload.
RUNTIME_TESTS: dict[str, tuple[str, ...]] = {
    "admission.py": ("tests/runtime/test_admission.py", "tests/runtime/test_gateway.py"),
    "contract.py": ("tests/runtime/test_contract.py", f"{T}/render/test_objects.py",
                    f"{T}/engine/test_vllm_args.py"),
}
PLUGINS = ("-p", "pytest_asyncio.plugin")


def source(module: str) -> str:
    """The file a module name stands for: operator/slo_operator/<module>, or a runtime path."""
    if module.startswith("runtime/"):
        return module
    return f"operator/slo_operator/{module}"


def tests_for(module: str) -> list[str]:
    """The test files a module's mutants run against, those that exist in this checkout."""
    listed = TESTS.get(module) or RUNTIME_TESTS.get(module.removeprefix("runtime/slo_runtime/"))
    if listed is None:
        listed = _package_tests(module)
    return [t for t in dict.fromkeys(listed) if (ROOT / t).exists()]


def plugins_for(module: str) -> tuple[str, ...]:
    """Pytest plugins a module's tests need (autoloading is off in the runner)."""
    return PLUGINS if module.startswith("runtime/") else ()


def workdir(module: str) -> Path:
    """The module's own copy of the repository."""
    return WORK / module.replace("/", "_").removesuffix(".py")


def refresh(work: Path) -> None:
    """Copy the checkout's tracked and new files over the work copy (its mutmut cache stays)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    for raw in files:
        if not raw:
            continue
        rel = raw.decode()
        src, dst = ROOT / rel, work / rel
        if not src.is_file():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def ensure_tools() -> None:
    """Install mutmut 2.x into its own folder (it is not a project dependency)."""
    if (TOOLS / "mutmut").is_dir():
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(TOOLS),
                    "mutmut<3"], check=True)


def env_for(work: Path) -> dict[str, str]:
    """Imports from the work copy, no bytecode (stale .pyc gives false survivors), no plugins."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(work / "operator"), str(work / "runtime"), str(work / "devtools"), str(work),
         str(TOOLS)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def run(module: str, timeout: int) -> int:
    """Run mutmut over one module; return its exit status."""
    if not (ROOT / source(module)).is_file():
        sys.exit(f"no module {source(module)}")
    tests = tests_for(module)
    if not tests:
        sys.exit(f"no unit tests found for {module}")
    ensure_tools()
    work = workdir(module)
    work.mkdir(parents=True, exist_ok=True)
    refresh(work)
    runner = work / "mutation-runner.sh"
    runner.write_text(RUNNER.format(timeout=timeout, python=sys.executable))
    runner.chmod(0o755)
    cmd = [sys.executable, "-m", "mutmut", "run",
           "--paths-to-mutate", source(module), "--test-time-multiplier", "10",
           "--runner", " ".join([str(runner), *plugins_for(module), *tests])]
    log = work / "mutmut.log"
    print(f"{module}: {len(tests)} test files, work copy {work}, log {log}", flush=True)
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=work, env=env_for(work), stdout=out,
                            stderr=subprocess.STDOUT).returncode
    print(json.dumps(counts(module)), flush=True)
    return rc


def counts(module: str) -> dict[str, object]:
    """Mutant statuses of one module from its mutmut cache."""
    cache = workdir(module) / ".mutmut-cache"
    out: dict[str, object] = {"module": module}
    if not cache.exists():
        return out
    with sqlite3.connect(cache) as db:
        rows = db.execute(
            "select m.status, count(*) from Mutant m join Line l on m.line = l.id "
            "join SourceFile s on l.sourcefile = s.id where s.filename = ? group by 1",
            (source(module),)).fetchall()
    status = dict(rows)
    total = sum(status.values())
    # "suspicious" is mutmut's name for a mutant the tests failed on, slowly: killed too; a
    # timeout (the runner's, or mutmut's 10 x the baseline) is a mutant that made the tests hang.
    killed = sum(status.get(k, 0) for k in ("ok_killed", "ok_suspicious", "bad_timeout"))
    out.update(total=total, killed=killed, survived=status.get("bad_survived", 0),
               timeout=status.get("bad_timeout", 0), untested=status.get("untested", 0),
               score=round(100 * killed / total, 1) if total else None)
    return out


def summary() -> None:
    """Print every module run so far and the total over them."""
    total = killed = 0
    runtime = ROOT / "runtime" / "slo_runtime"
    for module in [*sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")),
                   *sorted(str(p.relative_to(ROOT)) for p in runtime.glob("*.py"))]:
        row = counts(module)
        if "total" not in row:
            continue
        total += int(row["total"])  # type: ignore[arg-type]
        killed += int(row["killed"])  # type: ignore[arg-type]
        print(f"{module:28} {row['total']:5} mutants {row['killed']:5} killed "
              f"{row['survived']:4} survived {row['timeout']:3} timeout "
              f"{row['untested']:4} untested  {row['score']}%")
    if total:
        print(f"{'all':28} {total:5} mutants {killed:5} killed  {100 * killed / total:.1f}%")


def survivors(module: str) -> None:
    """Show each surviving mutant of a module as a diff."""
    work = workdir(module)
    env = env_for(work)
    ids = subprocess.run([sys.executable, "-m", "mutmut", "result-ids", "survived"], cwd=work,
                         env=env, capture_output=True, text=True).stdout.split()
    for mid in ids:
        subprocess.run([sys.executable, "-m", "mutmut", "show", mid], cwd=work, env=env)


def main() -> int:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="*", help="paths under operator/slo_operator")
    ap.add_argument("--package", choices=PURE_PACKAGES, action="append", default=[])
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--survivors", action="store_true")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per mutant's test run")
    args = ap.parse_args()
    modules = list(args.modules)
    for package in args.package:
        modules += sorted(str(p.relative_to(PKG)) for p in (PKG / package).glob("*.py"))
    if args.summary:
        summary()
        return 0
    if args.survivors:
        for module in modules:
            survivors(module)
        return 0
    rc = 0
    for module in modules:
        rc = max(rc, run(module, args.timeout))
    return rc


if __name__ == "__main__":
    sys.exit(main())
