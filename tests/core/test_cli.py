"""The command line: `python -m sharding_lab {train,layout}`, its JSON contract and its errors."""

import json
import os
import subprocess
import sys

import pytest

from sharding_lab.cli import main as cli
from tests.support import ROOT

SEED_ARGS = ["--mesh", "2x4", "--axes", "data,model", "--preset", "seed"]
PATHS = ("params/w1", "params/b1", "params/w2", "opt/momentum/w1", "batch/x", "batch/y")


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "sharding_lab", *args],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=180,
        env={**os.environ, "SHARDING_LAB_DEVICES": "8"},
    )


def in_process(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def trained():
    proc = run_cli("train", *SEED_ARGS, "--steps", "300", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def planned():
    proc = run_cli("layout", *SEED_ARGS, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def check_plan_contract(out):
    assert out["config"]["mesh"] == [2, 4] and out["config"]["preset"] == "seed"
    assert out["mesh"] == {"shape": [2, 4], "axes": ["data", "model"], "device_ids": [[0, 1, 2, 3], [4, 5, 6, 7]]}
    assert isinstance(out["warnings"], list) and any("w2" in w for w in out["warnings"])
    for path in PATHS:
        layout = out["layout"][path]
        assert set(layout) == {"shape", "requested_spec", "spec", "devices"}, path
        assert set(layout["devices"]) == {str(d) for d in range(8)}, path
        assert all(
            len(ranges) == len(layout["shape"]) and all(len(r) == 2 for r in ranges)
            for ranges in layout["devices"].values()
        ), path
    w1, w2 = out["layout"]["params/w1"], out["layout"]["params/w2"]
    assert w1["shape"] == [1, 32] and w1["spec"] == [None, "model"]
    assert w1["devices"]["5"] == [[0, 1], [8, 16]]
    assert w2["requested_spec"] == [None, "model"] and w2["spec"] == []
    assert out["layout"]["batch/x"]["devices"]["4"] == [[16, 32], [0, 1]]


def test_train_json_contract(trained):
    check_plan_contract(trained)
    assert trained["steps"] == 300 and trained["config"]["steps"] == 300
    assert isinstance(trained["final_loss"], float) and 0 < trained["final_loss"] < 1
    assert trained["steps_per_s"] > 0
    assert trained["stop_reason"] == "finished" and trained["layout_matches_plan"] is True


def test_layout_json_contract_and_it_matches_the_trained_layout(planned, trained):
    check_plan_contract(planned)
    assert "final_loss" not in planned and "steps" not in planned
    assert planned["layout"] == trained["layout"]


def test_bad_config_exits_2_with_one_line_error():
    proc = run_cli("layout", "--mesh", "3x3")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "needs 9 devices" in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args,words",
    [
        (["--mesh", "2y4"], ["'2y4'", "2x4"]),
        (["--mesh", "8", "--preset", "fsdp_tp"], ["fsdp_tp", "two"]),
        (["--rule", "mlp=nope"], ["'nope'"]),
        (["--rule", "hidden=model"], ["hidden", "embed"]),
        (["--rule", "mlp"], ["NAME=VALUE"]),
        (["--mesh", "4x2", "--batch", "30"], ["batch/x", "28 or 32"]),
    ],
    ids=[
        "mesh 2y4",
        "fsdp_tp on one axis",
        "unknown mesh axis",
        "unknown logical axis",
        "rule without =",
        "batch 30 on data 4",
    ],
)
def test_bad_options_are_one_line_errors_in_process(capsys, args, words):
    code, out, err = in_process(capsys, "layout", *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
    for word in words:
        assert word in err


def test_layout_prints_a_readable_table(capsys):
    code, out, _ = in_process(capsys, "layout", *SEED_ARGS)
    assert code == 0
    assert "mesh 2×4 (data, model) on devices [[0, 1, 2, 3], [4, 5, 6, 7]]" in out
    assert "warning: params/w2" in out
    lines = out.splitlines()
    w1 = next(i for i, line in enumerate(lines) if line.startswith("params/w1"))
    assert "shape (1, 32)" in lines[w1] and "spec P(None, 'model')" in lines[w1]
    assert "[0:1], [8:16]" in lines[w1 + 2] and lines[w1 + 2].endswith("on devices 1, 5")
    w2 = next(line for line in lines if line.startswith("params/w2"))
    assert "requested P(None, 'model')" in w2


def test_rule_and_override_options(capsys):
    code, out, _ = in_process(
        capsys,
        "train",
        *SEED_ARGS,
        "--rule",
        "mlp=model+data",
        "--override",
        "w2=model:none",
        "--steps",
        "200",
        "--json",
    )
    assert code == 0
    result = json.loads(out)
    assert result["config"]["preset"] is None
    assert result["config"]["rules"]["mlp"] == ["model", "data"]
    assert result["config"]["rules"]["overrides"] == {"w2": ["model", None]}
    layout = result["layout"]
    assert layout["params/w1"]["spec"] == [None, ["model", "data"]]
    assert layout["params/w1"]["devices"]["1"] == [[0, 1], [8, 12]]
    assert layout["params/w2"]["spec"] == ["model"]
    assert layout["opt/momentum/w2"]["devices"] == layout["params/w2"]["devices"]
    assert result["warnings"] == [] and result["layout_matches_plan"] is True
    assert result["stop_reason"] == "finished" and result["steps"] == 200


def test_diverged_run_exits_1(capsys):
    code, out, _ = in_process(capsys, "train", "--lr", "100", "--steps", "200", "--json")
    assert code == 1
    assert json.loads(out)["stop_reason"].startswith("diverged")


def test_diverged_run_prints_standard_json(capsys):
    _, out, _ = in_process(capsys, "train", "--lr", "100", "--steps", "200", "--json")

    def reject(token):
        raise ValueError(f"non-standard JSON constant {token}")

    json.loads(out, parse_constant=reject)
