"""Where mesh axes lie on a TPU target and what a collective costs there, against the scaling book's worked
examples (jax-ml/scaling-book, sharding.md: pop quiz 2 and questions 2–3; tpus.md: wraparounds), against the
devices' own coordinates, and the model FLOPs behind MFU against hand-written counts.

The placements are read off the topology's devices (no compile: about a second for all of them)."""

import dataclasses
import math

import pytest

from sharding_lab.cost.collectives import collective_time
from sharding_lab.errors import ConfigError
from sharding_lab.hardware import placement, targets
from sharding_lab.hardware.chips import CHIPS
from sharding_lab.models import family

TPU = targets.availability(targets.parse("v5e-8"))
needs_tpu = pytest.mark.skipif(not TPU[0], reason=TPU[1])
V5E, V5P = CHIPS["tpu-v5e"], CHIPS["tpu-v5p"]


def on(name: str, shape: tuple, axes: tuple, group: tuple):
    """(the chip with the target's torus, the group's placement) — as the cost builds them."""
    target = targets.parse(name)
    chip = dataclasses.replace(CHIPS[target.chip], torus=target.torus)
    return chip, placement.group_placement(name, shape, axes, group)


# --- the book's worked examples -----------------------------------------------------------------


@needs_tpu
def test_pop_quiz_2_an_all_gather_over_4_v5e_chips_without_wraparound_takes_560_us():
    """sharding.md, pop quiz 2: AllGather_Y([E_Y, F]) on a v5e mesh {'X': 8, 'Y': 4}, E = 2048, F = 8192 in bf16.
    No wraparound on a 4-chip axis, so not 34e6 / 9e10 = 377 µs but 3 · 8.4e6 / 4.5e10 = 560 µs; 3 hops ≈ 3 µs."""
    chip, y = on("v5e-32", (8, 4), ("X", "Y"), ("Y",))
    assert (y.size, y.closed, y.hops) == (4, False, 3)
    volume = 2048 * 8192 * 2
    t = collective_time(chip, y, "all-gather", volume)
    assert t.bandwidth_s == pytest.approx(3 * (volume / 4) / 4.5e10)  # the book's 560 µs
    assert 555e-6 < t.bandwidth_s < 565e-6
    assert t.latency_s == pytest.approx(3e-6)
    small = collective_time(chip, y, "all-gather", 256 * 256 * 2)  # part 2: latency-bound, 3 hops ≈ 3 µs
    assert small.latency_s == pytest.approx(3e-6) and small.bandwidth_s < small.latency_s


@needs_tpu
def test_question_2_gathers_on_a_full_cube_use_both_directions_and_add_dimensions():
    """sharding.md, question 2, on a 4x4x4 slice with wraparounds (the book's v4p; here v5p, whose links are 9e10
    one way): AllGather_X of [B_X, D_Y] moves 2BD/Y bytes at the bidirectional bandwidth; AllGather_XY the whole
    2BD at twice it; AllReduce_Z costs twice an all-gather — each with the exact (n − 1)/n of a ring."""
    b, d = 1024, 4096
    shape, axes = (4, 4, 4), ("X", "Y", "Z")
    chip, x = on("v5p-128", shape, axes, ("X",))
    assert x.closed and x.ici_bandwidth(chip) == 2 * 9e10
    t = collective_time(chip, x, "all-gather", 2 * b * d / 4)
    assert t.bandwidth_s == pytest.approx((3 / 4) * (2 * b * d / 4) / 1.8e11)
    _, xy = on("v5p-128", shape, axes, ("X", "Y"))
    assert xy.ici_bandwidth(chip) == 2 * 1.8e11 and xy.hops == 2 + 2
    assert collective_time(chip, xy, "all-gather", 2 * b * d).bandwidth_s == pytest.approx(
        (15 / 16) * 2 * b * d / (2 * 1.8e11)
    )
    _, z = on("v5p-128", shape, axes, ("Z",))
    local = 2 * (b / 4) * (d / 4)
    gather, reduce = collective_time(chip, z, "all-gather", local), collective_time(chip, z, "all-reduce", local)
    assert reduce.bandwidth_s == pytest.approx(2 * gather.bandwidth_s)
    assert reduce.latency_s == pytest.approx(2 * gather.latency_s)


