"""FLOPs that add up (issue 46.1): a step's FLOPs read from the program op by op, loops counted as they run
(``cost.hlo_ops``), equal a compile of the whole program unrolled — at depths 3–8, on three shapes (one whose
heads × head dim is not its embedding), under every remat policy and both attention kinds — and the per-layer
extension the search uses (1 and 2 layers) gives the same. Tiny transformers, compiled for a one-chip v5e (the
TPU compiler without the chip: splash is a TPU kernel).

The defect it guards: `cost` of a scanned step (remat) took one block's FLOPs when the compiler refused the
2-block loop body, and XLA's cost analysis counts a loop's body once: 4 layers came out under 2."""

import pytest

from sharding_lab import plan
from sharding_lab.cost import compiled as compiled_module
from sharding_lab.cost import hlo_ops, roofline
from sharding_lab.hardware import targets
from sharding_lab.search import costing
from tools.measure import config_of

TPU = targets.availability(targets.parse("v5e-1"))
pytestmark = [pytest.mark.skipif(not TPU[0], reason=TPU[1]), pytest.mark.slow]

SHAPES = {  # embed, heads, kv heads, head dim, mlp
    "mha": ["--embed", "64", "--heads", "2", "--kv-heads", "2", "--head-dim", "32", "--mlp-dim", "128"],
    "gqa, heads × head dim ≠ embed": [
        "--embed",
        "64",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--head-dim",
        "32",
        "--mlp-dim",
        "96",
    ],  # fmt: skip
    "wide head": ["--embed", "128", "--heads", "1", "--kv-heads", "1", "--head-dim", "128", "--mlp-dim", "256"],
}
# Each remat policy and each attention kind at least once, each shape twice, depths 3 to 8.
CASES = [
    ("mha", "none", "xla", 3),
    ("mha", "full", "splash", 8),
    ("gqa, heads × head dim ≠ embed", "save_qkv_proj", "splash", 5),
    ("gqa, heads × head dim ≠ embed", "minimal", "xla", 4),
    ("wide head", "save_dots", "splash", 6),
    ("wide head", "full", "xla", 7),
]


def config(shape: str, remat: str, attention: str, layers: int):
    argv = ["--model", "transformer", *SHAPES[shape], "--vocab", "64", "--seq", "128", "--batch", "2"]
    argv += ["--mlp-type", "swiglu", "--positions", "rope", "--optimizer", "adamw", "--remat", remat]
    argv += ["--attention", attention, "--layers", str(layers), "--target", "v5e-1", "--mesh", "1", "--axes", "data"]
    return compiled_module.canonical(config_of(argv + ["--preset", "dp"]))


@pytest.mark.parametrize("shape, remat, attention, layers", CASES)
def test_flops_of_a_step_equal_the_whole_unrolled_program(shape, remat, attention, layers):
    c = config(shape, remat, attention, layers)
    whole = costing.compiled_figures(c, "mixed")  # every block unrolled: no loop to count
    as_cost = costing.full_depth(c, "mixed")  # as `cost` compiles it (a scan of remat blocks, counted per trip)
    one, two = (costing.compiled_figures(costing.at_layers(c, n), "mixed") for n in (1, 2))
    extended, *_ = costing.extend(one, two, layers)
    assert as_cost.flops == pytest.approx(whole.flops, rel=0.01)
    assert extended == pytest.approx(whole.flops, rel=0.01)
    # Twice the layers: twice the blocks, the embedding and the head once (the 2- against 4-layer step).
    block = two.flops - one.flops
    assert whole.flops == pytest.approx(one.flops + (layers - 1) * block, rel=0.01) and block > 0


def test_a_loop_is_counted_as_often_as_it_runs():
    """The same step scanned (remat full) read op by op: its products' FLOPs with the loop's trip count equal
    the unrolled program's, and with the body counted once (XLA's way) fall short by the other trips' blocks."""
    from sharding_lab.models.remat import unrolled_scan
    from sharding_lab.training.config import plan
    from sharding_lab.training.step import compile_lowered, lower_train_step

    c = config("mha", "full", "xla", 4)

    def products(count_loops=True):
        text = compile_lowered(lower_train_step(plan(c), "mixed"), c.target).as_text()
        return hlo_ops.summary(hlo_ops.ops(text, count_loops))["product_flops"]

    counted, once = products(), products(count_loops=False)
    with unrolled_scan():
        unrolled = products()
    assert counted == pytest.approx(unrolled, rel=0.01)
    block = (counted - once) / 3  # the loop's 3 further trips
    assert once < counted and block > 0.1 * counted


