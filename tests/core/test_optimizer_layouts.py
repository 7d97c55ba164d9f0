"""The optax optimizers' state (sgd: trace; adamw: mu, nu, count) is planned and placed like the
parameters it belongs to, on every mesh and preset."""

import pytest

from sharding_lab import PRESETS, Lab, LabConfig, MeshSpec
from sharding_lab.sharding.mesh import default_axes

MESHES = {
    "2x4": MeshSpec((2, 4), ("data", "model")),
    "1x8": MeshSpec((1, 8), ("data", "model")),
    "8x1": MeshSpec((8, 1), ("data", "model")),
    "2x2x2": MeshSpec((2, 2, 2), default_axes(3)),
}
PARAMS = ("w1", "b1", "w2")
EXPECTED_PATHS = {
    "sgd": {*(f"params/{p}" for p in PARAMS), *(f"opt/trace/{p}" for p in PARAMS), "opt/step", "batch/x", "batch/y"},
    "adamw": {
        *(f"params/{p}" for p in PARAMS),
        *(f"opt/mu/{p}" for p in PARAMS),
        *(f"opt/nu/{p}" for p in PARAMS),
        "opt/count",
        "opt/step",
        "batch/x",
        "batch/y",
    },
}
BUFFERS = {"sgd": ("trace",), "adamw": ("mu", "nu")}
SCALARS = {"sgd": ("opt/step",), "adamw": ("opt/count", "opt/step")}


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("preset", [p for p in PRESETS if p != "pp"])  # the seed has no hidden layers to stage
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_optimizer_state_layout_matches_plan(optimizer, preset, mesh):
    lab = Lab(LabConfig(mesh=MESHES[mesh], preset=preset, optimizer=optimizer))
    planned, actual = lab.plan.layouts(), lab.actual_layouts()
    assert set(planned) == set(actual) == EXPECTED_PATHS[optimizer]
    assert lab.verify_layout() == []
    for path in planned:
        assert actual[path].devices == planned[path].devices, path
    for buffer in BUFFERS[optimizer]:
        for name in PARAMS:
            assert actual[f"opt/{buffer}/{name}"].devices == actual[f"params/{name}"].devices
    for scalar in SCALARS[optimizer]:
        assert actual[scalar].shape == () and actual[scalar].replicated, scalar
