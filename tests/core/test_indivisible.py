"""Parameter dimensions the mesh does not divide: with Auto axes a warning (not an error), and the
planned layout is what JAX really does."""

import dataclasses

import numpy as np
import pytest

import sharding_lab as sl
from sharding_lab import ConfigError, Lab, LabConfig, MeshSpec, MLPSpec, Rules, Trainer, plan
from sharding_lab.sharding.layout import realized_spec

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
    return Lab(CONFIGS[request.param])


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
    result = Trainer(Lab(CONFIGS["odd widths"]), steps=200).run()
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
    checked = 0
    for shape in [(32, 1), (6, 8), (4, 6), (2, 3), (12, 2)]:
        for a, b in itertools.product(entries, repeat=2):
            names = [n for e in (a, b) if e for n in ((e,) if isinstance(e, str) else e)]
            if len(names) != len(set(names)):
                continue  # one mesh axis twice in one spec: refused before this point
            spec = P(a, b)
            assert realized_spec(mesh, shape, spec) == P(*trim(_leading_divisors(mesh, shape, spec))), (shape, spec)
            checked += 1
    assert checked == 55  # 5 shapes × the 11 specs without a repeated axis