@needs_tpu
def test_question_3_a_tiny_gather_on_a_closed_ring_of_4_is_2_hops():
    """sharding.md, question 3: AllGather_X([B_X]) with B = 128 on a 4x4x4 slice: latency-bound, 2 hops ≈ 2 µs."""
    chip, x = on("v5p-128", (4, 4, 4), ("X", "Y", "Z"), ("X",))
    t = collective_time(chip, x, "all-gather", 128 * 2)
    assert t.hops == 2 and t.latency_s == pytest.approx(2e-6) and t.bandwidth_s < 1e-8


@needs_tpu
def test_a_reduce_scatter_costs_an_all_gather_and_an_all_to_all_a_quarter_on_a_closed_ring():
    chip, ring = on("v5e-256", (16, 16), ("data", "model"), ("data",))
    full = 64e6
    gather = collective_time(chip, ring, "all-gather", full)
    scatter = collective_time(chip, ring, "reduce-scatter", full / 16)  # its result: one device's block
    assert scatter.bandwidth_s == pytest.approx(gather.bandwidth_s)
    assert collective_time(chip, ring, "all-to-all", full).bandwidth_s == pytest.approx(gather.bandwidth_s / 4)
    chip8, line = on("v5e-8", (2, 4), ("data", "model"), ("model",))
    assert not line.closed
    assert collective_time(chip8, line, "all-to-all", full).bandwidth_s == pytest.approx(
        collective_time(chip8, line, "all-gather", full).bandwidth_s / 2
    )


# --- placements read off the devices --------------------------------------------------------------


@needs_tpu
def test_a_256_way_axis_on_v5e_256_is_two_closed_rings_of_16_hops_not_128():
    """The issue's latency term: 128 hops for a 256-way axis; round a 16×16 torus the longest path is 8 + 8."""
    chip, data = on("v5e-256", (256,), ("data",), ("data",))
    assert data.link == "ICI" and data.closed and data.hops == 16
    assert data.ici_bandwidth(chip) == 4 * 4.5e10  # both directions on both dimensions
    assert collective_time(chip, data, "all-reduce", 1e6).hops == 32