def test_a_looped_step_is_compiled_once_and_its_elementwise_flops_scale_with_the_trips():
    """`cost` compiles a scanned step once (no second compile with the loop unrolled by 2): its products exactly,
    and XLA's elementwise FLOPs — counted a loop body once — scaled by the elements the loops make, within 3% of the
    whole program unrolled on this tiny block, where elementwise work is a fifth of the FLOPs (measured 2.6%; the
    deeper steps above, within 1%; with one block's elementwise FLOPs they were about a third of the 4 layers')."""
    c = config("mha", "full", "xla", 4)
    looped = compiled_module.compile_step(plan(c), "mixed")
    whole = costing.compiled_figures(c, "mixed")
    assert looped.product_flops == pytest.approx(whole.product_flops, rel=1e-6)
    assert looped.flops == pytest.approx(whole.flops, rel=0.03)
    assert looped.xla_flops < 0.8 * whole.xla_flops  # XLA's own count: the body once


@pytest.mark.parametrize("target", ["cpu", "v5e-8"])
def test_a_collective_inside_a_loop_counts_once_a_trip(target):
    """A program written here by hand: a ``shard_map`` whose ``lax.scan`` of 5 trips all-reduces over the mesh each
    trip (what the trip before made: the TPU compiler moves a sum of all-reduces of the rows alone out of the loop,
    as one), and one all-gather after it. Read with the loops' trip counts (hlo_ops.runs) the program holds 5
    all-reduces of one row each and 1 all-gather; the text writes the all-reduce once. On the simulated host and
    compiled for a v5e-8 slice (the TPU compiler's async collective fusions)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from sharding_lab.hardware import devices
    from sharding_lab.program.communication import parse_collectives
    from sharding_lab.training.step import compile_lowered

    found = devices.devices_for(8) if target == "cpu" else targets.devices(target)
    mesh = jax.sharding.Mesh(np.array(found).reshape(8), ("data",))
    trips, row = 5, 512

    def each_device(x):  # x: this device's (trips, row) block
        def step(total, r):
            # one all-reduce a trip, of what the last trip made: no compiler can take it out of the loop
            return jnp.tanh(jax.lax.psum(r * total + r, "data")), None

        total, _ = jax.lax.scan(step, jnp.zeros((row,), x.dtype), x)
        return jax.lax.all_gather(total, "data")  # one all-gather, after the loop

    program = jax.jit(
        jax.shard_map(each_device, mesh=mesh, in_specs=PartitionSpec(None, None), out_specs=PartitionSpec("data"))
        if hasattr(jax, "shard_map")
        else jax.experimental.shard_map.shard_map(
            each_device, mesh=mesh, in_specs=PartitionSpec(None, None), out_specs=PartitionSpec()
        )
    )
    arg = jax.ShapeDtypeStruct((trips, row), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec()))
    text = compile_lowered(program.lower(arg), target).as_text()
    written = {c.op: c.count for c in parse_collectives(text, (8,), ("data",))}
    counted = parse_collectives(text, (8,), ("data",), hlo_ops.runs(text))
    by_op = {c.op: (c.count, c.bytes) for c in counted}
    assert written["all-reduce"] == 1  # the text writes the loop's all-reduce once
    assert by_op["all-reduce"] == (trips, row * 4)  # the step runs it once a trip, one f32 row each
    assert by_op["all-gather"][0] == 1


def test_fsdp_collective_matmuls_count_as_one_chip_at_its_share_of_the_batch():
    """FSDP on v5e-8 at 8 sequences: each chip computes its own sequence through every weight, gathered — the
    products and kernel calls of one chip's step at 1 sequence. The TPU compiler writes FSDP's gathered
    projections as collective matmuls (``windowed_dot_general`` loops, a ``u32`` counter stepping by 2): each loop
    counted once, as before, the 8-chip step's products came out 11% under the one-chip step's, and the issue's
    2-layer 16B-width command's model FLOPs above its compiled ones (MFU 1.09 > HFU 1.00)."""
    wide = SHAPES["wide head"] + ["--vocab", "64", "--seq", "1024", "--mlp-type", "swiglu", "--positions", "rope"]
    common = ["--model", "transformer", *wide, "--optimizer", "adamw", "--remat", "full", "--attention", "splash"]
    common += ["--layers", "2", "--axes", "data"]
    fsdp = config_of(common + ["--target", "v5e-8", "--mesh", "8", "--preset", "fsdp", "--batch", "8"])
    chip = config_of(common + ["--target", "v5e-1", "--mesh", "1", "--preset", "dp", "--batch", "1"])
    on_eight, on_one = (compiled_module.compile_once(plan(compiled_module.canonical(c)), "mixed") for c in (fsdp, chip))
    assert on_eight.collectives and not on_one.collectives
    # products and splash kernels, each as often as its loops run it (loops over layers and collective matmuls)
    assert on_eight.product_flops == pytest.approx(on_one.product_flops, rel=1e-3)
    # the model's own FLOPs a chip (MFU's) are part of what the program computes (HFU's)
    assert roofline.model_flops_fields(fsdp, (8,))["model_flops"] < on_eight.flops
