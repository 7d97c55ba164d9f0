"""Collectives of the compiled train step: the HLO parser on a saved snippet, then real compiles
checked against what the maths of each strategy requires (expectations written from first
principles, not copied from the output)."""

import json
from pathlib import Path

import pytest

import sharding_lab as sl
from sharding_lab import cli
from sharding_lab.communication import analyze, group_axes, parse_collectives, parse_replica_groups
from sharding_lab.mesh import MeshSpec

SNIPPET = (Path(__file__).parent / "data" / "collectives.hlo").read_text()
MESH_2x4 = ((2, 4), ("data", "model"))
F32 = 4


def by_op(collectives):
    return {(c.op, c.shape): c for c in collectives}


@pytest.fixture(scope="module")
def parsed():
    return by_op(parse_collectives(SNIPPET, *MESH_2x4))


def test_tuple_result_counts_every_element(parsed):
    grads = parsed[("all-reduce", ((32,), (32, 1), (1, 32), ()))]
    assert grads.bytes == (32 + 32 + 32 + 1) * F32
    assert grads.axes == ("data",) and grads.phase == "backward"


def test_async_pairs_count_once_with_the_result_shape(parsed):
    assert parsed[("all-reduce", ((8,),))].axes == ("model",)
    gather = parsed[("all-gather", ((16,),))]
    assert gather.bytes == 16 * F32 and gather.phase == "forward"
    permute = parsed[("collective-permute", ((2, 2),))]
    assert permute.dtype == "bf16" and permute.bytes == 2 * 2 * 2
    assert permute.axes == ("data",)  # 0↔4, 1↔5: partners differ only in the data coordinate
    assert not any("done" in c.op for c in parsed.values())


def test_iota_groups_with_transpose_run_over_data(parsed):
    # [2,4]<=[4,2]T(1,0): arange(8).reshape(4,2).T → groups {0,2,4,6}, {1,3,5,7} — that is not a
    # mesh axis of 2×4 (it mixes data and model), so both axes are named.
    assert parse_replica_groups("replica_groups=[2,4]<=[4,2]T(1,0)") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert parsed[("all-gather", ((16,),))].axes == ("data", "model")


def test_mesh_form_with_device_order_maps_to_model(parsed):
    assert parsed[("all-reduce", ((32, 1),))].axes == ("model",)
    assert parse_replica_groups(
        "replica_groups=mesh['axis_0'=1,'axis_1'=4,'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_1'}"
    ) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_ops_inside_called_computations_are_found_and_identical_ones_counted(parsed):
    eights = [c for c in parse_collectives(SNIPPET, *MESH_2x4) if c.op == "all-reduce" and c.shape == ((8,),)]
    # the async start (no metadata: phase unknown) and two identical forward ones, one of them
    # inside %called_body
    assert sorted((c.phase, c.count) for c in eights) == [("forward", 2), ("unknown", 1)]
    assert parsed[("reduce-scatter", ((2,),))].axes == ("model",)


def test_group_axes_on_a_three_axis_mesh():
    shape, names = (2, 2, 2), ("x", "y", "z")
    assert group_axes([[0, 4], [1, 5], [2, 6], [3, 7]], shape, names) == ("x",)
    assert group_axes([[0, 1], [2, 3], [4, 5], [6, 7]], shape, names) == ("z",)
    assert group_axes([[0, 1, 2, 3], [4, 5, 6, 7]], shape, names) == ("y", "z")


def report(mesh, preset, optimizer="seed-sgd", axes=None):
    spec = MeshSpec(mesh, axes or (("data", "model") if len(mesh) == 2 else ("data",)))
    return analyze(sl.plan(sl.LabConfig(mesh=spec, preset=preset, optimizer=optimizer)))


PARAM_BYTES = (1 * 32 + 32 + 32 * 1) * F32  # w1, b1, w2 of the seed MLP


def test_data_parallel_all_reduces_the_gradients_over_data():
    # Every device computes gradients of all parameters on its half of the batch; they must be
    # summed over `data`: one all-reduce of every gradient (+ the scalar loss, averaged over data).
    r = report((2, 4), "dp")
    assert {c.op for c in r.collectives} == {"all-reduce"}
    assert all(c.axes == ("data",) for c in r.collectives)
    assert r.total_bytes == PARAM_BYTES + F32


def test_one_device_needs_no_communication():
    assert report((1, 1), "replicated").collectives == []


