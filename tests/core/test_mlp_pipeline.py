"""The MLP's pipeline: its extra hidden layers divided into stages (``--preset pp``), trained by the same
schedule machinery as the transformer's, and equal to data parallelism's training at the same seed."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

import sharding_lab as sl
from sharding_lab.cli import main as cli
from sharding_lab.pipeline import schedule_of
from sharding_lab.program.communication import analyze
from sharding_lab.program.textbook import compare

MESH = sl.MeshSpec((2, 4), ("stage", "data"))


def mlp(preset: str, schedule: str = "gpipe", hidden_layers: int = 4, **changes) -> sl.LabConfig:
    kwargs = {"microbatches": 4, "schedule": schedule} if preset == "pp" else {}
    return sl.LabConfig(mesh=MESH, preset=preset, model=sl.MLPSpec(hidden_layers=hidden_layers), **kwargs, **changes)


def test_the_hidden_layers_are_stacked_and_each_stage_holds_its_own():
    plan = sl.plan(mlp("pp"))
    layouts = plan.layouts()
    # w1 and w2 stay outside the stack; the four hidden layers are one array per weight, layers first
    assert {"params/w1", "params/b1", "params/w2", "params/blocks/w", "params/blocks/b"} <= set(layouts)
    assert not any(path.startswith("params/wh") for path in layouts)
    assert plan.arrays["params/blocks/w"].shape == (4, 32, 32)
    assert layouts["params/blocks/w"].shard_shape == (2, 32, 32)  # 2 stages, 2 layers each


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_pipelined_mlp_trains_like_data_parallelism_at_the_same_seed(schedule):
    _, piped = sl.train(mlp("pp", schedule, steps=200))
    _, dp = sl.train(mlp("dp", steps=200))
    assert piped.stop_reason == "finished"
    np.testing.assert_allclose(piped.losses, dp.losses, rtol=1e-4)
    assert piped.losses[-1] < piped.losses[0] / 10  # it learned


def test_the_command_line_reports_the_bubble_and_dp_s_loss():
    """The issue's acceptance: bubble 0.2 (2 stages, 4 microbatches: 1/5) and the final loss within 1% of dp's."""
    args = ["train", "--mesh", "2x4", "--axes", "stage,data", "--hidden-layers", "4", "--steps", "300", "--json"]
    answers = {}
    for preset in (["--preset", "pp", "--microbatches", "4", "--schedule", "gpipe"], ["--preset", "dp"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli.main(args + preset) == 0
        answers[preset[1]] = json.loads(out.getvalue())
    assert answers["pp"]["bubble_fraction"] == pytest.approx(0.2)
    assert answers["pp"]["pipeline_schedule"]["schedule"] == "gpipe"
    assert answers["pp"]["final_loss"] == pytest.approx(answers["dp"]["final_loss"], rel=0.01)
    assert answers["pp"]["layout_matches_plan"] is True


def test_the_compiled_step_sends_activations_between_the_stages_as_the_textbook_says():
    plan = sl.plan(mlp("pp"))
    report = analyze(plan)
    permutes = [c for c in report.collectives if c.op == "collective-permute"]
    assert permutes and all(c.axes == ("stage",) for c in permutes)
    table = schedule_of(plan.config)
    forward_ticks = sum(any(c is not None and c.kind == "F" for c in row[:-1]) for row in table.grid)
    assert sum(c.count for c in permutes if c.phase == "forward") == forward_ticks
    assert not any("collective-permute" in d for d in compare(plan, report).differences)


@pytest.mark.parametrize(
    ("hidden_layers", "words"),
    [(0, "cannot share 0 layers equally"), (3, "(Extra hidden layers, --hidden-layers: e.g. 2 or 4)")],
)
def test_a_pipeline_the_hidden_layers_cannot_fill_is_refused_with_the_fix(hidden_layers, words):
    with pytest.raises(sl.ConfigError) as refused:
        sl.plan(mlp("pp", hidden_layers=hidden_layers))
    assert words in str(refused.value)
    fixed = refused.value.fix
    assert fixed is not None and sl.plan(fixed).config.model.hidden_layers % 2 == 0
