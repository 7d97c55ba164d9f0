"""Several JAX processes, one mesh: `train --processes N`, the launcher, its failures, the app option.

The runs here start real worker processes (`python -m sharding_lab.distributed.worker`), joined over 127.0.0.1
by jax.distributed with gloo CPU collectives; each takes a few seconds to start on a 2-core machine.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import sharding_lab as sl
from sharding_lab.cli import main as cli
from sharding_lab.distributed import WorkerFailed
from sharding_lab.distributed import launcher as distributed
from sharding_lab.training import options
from tests.support import ROOT, app_test

SEED_ARGS = ["--mesh", "2x4", "--axes", "data,model", "--preset", "seed"]


def children() -> list[psutil.Process]:
    """This test process's live descendants (zombies excluded)."""
    return [
        p for p in psutil.Process().children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]


def workers_left() -> list[psutil.Process]:
    return [p for p in children() if "sharding_lab.distributed.worker" in " ".join(p.cmdline())]


def assert_gone(pids, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
    ):
        time.sleep(0.1)
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"worker processes left behind: {alive}"
    assert not workers_left()


# --- no processes started -------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        sl.LabConfig(),
        sl.LabConfig(
            mesh=sl.MeshSpec((2, 2, 2), ("x", "y", "z"), "explicit"),
            preset="fsdp_tp",
            optimizer="adamw",
            lr=0.003,
            batch_size=16,
            steps=77,
            chunk=50,
            seed=3,
        ),
        sl.LabConfig(
            preset=None,
            rules=sl.Rules(embed=None, mlp=("model", "data"), data="data", overrides=(("w2", ("model", None)),)),
            model=sl.MLPSpec(2, 64, 3, 2),
            decay=0.8,
        ),
    ],
    ids=["seed", "explicit 3-axis adamw", "custom rules"],
)
def test_worker_options_rebuild_the_same_config(config):
    parser = argparse.ArgumentParser()
    options.add_config_options(parser)
    rebuilt = options.config_from_args(parser.parse_args(options.config_to_args(config)))
    assert rebuilt.resolved_rules() == config.resolved_rules()
    assert dataclasses_equal(rebuilt, config)


def dataclasses_equal(a: sl.LabConfig, b: sl.LabConfig) -> bool:
    fields = ("mesh", "model", "optimizer", "lr", "decay", "batch_size", "steps", "seed", "chunk")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def test_process_counts_must_share_the_mesh_evenly():
    assert distributed.process_choices(8) == [1, 2, 4]
    assert distributed.process_choices(6) == [1, 2]
    assert distributed.process_choices(1) == [1]
    distributed.check_processes(sl.LabConfig(), 4)
    with pytest.raises(sl.ConfigError, match="3 processes cannot share the 8 devices.*1, 2, 4 or 8"):
        distributed.check_processes(sl.LabConfig(), 3)
    with pytest.raises(sl.ConfigError, match="one device"):
        distributed.check_processes(sl.LabConfig(mesh=sl.MeshSpec((1,), ("data",))), 2)


def test_gathered_layouts_are_merged_and_renumbered_by_mesh_position():
    report = {"shape": [4], "requested_spec": ["data"], "spec": ["data"], "itemsize": 4}
    merged = distributed.merge_layouts(
        {0: {"a": {**report, "devices": {"0": [[0, 2]]}}}, 1: {"a": {**report, "devices": {"2048": [[2, 4]]}}}},
        {0: 0, 2048: 1},
    )
    assert merged["a"].devices == {0: ((0, 2),), 1: ((2, 4),)}
    assert merged["a"].spec == ("data",) and merged["a"].bytes_per_device == 8
    assert distributed.describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert distributed.describe_exit(3) == "exited with code 3"


def test_host_loaded_batches_train_exactly_like_device_sampled_ones():
    config = sl.LabConfig(preset="fsdp", steps=300)
    sampled = sl.Trainer(sl.Lab(config)).run()
    lab = sl.Lab(config)
    loaded = sl.Trainer(lab, host_batches=True).run()
    np.testing.assert_array_equal(loaded.losses, sampled.losses)
    assert lab.verify_layout() == []
    assert sl.compare_layouts(lab.plan.layouts(), lab.actual_layouts(lab.load_batch(0))) == []


# --- real processes ------------------------------------------------------------------------