@needs_tpu
def test_no_axis_of_any_two_axis_mesh_on_v5e_256_crosses_the_data_centre_network():
    """v5e-256 is one 16×16 ICI slice. 128x2: data is a ring of 16 along one dimension × a ring of 8 chips (every
    2nd) along the other — links shared with the other model group — model a line of 2."""
    for a in (2, 4, 8, 16, 32, 64, 128):
        for p in placement.axis_placements("v5e-256", (a, 256 // a), ("data", "model")).values():
            assert p.link == "ICI" and p.slices == 1, (a, placement.describe(p))
    chip, data = on("v5e-256", (128, 2), ("data", "model"), ("data",))
    assert sorted((d.chips, d.stride, d.closed) for d in data.dims) == [(8, 2, True), (16, 1, True)]
    assert data.ici_bandwidth(chip) == pytest.approx(2 * 4.5e10 + 2 * 4.5e10 / 2) and data.hops == 16
    _, model = on("v5e-256", (128, 2), ("data", "model"), ("model",))
    assert (model.size, model.closed, model.hops, model.ici_bandwidth(chip)) == (2, False, 1, 4.5e10)


@needs_tpu
def test_wraparounds_follow_the_book_full_16_on_v5e_whole_cubes_on_v5p():
    """tpus.md: v5e/v6e wrap only along a full 16-chip dimension ('8x16 will have a wraparound on the longer
    axis'); v5p on a slice made of whole 4×4×4 cubes, never on a smaller one such as 2x4x4."""
    rows = placement.axis_placements("v5e-128", (8, 16), ("a", "b"))
    assert {p.dims[0].size: p.closed for p in rows.values()} == {8: False, 16: True}
    assert placement.group_placement("v5p-128", (64,), ("data",), ("data",)).closed
    assert not placement.group_placement("v5p-64", (32,), ("data",), ("data",)).closed


def test_the_one_description_names_chips_dimensions_directions_and_hops():
    line = placement.describe(
        placement.Placement(
            ("model",), 4, "tpu", (placement.DimSpan("x", 2, 4, 1, False), placement.DimSpan("y", 2, 4, 1, False))
        )
    )
    assert line == (
        "model: 4 chips over ICI, a line of 2 along x × a line of 2 along y; "
        "no wraparound: one direction's bandwidth, ≤2 hops"
    )


# --- several slices ----------------------------------------------------------------------------------


def test_multi_slice_targets_are_named_as_slices_times_count_and_bad_ones_refused():
    two = targets.parse("v5e-256x2")
    assert (two.devices, two.slices, two.torus, two.chip) == (512, 2, (16, 16), "tpu-v5e")
    assert targets.parse("v5p-1024x8").devices == 8 * 512
    for bad in ("v5e-256x1", "v5e-256x99", "h100-8x2", "v5e-256xx", "v5e-7x2"):
        with pytest.raises(ConfigError):
            targets.parse(bad)


@needs_tpu
def test_the_axis_across_slices_rides_dcn_and_the_rest_stays_on_ici():
    chip, dcn = on("v5e-256x2", (2, 256), ("dcn", "data"), ("dcn",))
    assert (dcn.link, dcn.slices, dcn.per_slice) == ("DCN", 2, 1)
    _, data = on("v5e-256x2", (2, 256), ("dcn", "data"), ("data",))
    assert (data.link, data.slices, data.closed, data.hops) == ("ICI", 1, True, 16)
    volume = 32e6  # an all-reduce across the 2 slices: 2·(S − 1)/S of it over each chip's 3.125 GB/s
    t = collective_time(chip, dcn, "all-reduce", volume)
    assert t.dcn_wire == pytest.approx(volume) and t.bandwidth_s == pytest.approx(volume / 3.125e9)
    _, both = on("v5e-256x2", (512,), ("data",), ("data",))  # one axis over both: ICI, then 1/256 of it over DCN
    assert both.link == "ICI+DCN" and both.per_slice == 256
    mixed = collective_time(chip, both, "all-gather", volume)
    assert mixed.dcn_wire == pytest.approx(0.5 * volume / 256)
    with pytest.raises(ConfigError, match="multiple of 2"):
        targets.slice_axis(targets.parse("v5e-256x2"), (512 + 1,))


# --- model FLOPs (MFU) -------------------------------------------------------------------------------


def test_llama3_8b_model_flops_are_palms_6n_plus_causal_attention_per_token():
    transformer = family("transformer")
    spec = dataclasses.replace(transformer.named_spec("llama3-8b"), seq=4096)
    count = transformer.model_flops(spec, 256)
    e, v, layers, heads, kv, d, m = 4096, 128256, 32, 32, 8, 128, 14336
    per_layer = e * heads * d * 2 + e * kv * d * 2 + 3 * e * m  # q, o; k, v; gate, up, down
    n = layers * per_layer + e * v  # the unembedding; the input embedding is a lookup
    assert count.matmul_parameters == n
    assert 7.4e9 < n < 7.6e9  # 8.03e9 less the 0.53e9 lookup table
    tokens = 256 * 4096
    # Causal attention as the kernel computes it: half of PaLM's 12·L·H·Q·T (MaxText's count).
    assert count.total == pytest.approx(6 * n * tokens + 6 * layers * heads * d * 4096 * tokens)


def test_a_mixture_counts_its_active_experts_only():
    transformer = family("transformer")
    spec = transformer.Spec(
        layers=2, embed_dim=32, heads=2, head_dim=16, mlp_dim=64, vocab=50, seq=8, experts=8, top_k=2
    )
    dense = transformer.Spec(layers=2, embed_dim=32, heads=2, head_dim=16, mlp_dim=64, vocab=50, seq=8)
    experts = 2 * 8 * 2 * 32 * 64  # layers × experts × (in, out) × embed × mlp (gelu: two matrices)
    router = 2 * 32 * 8
    dense_mlp = 2 * 2 * 32 * 64
    n_moe, n_dense = (transformer.model_flops(s, 4).matmul_parameters for s in (spec, dense))
    assert n_moe == n_dense - dense_mlp + router + experts * 2 / 8


def test_the_mlp_counts_its_matmuls_exactly_and_its_mfu_stays_under_its_hfu():
    """An f32 MLP was shown at 'MFU 100%' (compiled FLOPs at the roofline): MFU now counts the model's matmuls —
    2·N forward, 2·N weight gradients, 2·(N − din·dmid) activation gradients — and stays below 1 and HFU."""
    from sharding_lab import LabConfig, cost, plan
    from sharding_lab.sharding.mesh import MeshSpec

    mlp = family("mlp")
    spec = mlp.Spec(din=64, dmid=256, dout=64, hidden_layers=1)
    n = 64 * 256 + 256 * 256 + 256 * 64
    assert mlp.model_flops(spec, 32).total == 32 * (6 * n - 2 * 64 * 256)
    config = LabConfig(mesh=MeshSpec((2,), ("data",)), preset="dp", model=spec, batch_size=32)
    p = cost.predict(plan(config), "h100", "f32")
    assert p.model_flops == pytest.approx(mlp.model_flops(spec, 32).total / 2)
    assert 0 < p.mfu < p.hfu <= 1 and p.mfu < 1
    assert p.to_json()["mfu"] == pytest.approx(p.model_flops / (p.step_s * CHIPS["h100"].peak_flops["f32"]))


def test_f32_peaks_are_the_default_precisions_with_highest_beside_them():
    for chip in CHIPS.values():
        value, note = chip.flops("f32")
        assert value and chip.peak_flops["f32_highest"] < value and "highest" in note
        assert "peak_flops_f32" in chip.sources
    assert CHIPS["tpu-v5e"].flops("f32")[0] == CHIPS["tpu-v5e"].flops("bf16")[0]  # one bf16 pass
    assert CHIPS["tpu-v5e"].peak_flops["f32_highest"] == pytest.approx(1.97e14 / 6)  # six (measured 31 TFLOP/s)
    assert math.isclose(CHIPS["h100"].flops("f32")[0], 494.7e12)  # TF32, dense


@needs_tpu
def test_a_two_slice_step_all_reduces_every_gradient_over_dcn():
    """Compiled for two v5e-8 slices, a data-parallel step's cross-slice gradient sum is no HLO collective but
    the runtime's transfers (program.megascale): read back as all-reduces over dcn, timed over DCN (2 slices: each
    chip sends its N bytes once, at 3.125 GB/s); the batch is split over dcn and data (the dcn axis joins it)."""
    import sharding_lab as sl
    from sharding_lab import cost
    from sharding_lab.sharding.mesh import MeshSpec

    transformer = family("transformer")
    spec = transformer.Spec()
    config = sl.LabConfig(
        mesh=MeshSpec((2, 8), ("dcn", "data")), preset="dp", model=spec, batch_size=16, target="v5e-8x2"
    )
    assert config.resolved_rules().target("batch") == ("dcn", "data")
    p = cost.predict(sl.plan(config), None, "mixed")
    across = [r for r in p.comm if r["axes"] == ("dcn",)]
    assert across and {(r["op"], r["link"], r["group_size"]) for r in across} == {("all-reduce", "DCN", 2)}
    assert 0 < sum(r["bytes"] for r in across) <= 4 * transformer.parameter_count(spec)  # at most every f32 gradient
    assert sum(r["seconds"] for r in across) == pytest.approx(sum(r["bytes"] for r in across) / 3.125e9)
    assert all(r["link"] == "ICI" for r in p.comm if r["axes"] == ("data",))
