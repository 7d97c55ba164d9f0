"""Pipeline parallelism: the schedules' tables checked against their rules, the stacked model against
the unstacked one, the pipelined step's losses against the unpipelined step's (real JAX, 4 forced
host devices), its compiled sends against the table, and the errors a learner can make."""

import dataclasses
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import sharding_lab as sl
from sharding_lab.cli import main as cli
from sharding_lab.models.transformer import TransformerSpec, cross_entropy_loss
from sharding_lab.pipeline import family_for, schedule_of
from sharding_lab.pipeline.pipelined_step import microbatches
from sharding_lab.pipeline.schedule import SCHEDULES, build
from sharding_lab.program.communication import analyze
from sharding_lab.program.textbook import compare
from sharding_lab.training import options

SMALL = TransformerSpec(layers=2, embed_dim=16, heads=2, head_dim=8, mlp_dim=32, vocab=16, seq=8)
STEPS = 3


def config(preset="pp", schedule="gpipe", m=4, mesh=((2, 2), ("stage", "data")), **changes) -> sl.LabConfig:
    return sl.LabConfig(
        mesh=sl.MeshSpec(*mesh),
        preset=preset,
        model=SMALL,
        optimizer="adamw",
        lr=0.01,
        batch_size=16,
        steps=STEPS,
        chunk=STEPS,
        microbatches=m,
        schedule=schedule,
        **changes,
    )


# --- the schedules (pure Python) --------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("p,m", [(1, 3), (2, 1), (2, 4), (3, 5), (4, 2), (4, 8)])
def test_schedule_keeps_its_rules_and_its_bubble(name, p, m):
    table = build(name, p, m)
    for s in range(p):  # every stage runs each microbatch's forward and backward exactly once
        cells = [row[s] for row in table.grid if row[s] is not None]
        assert sorted((c.kind, c.microbatch) for c in cells) == sorted((k, i) for k in "FB" for i in range(m))
        for k in range(m):  # and only once what it needs was done at an earlier tick
            if s > 0:
                assert table.tick_of("F", s, k) > table.tick_of("F", s - 1, k)
            assert table.tick_of("B", s, k) > (table.tick_of("B", s + 1, k) if s < p - 1 else table.tick_of("F", s, k))
    idle = sum(cell is None for row in table.grid for cell in row)
    assert table.bubble_fraction == idle / (table.ticks * p)
    # With equal ticks, both schedules take 2(m+p−1) ticks: the textbook bubble, here counted.
    assert table.ticks == 2 * (m + p - 1)
    assert table.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))


def test_1f1b_holds_fewer_microbatches_than_gpipe():
    gpipe, one = build("gpipe", 4, 8), build("1f1b", 4, 8)
    assert gpipe.peak_held() == [8, 8, 8, 8]  # every input kept until the backwards begin
    assert all(held <= 4 - s + 1 for s, held in enumerate(one.peak_held()))
    assert one.slot_count("act") == 4 < gpipe.slot_count("act") == 8


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_slots_never_hold_two_microbatches_at_once(name):
    table = build(name, 4, 8)
    for s in range(4):
        live = {}
        for k in range(8):
            start = table.tick_of("F", 0, k) if s == 0 else table.tick_of("F", s - 1, k) + 1
            live[k] = (table.slots[("act", s, k)], start, table.tick_of("B", s, k))
        for a in range(8):
            for b in range(a + 1, 8):
                (slot_a, s_a, e_a), (slot_b, s_b, e_b) = live[a], live[b]
                assert slot_a != slot_b or e_a < s_b or e_b < s_a, (s, a, b)


# --- the stacked model ------------------------------------------------------------------------


