"""Layout helpers: planned_layout for any rank, ArrayLayout's derived views, JSON, comparisons."""

import json

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sharding_lab import MeshSpec, actual_layout, build_mesh, compare_layouts, planned_layout
from sharding_lab.sharding.mesh import default_axes, mesh_coords


@pytest.fixture(scope="module")
def cube():
    return build_mesh(MeshSpec((2, 2, 2), default_axes(3)))  # axes x, y, z; device id = 4x + 2y + z


def test_rank3_fully_sharded_blocks(cube):
    spec = P("x", None, ("y", "z"))
    layout = planned_layout("t", (4, 6, 8), cube, spec, spec)
    assert layout.shard_shape == (2, 6, 2)
    assert layout.bytes_per_device == 2 * 6 * 2 * 4 and layout.total_bytes == 4 * 6 * 8 * 4
    for device, (x, y, z) in mesh_coords(cube).items():
        col = 2 * y + z
        assert layout.devices[device] == ((2 * x, 2 * x + 2), (0, 6), (2 * col, 2 * col + 2))
    groups = layout.replica_groups()
    assert len(groups) == 8 and all(len(g) == 1 for g in groups.values())
    assert not layout.replicated


def test_rank3_partly_replicated_groups(cube):
    layout = planned_layout("t", (2, 4, 3), cube, P(None, "y"), P(None, "y"))
    assert layout.replica_groups() == {((0, 2), (0, 2), (0, 3)): [0, 1, 4, 5], ((0, 2), (2, 4), (0, 3)): [2, 3, 6, 7]}
    assert layout.bytes_per_device == 2 * 2 * 3 * 4


def test_scalar_is_replicated_everywhere(cube):
    layout = planned_layout("opt/count", (), cube, P(), P(), itemsize=8)
    assert layout.devices == {d: () for d in range(8)}
    assert layout.shard_shape == () and layout.bytes_per_device == 8
    assert layout.replica_groups() == {(): list(range(8))}
    assert layout.replicated
    assert layout.to_json() == {
        "shape": [],
        "requested_spec": [],
        "spec": [],
        "devices": {str(d): [] for d in range(8)},
    }


def test_to_json_round_trips_through_json_text(cube):
    requested = P(None, ("y", "z"))
    layout = planned_layout("w", (3, 8), cube, requested, P(None, "y"))
    data = json.loads(json.dumps(layout.to_json()))
    assert data["requested_spec"] == [None, ["y", "z"]] and data["spec"] == [None, "y"]
    assert tuple(data["shape"]) == layout.shape
    devices = {int(d): tuple(tuple(r) for r in ranges) for d, ranges in data["devices"].items()}
    assert devices == layout.devices
    assert [d for d in data["devices"]] == [str(d) for d in range(8)]


def test_actual_layout_of_a_live_array_equals_planned(cube):
    spec = P("z", None, "x")
    array = jax.device_put(jnp.zeros((4, 3, 2)), NamedSharding(cube, spec))
    live = actual_layout("t", array, spec)
    assert live.devices == planned_layout("t", (4, 3, 2), cube, spec, spec).devices
    assert live.spec == ("z", None, "x") and live.itemsize == 4


def test_compare_layouts_reports_each_kind_of_difference(cube):
    a = planned_layout("a", (8,), cube, P("x"), P("x"))
    b = planned_layout("b", (8,), cube, P(), P())
    moved = planned_layout("a", (8,), cube, P("z"), P("z"))
    assert compare_layouts({"a": a, "b": b}, {"a": a, "b": b}) == []
    problems = compare_layouts({"a": a, "b": b}, {"a": moved, "c": b})
    assert len(problems) == 3
    assert any(p.startswith("a:") and "placed" in p for p in problems)
    assert any(p.startswith("b:") and "not found" in p for p in problems)
    assert any(p.startswith("c:") and "not planned" in p for p in problems)


def test_a_size_1_axis_is_not_said_to_split_1_ways():
    """Issue 23: on an 8×1 mesh the seed's rules read "columns split 1 ways along `model`"."""
    import sharding_lab as sl
    from sharding_lab.sharding.layout import describe, describe_change

    plan = sl.plan(sl.LabConfig(mesh=sl.MeshSpec((8, 1), ("data", "model"))))
    layouts, sizes = plan.layouts(), plan.config.mesh.axis_sizes
    texts = [describe(layout, sizes) for layout in layouts.values()]
    assert not any("1 ways" in t for t in texts)
    assert "w1: rows whole on every device; columns whole (`model` has size 1)" in " ".join(texts)
    wide = sl.plan(sl.LabConfig()).layouts()
    changed = describe_change(wide["params/w1"], layouts["params/w1"], {"data": 2, "model": 4}, sizes)
    assert "1 ways" not in changed
