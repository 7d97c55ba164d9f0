"""Explicit axes: training works, layouts equal Auto's for the same rules, and the lesson shows
what JAX refuses (its own error messages) and how the app's code avoids it."""

import dataclasses

import pytest

import sharding_lab as sl
from sharding_lab.lessons.explicit import lesson
from sharding_lab.sharding.mesh import MeshSpec


def explicit(config: sl.LabConfig) -> sl.LabConfig:
    return dataclasses.replace(config, mesh=dataclasses.replace(config.mesh, axis_type="explicit"))


def test_seed_preset_trains_under_explicit_axes_where_it_divides():
    # On 2×4 the seed's w2 (32×1) cannot split 4 ways — an error with Explicit axes. On 8×1 the
    # `model` axis has size 1, so the seed's rules apply as written.
    config = explicit(sl.LabConfig(mesh=MeshSpec((8, 1)), preset="seed"))
    lab, result = sl.train(config)
    assert result.final_loss < 0.05
    assert lab.verify_layout() == []


@pytest.mark.parametrize("preset", ["dp", "fsdp", "tp", "fsdp_tp"])
def test_live_layout_under_explicit_equals_auto(preset):
    auto = sl.LabConfig(preset=preset, steps=200)
    lab, result = sl.train(explicit(auto))
    assert not result.diverged
    live = {path: layout.devices for path, layout in lab.actual_layouts().items()}
    assert live == {path: layout.devices for path, layout in sl.plan(auto).layouts().items()}
    assert lesson(auto).same_layout_as_auto


def test_lesson_on_the_seed_shows_the_refusal_then_walks_the_forward_pass():
    """Issue 23: the seed's rules under Explicit axes used to end the lesson at the refusal (and its
    message was garbled: "use a size 4 divides"). JAX's own words are quoted, the fix (replicate
    w2's dimension 1) is a config that plans, and the walk goes on with it."""
    taught = lesson(sl.LabConfig(preset="seed"))
    assert taught.plan_error is None
    assert "params/w2 (32, 1)" in taught.refusal and "does not evenly divide the dimension size 1" in taught.refusal
    assert "size 4 divides" not in taught.refusal
    assert taught.walked_with == "Replicate w2's dimension 1"
    assert [s.op for s in taught.steps] == ["with_sharding_constraint(batch)", "h @ w1", "h + b1", "h @ w2"]


def test_explicit_refusal_carries_a_fix_that_plans():
    config = explicit(sl.LabConfig(preset="seed"))
    with pytest.raises(sl.ConfigError) as refused:
        sl.plan(config)
    fixed = sl.plan(refused.value.fix)  # plans: the button's config works
    assert fixed.config.mesh.axis_type == "explicit"
    assert tuple(fixed.arrays["params/w2"].spec) in ((), (None,), (None, None))
    # only w2 changed: every other array keeps the seed's layout
    auto = sl.plan(sl.LabConfig(preset="seed"))
    assert {p: a.spec for p, a in fixed.arrays.items() if "w2" not in p} == {
        p: a.spec for p, a in auto.arrays.items() if "w2" not in p
    }


def test_explicit_refusal_says_what_auto_axes_do_on_this_jax():
    """What the refusal says Auto axes would do is what this JAX's compiled program does with the same array on the
    same mesh with Auto axes (JAX 0.10.2 replicates a width of 30 on a 4-way axis; 0.12.1 splits it partway with
    copies, a GSPMDSharding) — it once said "replicate" on every version."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    config = dataclasses.replace(explicit(sl.LabConfig(preset="seed")), model=sl.MLPSpec(dmid=30))
    with pytest.raises(sl.ConfigError) as refused:
        sl.plan(config)
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    want = NamedSharding(mesh, PartitionSpec(None, "model"))
    compiled = jax.jit(lambda: jax.lax.with_sharding_constraint(jnp.zeros((1, 30)), want)).lower().compile()
    sharding = compiled.output_shardings
    said = str(refused.value)
    if isinstance(sharding, NamedSharding) and all(axis is None for axis in sharding.spec):
        assert f"with Auto axes JAX {jax.__version__} would silently lay it out as P() (replicated)" in said
    else:
        assert f"with Auto axes JAX {jax.__version__} would split it into fewer blocks and keep copies" in said


def test_lesson_on_fsdp_shows_jax_errors_and_fixes():
    steps = {s.op: s for s in lesson(sl.LabConfig(preset="fsdp")).steps}
    assert steps["with_sharding_constraint(batch)"].refused
    assert "reshard" in steps["with_sharding_constraint(batch)"].fix
    assert steps["h @ w1"].refused and "ShardingTypeError" in steps["h @ w1"].naive
    assert "gather" in steps["h @ w1"].fix and "out_sharding" in steps["h @ w1"].fix
    assert not steps["h @ w2"].refused


def test_lesson_on_tp_needs_out_sharding_for_the_row_parallel_matmul():
    steps = {s.op: s for s in lesson(sl.LabConfig(preset="tp")).steps}
    assert not steps["h @ w1"].refused
    assert steps["h @ w2"].refused and "out_sharding" in steps["h @ w2"].naive
    assert not steps["with_sharding_constraint(batch)"].refused  # tp does not split the batch