def test_stacked_model_is_the_same_model():
    """Same seed, same weights; embed → blocks → head is the forward pass; the microbatches' loss
    shares add up to the batch's loss. (Computed in one jit: op by op it takes a minute.)"""
    plain_family, piped_family = sl.family("transformer"), family_for(SMALL, sl.Rules(layers="stage"))
    x, y = (jnp.asarray(a[:16]) for a in plain_family.make_dataset(SMALL, 0))

    @jax.jit
    def compute(x, y):
        no_shard = lambda *_: None  # noqa: E731
        plain = plain_family.build(SMALL, no_shard, nnx.Rngs(0))
        piped = piped_family.build(SMALL, no_shard, nnx.Rngs(0))
        h = piped.blocks.apply(piped.blocks.weights(), piped.embed(x))
        count = piped_family.target_count(y)
        return {
            "stacked": piped.blocks.weights(),
            "plain": [{n: getattr(b, n)[...] for n in piped.blocks.names} for b in plain.blocks],
            "piped_out": piped(x),
            "plain_out": plain(x),
            "parts_out": piped.head(h),
            "shares": sum(
                piped_family.partial_loss(piped, hm, ym, count)
                for hm, ym in zip(microbatches(h, 4), microbatches(y, 4))
            ),
            "loss": cross_entropy_loss(plain, x, y),
        }

    out = compute(x, y)
    for i, block in enumerate(out["plain"]):
        for name, value in block.items():
            np.testing.assert_array_equal(out["stacked"][name][i], value)
    np.testing.assert_allclose(out["piped_out"], out["plain_out"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["parts_out"], out["plain_out"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["shares"], out["loss"], rtol=1e-6)
    assert list(piped_family.parameters(SMALL))[:4] == ["embedding", "pos", "final_norm", "unembed"]
    assert piped_family.parameters(SMALL)["blocks/q"].logical_axes == ("layers", "embed", "heads", "head_dim")


# --- the pipelined step, trained --------------------------------------------------------------


@pytest.fixture(scope="module")
def unpipelined():
    """The unpipelined step (dp) trained once: (its Lab, its TrainResult), what the pipelines must match."""
    return sl.train(config("dp", m=1))


def test_pipelined_step_trains_like_the_unpipelined_one(unpipelined):
    """GPipe and 1F1B — and 1F1B with Megatron inside each stage — give the unpipelined step's losses
    and weights (the same sums, in another order), and every stage holds only its own blocks."""
    dp_lab, dp = unpipelined
    three_d = dict(
        preset="pp_tp", schedule="1f1b", mesh=((2, 2, 2), ("stage", "data", "model"))
    )  # + Megatron within a stage
    for changes in (dict(schedule="gpipe"), dict(schedule="1f1b"), three_d):
        lab, result = sl.train(config(**changes))
        np.testing.assert_allclose(result.losses, dp.losses, rtol=2e-5)
        ours, theirs = lab.live_arrays(), dp_lab.live_arrays()
        for i in range(SMALL.layers):
            np.testing.assert_allclose(ours["params/blocks/q"][i], theirs[f"params/blocks/{i}/q"], rtol=1e-4, atol=1e-6)
        assert lab.verify_layout() == []
        q = lab.plan.layouts()["params/blocks/q"]
        assert q.shard_shape[0] == 1  # 2 layers over 2 stages: one block per device
    assert q.shard_shape[2] == 1  # pp_tp: and one of its 2 heads


def test_a_pipeline_of_one_stage_and_one_data_shard_compiles_and_trains_like_the_unpipelined_one(unpipelined):
    """pp_tp on a 1×1×N mesh (a class layout): every axis shard_map runs by hand has size 1, and XLA's
    SPMD partitioner stopped on the step's sums with a RET_CHECK ("Cross-partition allreduce must be in
    (partial) manual partitioning mode") — the sums over one device are now left out."""
    _, dp = unpipelined
    lab, result = sl.train(config("pp_tp", m=2, mesh=((1, 1, 2), ("stage", "data", "model"))))
    np.testing.assert_allclose(result.losses, dp.losses, rtol=2e-5)
    assert lab.verify_layout() == []
    assert lab.plan.layouts()["params/blocks/q"].shard_shape[2] == 1  # Megatron still splits the 2 heads
    # what the page says of one stage: nothing sent between stages, the microbatches one after the other
    assert schedule_of(lab.plan.config).size_text == "1 stage × 2 microbatches"
    assert not [c for c in analyze(lab.plan).collectives if c.op == "collective-permute"]


def test_compiled_step_sends_what_the_schedule_sends():
    """Its collective-permutes run over `stage`, one per tick in which some stage sends (forward:
    activations to the next stage; backward: their gradients to the previous one), and the data
    axis all-reduces the gradients once per step, as the textbook says."""
    for schedule in SCHEDULES:
        plan = sl.plan(config(schedule=schedule))
        table = schedule_of(plan.config)
        report = analyze(plan)
        sends = {
            "forward": sum(any(c is not None and c.kind == "F" for c in row[:-1]) for row in table.grid),
            "backward": sum(any(c is not None and c.kind == "B" for c in row[1:]) for row in table.grid),
        }
        permutes = [c for c in report.collectives if c.op == "collective-permute"]
        assert all(c.axes == ("stage",) for c in permutes)
        rows = 16 // 4 // 2  # a microbatch's rows on one data shard
        for phase, what in (("forward", "activations"), ("backward", "gradient of activations")):
            found = [c for c in permutes if c.phase == phase]
            assert sum(c.count for c in found) == sends[phase], (schedule, phase)
            assert all(
                m.startswith(f"{what} ({rows} × {SMALL.seq} × {SMALL.embed_dim})") for c in found for m in c.moves
            )
        data_reduces = [
            c for c in report.collectives if c.op == "all-reduce" and "data" in c.axes and c.phase == "backward"
        ]
        assert sum(c.count for c in data_reduces) <= 2
        assert not any("collective-permute" in d for d in compare(plan, report).differences)


def test_tensor_parallel_inside_the_stages_is_compiled_in_both_passes():
    plan = sl.plan(config("pp_tp", m=2, mesh=((2, 2, 2), ("stage", "data", "model"))))
    comparison = compare(plan, analyze(plan))
    for phase in ("forward", "backward"):
        assert any(
            a.startswith("As the textbook:") and f"activations over `model` in the {phase} pass" in a
            for a in comparison.agrees
        ), comparison
        assert any(
            a.startswith("As the textbook:")
            and f"collective-permute of activations over `stage` in the {phase} pass" in a
            for a in comparison.agrees
        )


# --- errors and the command line ----------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(mesh=((4, 2), ("stage", "data"))), "4 pipeline stages (mesh axis 'stage') cannot share 2 layers"),
        (dict(m=3), "3 microbatches cannot split a batch of 16"),
        (dict(m=16), "each of 16 microbatches has 1 rows"),
        (dict(schedule="zigzag"), "unknown schedule 'zigzag'"),
    ],
)
def test_a_pipeline_that_cannot_work_is_refused_with_the_fix(changes, words):
    with pytest.raises(sl.ConfigError, match=re.escape(words)):
        sl.plan(config(**changes))


