"""Collectives of the compiled train step: the HLO parser on a saved snippet, then real compiles
checked against what the maths of each strategy requires (expectations written from first
principles, not copied from the output)."""

import json
from pathlib import Path

import pytest

import sharding_lab as sl
from sharding_lab.cli import main as cli
from sharding_lab.program.communication import analyze, group_axes, parse_collectives, parse_replica_groups
from sharding_lab.sharding.mesh import MeshSpec
from sharding_lab.units import format_bytes

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


@pytest.mark.parametrize(
    "mesh,preset,optimizer", [((2, 4), "seed", "seed-sgd"), ((2, 4), "fsdp", "adamw"), ((1, 8), "tp", "sgd")]
)
def test_compiled_arguments_are_exactly_params_optimizer_and_batch(mesh, preset, optimizer):
    memory = report(mesh, preset, optimizer).memory
    assert memory["argument"] == memory["params"] + memory["optimizer"] + memory["batch"]
    assert memory["temp"] > 0 and memory["output"] > 0


def test_fsdp_stores_fewer_parameter_bytes_than_dp():
    assert report((2, 4), "fsdp").memory["params"] < report((2, 4), "dp").memory["params"]


def test_comm_cli_json(capsys):
    assert cli.main(["comm", "--mesh", "2x4", "--preset", "dp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {
        "collectives",
        "total_bytes",
        "total_wire_bytes",
        "memory",
        "textbook",
        "agrees",
        "differences",
        "weight_gather_batch",
        "target",
        "dtype",
        "compilers",
        "largest_buffers",
    }
    assert (out["target"], out["dtype"], out["compilers"]) == ("cpu", "f32", None)
    assert out["largest_buffers"] == []  # named on the simulated host only when asked (program.buffers)
    assert set(out["memory"]) == {"argument", "output", "temp", "alias", "peak", "params", "optimizer", "batch"}
    (collective,) = out["collectives"]
    assert collective["op"] == "all-reduce" and collective["axes"] == ["data"]
    assert collective["phase"] == "backward" and collective["count"] == 1
    assert out["total_bytes"] == collective["bytes"] == PARAM_BYTES + F32
    # 2 devices over `data`: a ring all-reduce sends 2(n−1)/n = 1× the array
    assert collective["group_size"] == 2 and out["total_wire_bytes"] == collective["wire_bytes"] == PARAM_BYTES + F32
    assert collective["moves"] == ["gradient of params/b1", "gradient of params/w2", "gradient of params/w1", "loss"]
    assert out["textbook"] == ["all-reduce of gradients over `data` in the backward pass"]
    assert out["differences"] == [] and len(out["agrees"]) == 1


# --- what the page analyses is what the trainer runs --------------------------------------------


def trainer_chunk_collectives(plan, chunk=100):
    """The collectives of the trainer's own compiled chunk (a scan of ``chunk`` steps), compiled on
    abstract state — compiled separately from :func:`analyze`, through the trainer's code path."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from sharding_lab.training.step import abstract_state
    from sharding_lab.training.trainer import chunk_program

    config = plan.config
    _, state = abstract_state(plan)
    x_host, y_host = config.family.make_dataset(config.model, config.seed)
    replicated = NamedSharding(plan.mesh, P())
    x_all = jax.ShapeDtypeStruct(x_host.shape, x_host.dtype, sharding=replicated)
    y_all = jax.ShapeDtypeStruct(y_host.shape, y_host.dtype, sharding=replicated)
    with jax.set_mesh(plan.mesh):
        compiled = (
            chunk_program(plan, chunk)
            .lower(state, jax.random.key(0), jnp.int32(0), jnp.int32(chunk), x_all, y_all)
            .compile()
        )
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


# --- what each collective costs on the wire and what it carries ---------------------------------


def test_dp_over_eight_devices_sends_two_sevenths_eighths_of_the_gradients():
    """Hand-derived: DP on 1×8 (all 8 devices on `data`): one ring all-reduce of every gradient (and
    the loss) over 8 devices; each device sends 2·7/8 of it."""
    r = analyze(sl.plan(sl.LabConfig(mesh=MeshSpec((1, 8), ("model", "data")), preset="dp")))
    (c,) = r.collectives
    assert c.group_size == 8 and c.axes == ("data",)
    assert c.bytes == PARAM_BYTES + F32
    assert c.wire_bytes == round(2 * 7 / 8 * (PARAM_BYTES + F32))
    assert r.total_wire_bytes == c.wire_bytes


def test_wire_formulas_per_op():
    from sharding_lab.program.communication import Collective

    def wire(op, n, size):
        return Collective(op, "f32", ((1,),), size, ("data",), "forward", (), 1, n).wire_bytes

    assert wire("all-gather", 4, 4096) == 3 * 4096 // 4
    assert wire("reduce-scatter", 4, 1024) == 3 * 1024  # the result is one device's block
    assert wire("all-to-all", 8, 800) == 700
    assert wire("collective-permute", 2, 96) == 96
    assert wire("all-reduce", 1, 96) == 0


CASES = [
    (mesh, axes, preset)
    for mesh, axes in (
        ((2, 4), ("data", "model")),
        ((1, 8), ("data", "model")),
        ((1, 8), ("model", "data")),
        ((8,), ("data",)),
    )
    for preset in sl.PRESETS
]


@pytest.mark.parametrize("mesh,axes,preset", CASES, ids=[f"{'x'.join(map(str, m))}-{a[0]}-{p}" for m, a, p in CASES])
def test_every_collective_of_the_seed_model_is_named(mesh, axes, preset):
    try:
        plan = sl.plan(sl.LabConfig(mesh=MeshSpec(mesh, axes), preset=preset))
    except sl.ConfigError:
        pytest.skip("preset does not apply to this mesh")
    for c in analyze(plan).collectives:
        assert len(c.moves) == len(c.shape)
        assert "unknown" not in c.moves, (c.op, c.shape, c.phase)


def test_moves_name_gradients_weights_activations_and_the_repinned_output():
    seed = analyze(sl.plan(sl.LabConfig())).collectives
    named = {(c.op, c.phase): c.moves for c in seed}
    assert named[("all-reduce", "forward")] == ("activations (16 rows × 1)",)  # 16 = 32 rows / 2 (data)
    assert "gradient of params/w1 (1×8 of 1×32)" in named[("all-reduce", "backward")]
    assert named[("all-gather", "unknown")][0].startswith("updated params/w2")


WIDE = sl.MLPSpec(1024, 1024, 1024, 2)


def fsdp_comparison(batch):
    from sharding_lab.program.textbook import compare

    plan = sl.plan(sl.LabConfig(mesh=MeshSpec((8,), ("data",)), preset="fsdp", model=WIDE, batch_size=batch))
    return compare(plan)


def test_fsdp_at_a_small_batch_gathers_activations_not_weights():
    """The issue's measurement: FSDP, 1024-wide, batch 32 — XLA gathers [32, 1024] activations."""
    comparison = fsdp_comparison(32)
    assert any(
        d.startswith("XLA:CPU all-gathered activations (3 × 32×1024) instead of the weights")
        for d in comparison.differences
    )
    assert not any("As the textbook" in a and "weights" in a for a in comparison.agrees)


def test_fsdp_at_a_large_batch_gathers_the_weights_and_all_reduces_full_gradients():
    comparison = fsdp_comparison(1024)
    assert any("all-gather of weights" in a for a in comparison.agrees)
    assert not any(d.startswith("XLA:CPU all-gathered activations") for d in comparison.differences)
    (memory,) = [d for d in comparison.differences if d.startswith("XLA:CPU all-reduced the gradients")]
    full = 4_197_376 * 4  # the bytes of the parameters' 4,197,376 floats: 16.8 MB
    assert f"{format_bytes(full)} per device" in memory and f"1/8 slice ({format_bytes(full / 8)})" in memory


def test_the_batch_from_which_xla_gathers_weights_is_found_by_compiling():
    from sharding_lab.program.textbook import weight_gather_batch

    config = sl.LabConfig(mesh=MeshSpec((8,), ("data",)), preset="fsdp", model=WIDE, batch_size=256)
    assert weight_gather_batch(config) == 1024  # 256 and 512 gather activations; 1024 gathers weights


# --- the ring schedule the animation draws -------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("op", ["all-gather", "reduce-scatter", "all-reduce"])
def test_ring_schedule_replayed_with_numbers_gives_the_collective(op, n):
    """Replay the sends with real numbers (independently of the schedule's own bookkeeping): the
    result is numpy's sum / concatenation, and what one device sends is the wire formula."""
    import numpy as np

    from sharding_lab.program.communication import Collective
    from sharding_lab.program.ring import schedule

    rng = np.random.default_rng(n)
    values = rng.normal(size=(n, n))  # values[d, b]: device d's value of block b
    have = values.copy() if op != "all-gather" else np.where(np.eye(n, dtype=bool), values, np.nan)
    steps = schedule(op, n)
    sent = 0
    for step in steps[1:]:
        before = have.copy()
        for send in step.sends:
            if step.phase == "reduce-scatter":
                have[send.receiver, send.block] = before[send.receiver, send.block] + before[send.sender, send.block]
            else:
                have[send.receiver, send.block] = before[send.sender, send.block]
            sent += send.sender == 0
    total = values.sum(axis=0) if op != "all-gather" else np.diag(values)
    if op == "reduce-scatter":
        np.testing.assert_allclose([have[d, d] for d in range(n)], total)
        result_blocks = 1
    else:
        np.testing.assert_allclose(have, np.broadcast_to(total, (n, n)))
        result_blocks = n
    block = 64  # bytes
    formula = Collective(op, "f32", ((1,),), block * result_blocks, ("data",), "forward", (), 1, n).wire_bytes
    assert sent * block == formula


def test_moves_names_only_arrays_the_moved_block_fits_with_their_own_shapes():
    """Issue 23: "one of params/embedding, … params/unembed (16×32 of 32×64, same shape)" listed
    mlp_in [64, 256] and unembed [64, 32] as 32×64. Every shape a name states is checked here
    against the layout (what `layout --json` reports), and the moved block against each."""
    import re

    from sharding_lab.models.transformer import TransformerSpec

    plan = sl.plan(sl.LabConfig(model=TransformerSpec(), preset="fsdp", optimizer="adamw", lr=0.003))
    shapes = {path: tuple(layout.shape) for path, layout in plan.layouts().items()}
    path = r"params/(?:[^\s,;(){}]|\{[0-9,]+\})+"
    group = re.compile(rf"((?:{path}(?:, )?)+) \(([0-9×]+)(?: of ([0-9×]+))?(: whole)?\)")
    path_re = re.compile(path)
    checked = 0
    for c in analyze(plan).collectives:
        for moved, name in zip(c.shape, c.moves):
            assert "same shape" not in name and len(name) < 260, name
            for paths, first, second, whole in group.findall(name):
                stated = tuple(int(d) for d in (second or first).split("×"))
                if second:  # "params/x (block of full)": the block is what moved
                    assert tuple(int(d) for d in first.split("×")) == moved, name
                for path in re.findall(path_re, paths):
                    for expanded in (
                        [path]
                        if "{" not in path
                        else [
                            re.sub(r"\{[0-9,]+\}", n, path)
                            for n in re.search(r"\{([0-9,]+)\}", path).group(1).split(",")
                        ]
                    ):
                        assert shapes[expanded] == stated, (name, expanded, shapes[expanded])
                        assert all(f % m == 0 for m, f in zip(moved, stated)), (name, expanded)
                        assert (stated == moved) == bool(whole) or second, name
                        checked += 1
    assert checked > 40
    named = {(c.op, c.shape): c.moves for c in analyze(plan).collectives}
    # a block only q, k and v fit, one op each: named, not "one of"
    assert named[("collective-permute", ((16, 4, 16),))] == (
        "params/blocks/{0,1}/q, params/blocks/{0,1}/k, params/blocks/{0,1}/v (64×4×16), a 16×4×16 block each, "
        "one per op: weights",
    )


def test_a_permute_s_pairs_fall_into_cycles_not_swaps():
    from sharding_lab.program.ring import permute_chains

    # the pairs: two cycles of three, nobody swaps
    chains = permute_chains([(1, 4), (2, 1), (3, 5), (4, 2), (5, 6), (6, 3)])
    assert [(c.members, c.closed) for c in chains] == [((1, 4, 2), True), ((3, 5, 6), True)]
    assert [c.label() for c in chains] == ["1 → 4 → 2 → 1", "3 → 5 → 6 → 3"]
    assert [c.label() for c in permute_chains([(0, 4), (4, 0)])] == ["0 → 4 → 0"]  # a real swap
    (chain,) = permute_chains([(2, 3), (1, 2)])  # device 1 receives nothing, 3 sends nothing
    assert chain.members == (1, 2, 3) and not chain.closed
    with pytest.raises(ValueError):
        permute_chains([(0, 1), (0, 2)])


def test_parameter_lists_fold_layers_and_group_a_folder_s_names():
    from sharding_lab.program.moves import group_paths

    layers = [f"params/blocks/{i}/{leaf}" for i in range(12) for leaf in ("q", "k", "v", "o")]
    assert group_paths(layers + ["params/embedding", "params/pos"]) == (
        "params/embedding, params/pos, params/blocks/{0…11}/{k, o, q, v}"
    )
    # a folded path as moves writes it, expanded and merged with the same names given one by one
    assert group_paths(["params/blocks/{0,1}/q", "params/blocks/1/k", "params/blocks/0/k"]) == (
        "params/blocks/{0,1}/k, params/blocks/{0,1}/q"
    )
    assert group_paths(["params/blocks/2/q", "params/blocks/10/q", "params/w1"]) == (
        "params/w1, params/blocks/{2,10}/q"
    )


def test_what_a_collective_carries_is_said_once_per_kind_and_names_every_parameter():
    """A tuple all-reduce of a transformer's updated weights once read "updated params/blocks/0/mlp_in …, or its
    optimizer state, back to its pinned layout, updated params/blocks/0/mlp_out …, or its optimizer state, …"
    for every element. The phrase says each kind once — and still names every parameter the elements name."""
    import re

    from sharding_lab.models.transformer import TransformerSpec
    from sharding_lab.program.moves import phrase

    def paths(text):
        found = set()
        for path in re.findall(r"params/(?:[\w/]|\{[0-9,]+\})+", text):
            numbers = re.search(r"\{([0-9,]+)\}", path)
            found |= (
                {path[: numbers.start()] + n + path[numbers.end() :] for n in numbers.group(1).split(",")}
                if numbers
                else {path}
            )
        return found

    plan = sl.plan(
        sl.LabConfig(
            model=TransformerSpec(),
            mesh=sl.MeshSpec((2, 4), ("data", "model")),
            preset="fsdp_tp",
            optimizer="adamw",
            lr=0.003,
        )
    )
    several = 0
    for c in analyze(plan).collectives:
        said = phrase(c.moves)
        assert paths(said) == set().union(*map(paths, c.moves)), (c.moves, said)
        assert said.count("optimizer state") <= 1 and said.count("gradient") <= 1, said
        several += sum(1 for m in set(c.moves) if m.startswith(("updated", "gradient of"))) > 1
    assert several  # the layout has collectives that carry several parameters of one kind
    assert (
        phrase(["gradient of params/b1", "gradient of params/w1", "loss"]) == "gradients of params/b1, params/w1 · loss"
    )


def test_a_block_of_eight_rows_is_an_8_block():
    from sharding_lab.models.transformer import TransformerSpec

    plan = sl.plan(
        sl.LabConfig(
            model=TransformerSpec(),
            mesh=sl.MeshSpec((2, 4), ("data", "model")),
            preset="fsdp_tp",
            optimizer="adamw",
            lr=0.003,
        )
    )
    said = " ".join(m for c in analyze(plan).collectives for m in c.moves)
    assert "an 8×64 block" in said and "a 8×" not in said and "a 16×32 block" in said


def test_eighty_layers_are_spelled_as_a_run_and_read_back():
    """Issue 50: a 70B model's collectives listed params/blocks/{0,1,…,79}/… in full, dozens of times."""
    from sharding_lab.program.moves import PATH, group_paths, phrase

    said = phrase([f"gradient of params/blocks/{i}/q" for i in range(80)] + ["loss"])
    assert said == "gradients of params/blocks/{0…79}/q · loss"
    assert PATH.findall(said) == ["params/blocks/{0…79}/q"]
    assert group_paths(PATH.findall(said) + ["params/blocks/80/q"]) == "params/blocks/{0…80}/q"


def test_a_collective_of_no_known_pass_is_described_without_naming_a_pass():
    """The Communication page once said "1 × all-reduce in the unknown pass carrying activations": a
    collective whose op_name says no pass is described without one, as the compiler comparison does,
    while one of a known pass still names it. The report is written by hand (nothing compiled)."""
    from sharding_lab.program.communication import Collective, CommReport
    from sharding_lab.program.textbook import compare

    plan = sl.plan(sl.LabConfig())  # the seed: the textbook moves activations over `model` in the forward pass
    activations = ("activations (16 rows × 1)",)
    unknown, backward = (
        Collective("all-reduce", "f32", ((16, 1),), 64, ("model",), phase, ((0, 1),), group_size=2, moves=activations)
        for phase in ("unknown", "backward")
    )
    for collective, said in (
        (unknown, "1 × all-reduce carrying activations"),
        (backward, "1 × all-reduce in the backward pass carrying activations"),
    ):
        sentences = compare(plan, CommReport([collective], {}, "")).differences
        assert any(said in s for s in sentences), sentences
        assert not any("unknown pass" in s for s in sentences), sentences
