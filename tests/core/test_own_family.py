"""Your own model without editing Sharding Lab: the example family in examples/families/ plugged in by
--family, by SHARDING_LAB_FAMILIES and by an installed package's entry point (a real .dist-info on
the path, read by importlib.metadata); it trains, and its exported script runs and prints final_loss.
Importing runs code, so nothing a link says is ever imported."""

import json
import os
import subprocess
import sys

import sharding_lab as sl
from sharding_lab.app.state import links
from tests.support import ROOT

EXAMPLES = ROOT / "examples" / "families"
SMALL = ["--features", "16", "--residual-blocks", "1", "--mesh", "2x4"]


def run(*args, env=None, cwd=ROOT, timeout=180):
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": f"{ROOT}{os.pathsep}{EXAMPLES}", **(env or {})},
    )


def test_family_flag_adds_the_model_and_it_trains_and_exports(tmp_path):
    helped = run("-m", "sharding_lab", "train", "--family", "sine_family", "--help")
    assert helped.returncode == 0 and "sine" in helped.stdout and "--features" in helped.stdout
    trained = run(
        "-m",
        "sharding_lab",
        "train",
        "--family",
        "sine_family",
        "--model",
        "sine",
        "--preset",
        "fsdp",
        *SMALL,
        "--steps",
        "300",
        "--json",
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    out = json.loads(trained.stdout)
    assert out["config"]["model_family"] == "sine" and out["layout_matches_plan"]
    assert out["final_loss"] < 0.5 * out["initial_loss"]
    assert out["layout"]["params/blocks/0"]["shape"] == [16, 16]
    exported = run(
        "-m",
        "sharding_lab",
        "export",
        "--family=sine_family",
        "--model",
        "sine",
        "--preset",
        "tp",
        *SMALL,
        "--steps",
        "200",
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    script = tmp_path / "sine.py"
    script.write_text(exported.stdout)
    # The family's own names: its dataset is sine_points, not make_dataset (the export used to assume it).
    assert "X, Y = sine_points(spec, 0)" in exported.stdout and "make_dataset" not in exported.stdout
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": os.environ["XLA_FLAGS"]},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("final_loss=") and float(last.split("=")[1]) < 0.5 * out["initial_loss"]


def test_environment_variable_and_entry_point_add_the_model(tmp_path):
    listed = run(
        "-m",
        "sharding_lab",
        "layout",
        "--model",
        "sine",
        "--json",
        *SMALL,
        env={"SHARDING_LAB_FAMILIES": "sine_family"},
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "params/w_in" in json.loads(listed.stdout)["layout"]
    # An installed package: its metadata declares the module under the sharding_lab.models group.
    info = tmp_path / "sine_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sine-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[sharding_lab.models]\nsine = sine_family\n")
    installed = run(
        "-m",
        "sharding_lab",
        "layout",
        "--model",
        "sine",
        "--json",
        *SMALL,
        env={"PYTHONPATH": os.pathsep.join(map(str, (ROOT, EXAMPLES, tmp_path)))},
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert json.loads(installed.stdout)["config"]["model_family"] == "sine"


def test_what_cannot_be_imported_is_one_line():
    for module, said in (
        ("no_such_module_here", "cannot import model family module 'no_such_module_here'"),
        ("json", "module 'json' registered no model family"),
        ("not a module", "is not a module name"),
    ):
        done = run("-m", "sharding_lab", "layout", "--family", module)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and said in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1
    # A broken entry in the server's variable is a warning; the built-in models still work.
    warned = run("-m", "sharding_lab", "layout", "--json", env={"SHARDING_LAB_FAMILIES": "no_such_module_here"})
    assert warned.returncode == 0 and "warning: SHARDING_LAB_FAMILIES: cannot import" in warned.stderr


def test_a_family_cannot_take_a_builtin_name(tmp_path):
    (tmp_path / "impostor.py").write_text(
        "from sharding_lab.models import register\nfrom sharding_lab.models.mlp import MLPFamily\n\n\n"
        "@register\nclass Impostor(MLPFamily):\n    pass\n"
    )
    done = run(
        "-m",
        "sharding_lab",
        "layout",
        "--family",
        "impostor",
        env={"PYTHONPATH": os.pathsep.join(map(str, (ROOT, tmp_path)))},
    )
    assert done.returncode == 2 and "model family name 'mlp' is taken by sharding_lab.models.mlp" in done.stderr


def test_a_link_never_imports_a_model():
    before, imported = dict(sl.FAMILIES), "sine_family" in sys.modules
    updates, problems = links.from_query({"model": "sine_family", "mesh": "2x4"})
    assert "model" not in updates and problems == ["model='sine_family' ignored: one of " + ", ".join(sl.FAMILIES)]
    assert sl.FAMILIES == before and ("sine_family" in sys.modules) == imported
