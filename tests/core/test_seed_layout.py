"""The seed configuration on the 2×4 mesh: exactly which slice of each array each device holds."""

import pytest

from sharding_lab import ConfigError, Lab, LabConfig, MeshSpec, plan


@pytest.fixture(scope="module")
def lab():
    return Lab(LabConfig())


@pytest.fixture(scope="module", params=["planned", "actual"])
def layouts(request, lab):
    return lab.plan.layouts() if request.param == "planned" else lab.actual_layouts()


def test_w1_columns_split_over_model_rows_replicated(layouts):
    w1 = layouts["params/w1"]
    assert w1.shape == (1, 32)
    for d in range(8):
        assert w1.devices[d] == ((0, 1), (8 * (d % 4), 8 * (d % 4) + 8))


def test_b1_split_over_model_like_w1_columns(layouts):
    b1 = layouts["params/b1"]
    for d in range(8):
        assert b1.devices[d] == ((8 * (d % 4), 8 * (d % 4) + 8),)


def test_momentum_buffer_sits_exactly_like_its_parameter(layouts):
    for name in ("w1", "b1", "w2"):
        assert layouts[f"opt/momentum/{name}"].devices == layouts[f"params/{name}"].devices


def test_batch_rows_split_in_halves_over_data(layouts):
    for path in ("batch/x", "batch/y"):
        batch = layouts[path]
        assert batch.shape == (32, 1)
        for d in range(8):
            assert batch.devices[d] == (((0, 16) if d < 4 else (16, 32)), (0, 1)), (path, d)


def test_w2_cannot_split_so_it_is_replicated(layouts):
    w2 = layouts["params/w2"]
    assert w2.requested_spec == (None, "model")
    assert w2.spec == ()
    assert w2.changed_by_jax and w2.replicated
    assert all(ranges == ((0, 32), (0, 1)) for ranges in w2.devices.values())


def test_plan_warns_about_w2_only(lab):
    assert len(lab.plan.warnings) == 1
    warning = lab.plan.warnings[0]
    assert "params/w2" in warning and "(32, 1)" in warning and "'model'" in warning


def test_explicit_axes_refuse_the_seed_w2():
    with pytest.raises(ConfigError) as info:
        plan(LabConfig(mesh=MeshSpec(axis_type="explicit")))
    assert "w2" in str(info.value) and "Explicit" in str(info.value)
    assert info.value.field == "rules"