def test_command_line_reports_the_bubble_of_the_schedule_it_runs(capsys):
    args = [
        "layout",
        "--model",
        "transformer",
        "--preset",
        "pp",
        "--mesh",
        "4x2",
        "--axes",
        "stage,data",
        "--layers",
        "4",
        "--microbatches",
        "8",
        "--json",
    ]
    for schedule in SCHEDULES:
        assert cli.main(args + ["--schedule", schedule]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["bubble_fraction"] == pytest.approx(3 / 11)
        assert out["pipeline_schedule"]["schedule"] == schedule
        assert out["config"]["pipeline"] == {"stage_axis": "stage", "microbatches": 8, "schedule": schedule}
    assert cli.main([a for a in args if a not in ("--layers", "4")]) == 2  # 2 layers, 4 stages
    assert "make the layers a multiple of 4 (Layers, --layers: e.g. 4)" in capsys.readouterr().err


def test_small_bubble_challenge_needs_1f1b_to_keep_memory_down():
    from sharding_lab.lessons import challenges

    challenge = challenges.get("small-bubble")
    config = challenges.solution_config(challenge)
    solved, why = challenge.check(sl.plan(config))
    assert solved and "15.8% of the stage-ticks idle" in why  # 3/19, from the table
    solved, why = challenge.check(sl.plan(dataclasses.replace(config, schedule="gpipe")))
    assert not solved and why.endswith("up to 16 microbatches at once — but a stage holds more than 4.")
    solved, why = challenge.check(sl.plan(dataclasses.replace(config, microbatches=4)))
    assert not solved and "the bubble is not under 20%" in why


def test_export_says_it_does_not_cover_a_pipeline(capsys):
    assert (
        cli.main(["export", "--model", "transformer", "--preset", "pp", "--mesh", "2x2", "--axes", "stage,data"]) == 2
    )
    assert "does not cover pipeline parallelism" in capsys.readouterr().err


def test_worker_options_carry_the_pipeline():
    """A multi-process run starts its workers with config_to_args: microbatches and schedule travel."""
    import argparse

    piped = config(schedule="1f1b", m=8)
    parser = argparse.ArgumentParser()
    options.add_config_options(parser)
    assert options.config_from_args(parser.parse_args(options.config_to_args(piped))) == piped
