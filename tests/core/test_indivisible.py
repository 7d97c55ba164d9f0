"""Parameter dimensions the mesh does not divide: with Auto axes a warning (not an error), and the
planned layout is what JAX really does."""

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import sharding_lab as sl
from sharding_lab import ConfigError, Lab, LabConfig, MeshSpec, MLPSpec, Rules, Trainer, plan
from sharding_lab.sharding.layout import realized_spec
from sharding_lab.sharding.mesh import build_mesh

CONFIGS = {
    # w1 (3, 30) on data×model, b1 (30,) on model, w2 (30, 2) on data×model: 3, 30 and 2 don't split
    "odd widths": LabConfig(
        preset=None, rules=Rules(embed="data", mlp="model", data="data"), model=MLPSpec(din=3, dmid=30, dout=2)
    ),
    # 36 hidden units split over model×data (8 ways): JAX can split them over model alone
    "tuple target": LabConfig(preset=None, rules=Rules(mlp=("model", "data"), data="data"), model=MLPSpec(dmid=36)),
}


@pytest.fixture(scope="module", params=CONFIGS)
def lab(request):
    config = CONFIGS[request.param]
    try:
        return Lab(config)
    except ConfigError as refusal:  # JAX 0.12.1 keeps copies of 15-wide blocks of the 30: no spec names that
        assert "no PartitionSpec on this mesh names" in str(refusal), refusal
        pytest.skip(f"{request.param}: JAX {jax.__version__} lays it out as no PartitionSpec does (refused)")


def test_each_indivisible_parameter_gets_one_warning(lab):
    warnings = lab.plan.warnings
    assert len(warnings) == 3
    for name, warning in zip(("params/w1", "params/b1", "params/w2"), warnings):
        assert warning.startswith(name) and "cannot be split" in warning and "instead of" in warning


def test_planned_spec_is_jax_realized_spec(lab):
    for path, array in lab.plan.arrays.items():
        assert array.spec == realized_spec(lab.plan.mesh, array.shape, array.requested), path
        if path.startswith(("params/", "opt/")):
            assert array.spec != array.requested, path


def test_live_layout_matches_plan(lab):
    assert lab.verify_layout() == []
    planned, actual = lab.plan.layouts(), lab.actual_layouts()
    for path in planned:
        assert actual[path].devices == planned[path].devices, path
        assert actual[path].spec == planned[path].spec, path


def test_indivisible_model_still_trains():
    result = Trainer(Lab(CONFIGS["tuple target"]), steps=200).run()
    assert result.stop_reason == "finished"
    assert np.isfinite(result.losses).all() and result.losses[-50:].mean() < result.losses[:5].mean()


def test_explicit_axes_turn_the_warning_into_an_error():
    explicit = dataclasses.replace(CONFIGS["odd widths"], mesh=MeshSpec(axis_type="explicit"))
    with pytest.raises(ConfigError, match="params/w1 .*Explicit"):
        plan(explicit)


def test_the_written_out_fallback_agrees_with_what_xla_answers():
    """When a TPU target's compiler refuses even the one-array probe for memory (a 128256 × 4096 embedding on
    256 chips), the plan uses the rule written out; here, where XLA:CPU can be asked, the two agree."""
    import itertools

    from jax.sharding import PartitionSpec as P

    from sharding_lab.sharding.layout import _leading_divisors, realized_spec
    from sharding_lab.sharding.rules import trim

    mesh = sl.build_mesh(sl.MeshSpec((2, 4), ("data", "model")))
    entries = [None, "data", "model", ("data", "model"), ("model", "data")]
    checked = unnamed = 0
    for shape in [(32, 1), (6, 8), (4, 6), (2, 3), (12, 2)]:
        for a, b in itertools.product(entries, repeat=2):
            names = [n for e in (a, b) if e for n in ((e,) if isinstance(e, str) else e)]
            if len(names) != len(set(names)):
                continue  # one mesh axis twice in one spec: refused before this point
            spec = P(a, b)
            realized = realized_spec(mesh, shape, spec)
            if realized is None:  # JAX 0.12.1: blocks with copies, no spec (the plan refuses it); the rule is 0.10.2's
                unnamed += 1
                continue
            assert realized == P(*trim(_leading_divisors(mesh, shape, spec))), (shape, spec)
            checked += 1
    assert checked + unnamed == 55 and checked >= 30  # 5 shapes × the 11 specs without a repeated axis


def test_a_layout_no_partition_spec_names_is_refused_in_a_sentence_with_a_fix():
    """4 hidden units on an 8-way axis: XLA:CPU of JAX 0.10.2 leaves them unsplit (P()); JAX 0.12.1's splits them
    4 ways and keeps 2 copies of each block, which no PartitionSpec on the mesh names, and its compile raised
    IndivisibleError out of plan() (a whole-page incident, a CLI traceback, the server's warm thread dead). The
    plan is JAX's spec, or a ConfigError saying the lab cannot show it, whose one-click fix plans."""
    config = LabConfig(preset=None, rules=Rules(mlp="model"), model=MLPSpec(dmid=4), mesh=MeshSpec(shape=(1, 8)))
    mesh = build_mesh(config.mesh)
    jax_spec = realized_spec(mesh, (1, 4), P(None, "model"))
    if jax_spec is not None:  # JAX 0.10.2: a spec, planned with a warning
        assert plan(config).arrays["params/w1"].spec == jax_spec
        return
    with pytest.raises(ConfigError, match=r"params/w1 \(1, 4\).*no PartitionSpec on this mesh names") as refusal:
        plan(config)
    assert refusal.value.fix is not None and refusal.value.fix_label.startswith("Replicate w1's dimension 1")
    fixed = plan(refusal.value.fix)  # every dimension of 4 replicated: w1's columns, b1, w2's rows
    for path in ("params/w1", "params/b1", "params/w2"):
        assert "model" not in str(fixed.arrays[path].spec), path