def test_tensor_parallel_reduces_the_row_parallel_output_over_model():
    # w1 column-split, w2 row-split over `model`: each device produces a partial x@w1@w2 that
    # must be summed over `model` — batch (32) × dout (1) floats. The batch is not split, so the
    # gradients need no reduction; w1's and w2's gradients stay local.
    r = report((1, 8), "tp")
    assert [(c.op, c.axes, c.bytes, c.count) for c in r.collectives] == [("all-reduce", ("model",), 32 * F32, 1)]


def test_fsdp_gathers_the_weights_and_reduces_the_gradients_over_data():
    # Parameters are stored split over `data`; to use them each device gathers all of them
    # (PARAM_BYTES gathered), and the gradients from each data shard must be reduced over `data`.
    r = report((8, 1), "fsdp")
    gathers = [c for c in r.collectives if c.op == "all-gather"]
    assert all(c.axes == ("data",) for c in r.collectives)
    assert sum(c.bytes * c.count for c in gathers) == PARAM_BYTES
    reduced = sum(c.bytes * c.count for c in r.collectives if c.op in ("all-reduce", "reduce-scatter"))
    assert reduced >= PARAM_BYTES / 8


@pytest.mark.parametrize("mesh,preset,optimizer", [((2, 4), "seed", "seed-sgd"), ((2, 4), "fsdp", "adamw"),
                                                   ((1, 8), "tp", "sgd")])
def test_compiled_arguments_are_exactly_params_optimizer_and_batch(mesh, preset, optimizer):
    memory = report(mesh, preset, optimizer).memory
    assert memory["argument"] == memory["params"] + memory["optimizer"] + memory["batch"]
    assert memory["temp"] > 0 and memory["output"] > 0


def test_fsdp_stores_fewer_parameter_bytes_than_dp():
    assert report((2, 4), "fsdp").memory["params"] < report((2, 4), "dp").memory["params"]


def test_comm_cli_json(capsys):
    assert cli.main(["comm", "--mesh", "2x4", "--preset", "dp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"collectives", "total_bytes", "memory"}
    assert set(out["memory"]) == {"argument", "output", "temp", "params", "optimizer", "batch"}
    (collective,) = out["collectives"]
    assert collective["op"] == "all-reduce" and collective["axes"] == ["data"]
    assert collective["phase"] == "backward" and collective["count"] == 1
    assert out["total_bytes"] == collective["bytes"] == PARAM_BYTES + F32


# --- what the page analyses is what the trainer runs --------------------------------------------

def trainer_chunk_collectives(plan, chunk=100):
    """The collectives of the trainer's own compiled chunk (a scan of ``chunk`` steps), compiled on
    abstract state — compiled separately from :func:`analyze`, through the trainer's code path."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from sharding_lab.training import abstract_state, chunk_program

    config = plan.config
    _, state = abstract_state(plan)
    x_host, y_host = config.family.make_dataset(config.model, config.seed)
    replicated = NamedSharding(plan.mesh, P())
    x_all = jax.ShapeDtypeStruct(x_host.shape, x_host.dtype, sharding=replicated)
    y_all = jax.ShapeDtypeStruct(y_host.shape, y_host.dtype, sharding=replicated)
    with jax.set_mesh(plan.mesh):
        compiled = chunk_program(plan, chunk).lower(state, jax.random.key(0), jnp.int32(0), jnp.int32(chunk),
                                                    x_all, y_all).compile()
    return parse_collectives(compiled.as_text(), config.mesh.shape, config.mesh.axes)


def summary(collectives):
    return sorted((c.op, c.shape, c.axes, c.count) for c in collectives)


@pytest.mark.parametrize("mesh", [(2, 4), (1, 8)], ids=["2x4", "1x8"])
@pytest.mark.parametrize("preset", list(sl.PRESETS))
def test_the_page_analyses_the_program_the_trainer_runs(mesh, preset):
    config = sl.LabConfig(mesh=MeshSpec(mesh), preset=preset)
    try:
        plan = sl.plan(config)
    except sl.ConfigError:
        pytest.skip(f"{preset} does not apply to a {mesh} mesh")
    assert summary(analyze(plan).collectives) == summary(trainer_chunk_collectives(plan))


def test_seed_on_2x4_runs_the_w2_gradient_gathers():
    """The trained program pins every output to its birth layout: on 2×4 with the seed rules XLA
    computes w2's gradient row-split and all-gathers it back (measured; an unpinned step skips them)."""
    ops = [(c.op, c.count) for c in analyze(sl.plan(sl.LabConfig())).collectives]
    assert sorted(ops) == [("all-gather", 2), ("all-reduce", 1), ("all-reduce", 1)]
