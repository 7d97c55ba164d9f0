"""docs/architecture.md's claims of "one place", each held here or by the test its table names (issue 57.5)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PLUGINS = {"libtpu", "jax_plugins", "nvidia"}  # the accelerator compilers' packages


def trees(*patterns: str):
    for pattern in patterns:
        for path in sorted(ROOT.glob(pattern)):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def called(node: ast.Call) -> str:
    return getattr(node.func, "id", None) or getattr(node.func, "attr", "")


def test_a_session_s_settings_become_a_config_in_one_place():
    """Only config_state turns settings into a LabConfig in the app: no page or panel builds one field by field."""
    builders = {"LabConfig", "config_from_values", "config_from_json"}
    found = [
        f"{path}:{node.lineno} {called(node)}"
        for path, tree in trees("app.py", "app_pages/*.py", "sharding_lab/app/**/*.py")
        if not path.endswith("config_state.py")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and called(node) in builders
    ]
    assert found == []


def test_only_targets_imports_the_accelerator_plugins():
    """libtpu, the CUDA plugins and NVIDIA's packages are imported or looked up by hardware/targets.py alone."""
    found = []
    for path, tree in trees("sharding_lab/**/*.py"):
        if path == "sharding_lab/hardware/targets.py":
            continue
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if isinstance(node, ast.Call) and called(node) in ("find_spec", "import_module", "__import__")
                else []
            )
            found += [f"{path}:{node.lineno} {n}" for n in names if n.split(".")[0] in PLUGINS]
    assert found == []


def test_the_cost_takes_a_plan_and_plans_only_the_probes_it_builds():
    """The cost's entry points take the caller's Plan (planned once), and the cost package calls plan() only on the
    configurations it builds itself: extrapolation's smaller meshes, the sweep's batches and strategies, and a GPU
    target's host compile for its FLOPs."""
    import inspect

    from sharding_lab.cost import compiled, extrapolation, report, roofline, sweep
    from sharding_lab.training.config import Plan

    entry_points = [
        compiled.compile_step,
        compiled.compile_once,
        roofline.predict,
        extrapolation.extrapolate,
        sweep.batch_sweep,
        report.print_cost,
    ]
    first = {f.__name__: next(iter(inspect.signature(f).parameters.values())) for f in entry_points}
    assert {name: (p.name, p.annotation) for name, p in first.items()} == {
        name: ("plan", Plan.__name__) for name in first
    }
    planned = sorted(
        f"{path.removeprefix('sharding_lab/cost/')}:{enclosing}"
        for path, tree in trees("sharding_lab/cost/*.py")
        for enclosing, node in (
            (function.name, node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef)
            for node in ast.walk(function)
        )
        if isinstance(node, ast.Call) and called(node) in ("make_plan", "plan")
    )
    assert planned == ["extrapolation.py:_probe_compiles", "roofline.py:_predict_on_target", "sweep.py:batch_sweep"]


def test_a_target_is_parsed_only_by_hardware_and_training():
    """A target's text becomes a Target in hardware/ and training/ alone (plan(), LabConfig.on, the TARGET row's
    target_of): every other module of the package and the app is handed the parsed Target."""
    found = [
        f"{path}:{number}"
        for pattern in ("app.py", "app_pages/*.py", "sharding_lab/**/*.py")
        for file in sorted(ROOT.glob(pattern))
        if not file.relative_to(ROOT).as_posix().startswith(("sharding_lab/hardware/", "sharding_lab/training/"))
        for path in [file.relative_to(ROOT).as_posix()]
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1)
        if "targets.parse(" in line or re.search(r"from \S*targets import .*\bparse\b", line)
    ]
    assert found == []


def test_every_claim_s_test_exists():
    """The page's table of claims names tests that exist, so a renamed test cannot leave a claim unheld."""
    table = PAGE.read_text(encoding="utf-8").split("## Claims of one place")[1].split("\n## ")[0]
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", table)
    assert len(named) >= 8
    for path, name in named:
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M), f"{path}::{name}"
