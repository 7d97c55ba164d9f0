"""Every preset trains the seed model on every mesh, and every live array sits where the plan says."""

import numpy as np
import pytest

from sharding_lab import PRESETS, ConfigError, Lab, LabConfig, MeshSpec, plan, train
from sharding_lab.sharding.mesh import default_axes

MESHES = {
    "2x4": MeshSpec((2, 4), ("data", "model")),
    "1x8": MeshSpec((1, 8), ("data", "model")),
    "8x1": MeshSpec((8, 1), ("data", "model")),
    "2x2x2": MeshSpec((2, 2, 2), default_axes(3)),
}
# the seed model has no extra hidden layers to divide into stages: pp is tests/core/test_mlp_pipeline.py's
SEED_PRESETS = [p for p in PRESETS if p != "pp"]
CASES = [(preset, mesh) for preset in SEED_PRESETS for mesh in MESHES]
SEED_PATHS = {
    "params/w1",
    "params/b1",
    "params/w2",
    "opt/momentum/w1",
    "opt/momentum/b1",
    "opt/momentum/w2",
    "batch/x",
    "batch/y",
}


def effective(spec, sizes):
    """A spec without its size-1 mesh axes (JAX drops them from live arrays' specs: same layout)."""
    dims = []
    for target in spec:
        names = () if target is None else (target,) if isinstance(target, str) else target
        kept = tuple(n for n in names if sizes[n] > 1)
        dims.append(None if not kept else kept[0] if len(kept) == 1 else kept)
    while dims and dims[-1] is None:
        dims.pop()
    return tuple(dims)


# One case trains the whole default run (3000 steps); every other one trains SHORT steps — the same 100-step chunk
# program three times — and must follow the same losses: every layout computes the same sums (measured: within
# 1.3e-6 of the full run's, step by step), so each reaches the full run's final loss. 24 × 3000 steps trained the
# same curve 24 times: most of this module's time.
FULL, SHORT = ("seed", "2x4"), 300


@pytest.fixture(scope="module")
def runs():
    """(preset, mesh) → (lab, result), each trained once: :data:`FULL` for the default 3000 steps, the others for
    :data:`SHORT`."""
    cache = {}

    def get(preset, mesh):
        if (preset, mesh) not in cache:
            steps = {} if (preset, mesh) == FULL else {"steps": SHORT}
            cache[preset, mesh] = train(LabConfig(mesh=MESHES[mesh], preset=preset, **steps))
        return cache[preset, mesh]

    return get


def test_the_default_run_trains_the_seed_model_below_0_05(runs):
    _, result = runs(*FULL)
    assert result.stop_reason == "finished"
    assert result.steps == 3000 and len(result.losses) == 3000
    assert result.final_loss < 0.05


@pytest.mark.parametrize("preset,mesh", [case for case in CASES if case != FULL])
def test_every_preset_and_mesh_follows_the_default_run_s_losses(runs, preset, mesh):
    _, full = runs(*FULL)
    _, result = runs(preset, mesh)
    assert result.stop_reason == "finished" and result.steps == SHORT and len(result.losses) == SHORT
    assert result.losses[-1] < 0.5 * result.losses[0]  # it learns
    np.testing.assert_allclose(result.losses, full.losses[:SHORT], rtol=1e-4)


@pytest.mark.parametrize("preset,mesh", CASES)
def test_trained_layout_matches_plan_for_every_array(runs, preset, mesh):
    lab, _ = runs(preset, mesh)
    assert lab.verify_layout() == []
    planned, actual = lab.plan.layouts(), lab.actual_layouts()
    assert set(planned) == set(actual) == SEED_PATHS
    for path in SEED_PATHS:
        assert actual[path].shape == planned[path].shape, path
        assert actual[path].devices == planned[path].devices, path
        sizes = lab.config.mesh.axis_sizes
        assert effective(actual[path].spec, sizes) == effective(planned[path].spec, sizes), path
        assert set(actual[path].devices) == set(range(8)), path


def test_fsdp_tp_needs_two_axes_on_a_one_axis_mesh():
    with pytest.raises(ConfigError, match="two different mesh axes") as info:
        plan(LabConfig(mesh=MeshSpec((8,), ("data",)), preset="fsdp_tp"))
    assert "'data'" in str(info.value) and info.value.field == "rules"


@pytest.mark.parametrize("preset", [p for p in SEED_PRESETS if p != "fsdp_tp"])
def test_other_presets_apply_on_a_one_axis_mesh(preset):
    lab = Lab(LabConfig(mesh=MeshSpec((8,), ("data",)), preset=preset))
    assert lab.verify_layout() == []