def test_two_processes_train_the_seed_like_one_and_gather_the_same_layout(capsys):
    # 1000 steps (loss ~0.058; 3000 reach ~0.036): the check is that two processes compute what one does
    proc = subprocess.run(
        [sys.executable, "-m", "sharding_lab", "train", *SEED_ARGS, "--steps", "1000", "--processes", "2", "--json"],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=150,
        env={**os.environ, "SHARDING_LAB_DEVICES": "8"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = json.loads(proc.stdout)
    assert cli.main(["layout", *SEED_ARGS, "--steps", "1000", "--json"]) == 0
    one_plan = json.loads(capsys.readouterr().out)
    one = sl.Trainer(sl.Lab(sl.LabConfig(steps=1000))).run()

    assert two["steps"] == 1000 and two["stop_reason"] == "finished" and two["steps_per_s"] > 0
    assert two["final_loss"] < 0.1 and one.final_loss < 0.1  # from ~7 at the start
    assert abs(two["final_loss"] - one.final_loss) < 1e-4  # the very same batches and math
    assert two["layout"] == one_plan["layout"]  # gathered per-device layout == one-process layout
    assert two["layout_matches_plan"] is True
    for key in ("config", "mesh", "warnings"):
        assert two[key] == one_plan[key], key
    assert two["mesh"]["device_ids"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert two["processes"] == {str(d): d // 4 for d in range(8)}
    assert [two["jax_device_ids"][str(d)] for d in range(4)] == [0, 1, 2, 3]
    assert len(set(two["jax_device_ids"].values())) == 8
    assert set(two["hosts"]) == {"0", "1"}
    assert not workers_left()


def test_a_killed_worker_ends_the_run_with_a_clear_error_within_seconds():
    pids, killed_at = [], []

    def kill_worker_1(progress, prediction):
        if not killed_at:
            os.kill(pids[1], signal.SIGKILL)
            killed_at.append(time.monotonic())

    with pytest.raises(WorkerFailed) as failure:
        distributed.run(
            sl.LabConfig(steps=200_000),
            2,
            on_progress=kill_worker_1,
            on_status=lambda state, info: pids.extend(info.get("pids", [])),
        )
    took = time.monotonic() - killed_at[0]
    message = str(failure.value)
    assert took < 30, took
    assert "process 1 of 2" in message and "killed by SIGKILL" in message and "stopped" in message
    assert_gone(pids)


def test_a_hung_worker_is_not_waited_for():
    pids, frozen = [], []

    def freeze_worker_1(progress, prediction):
        if not frozen:
            os.kill(pids[1], signal.SIGSTOP)  # alive but silent: process 0 waits in a collective
            frozen.append(time.monotonic())

    with pytest.raises(WorkerFailed, match="no word from the processes for 4 s"):
        distributed.run(
            sl.LabConfig(steps=200_000),
            2,
            on_progress=freeze_worker_1,
            silence_limit_s=4,
            on_status=lambda state, info: pids.extend(info.get("pids", [])),
        )
    assert time.monotonic() - frozen[0] < 30
    assert_gone(pids)


# --- the app -------------------------------------------------------------------------------


def test_train_page_runs_two_processes_stops_them_and_shows_who_owns_what():

    at = app_test(120)
    at.switch_page("app_pages/train.py").run()
    assert at.selectbox(key="processes").options == ["1", "2", "4"]
    at.selectbox(key="processes").select(2).run()
    assert any("2 JAX processes" in c.value for c in at.caption)
    at.number_input(key="steps").set_value(20_000).run()
    at.button(key="train").click().run()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        at.run()
        points = [m.value for m in at.metric if m.label == "Last loss"]
        if points and points[0] != "—":
            break
        time.sleep(0.3)
    else:
        pytest.fail("no loss came back from the processes")
    at.button(key="stop").click().run()
    while time.monotonic() < deadline and not at.success:
        time.sleep(0.3)
        at.run()
    assert not at.exception and not at.error
    assert any("stopped" in s.value.lower() and "across 2 processes" in s.value for s in at.success)
    table = at.dataframe[0].value
    assert table["process"].tolist() == [0, 1] and table["devices"].tolist() == ["0, 1, 2, 3", "4, 5, 6, 7"]
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.id.endswith("-process_map"))
    owners = {t["meta"]["device"]: t["meta"]["process"] for t in spec["data"] if "process" in t.get("meta", {})}
    assert owners == {d: d // 4 for d in range(8)}
    assert any("only it can address" in t["text"] for t in spec["data"])
    assert not workers_left()
