"""The calibrated chip model (issue 46.3): the shipped v5e calibration (measured 2026-12-07), the model's pricing
by hand, the steps measured on the real chip against what the calibrated model predicts for them, and the program
read op by op (cost.hlo_ops) against hand counts. No chip needed: the measured steps' programs are kept as their
tallies (tests/core/data/v5e_measured_steps.json, made by tools/calibration_check.py --tally from a chip run)."""

import dataclasses
import json
from pathlib import Path

import pytest

from sharding_lab.cost import calibration, hlo_ops
from sharding_lab.hardware.chips import CHIPS

STEPS = json.loads((Path(__file__).parent / "data" / "v5e_measured_steps.json").read_text())["steps"]


def test_the_v5e_calibration_is_dated_sourced_and_below_the_published_peaks():
    v5e = calibration.for_chip("tpu-v5e")
    assert v5e.date == "2026-12-07" and v5e.source == "tpu-v5e.calibration.json" and "libtpu 0.0.42.1" in v5e.versions
    chip = CHIPS["tpu-v5e"]
    # Timed by the chip's profiler: big products near the published 1.97e14, every shape below it; HBM below 8.1e11.
    assert 0.9 * chip.peak_flops["bf16"] < v5e.matmul_rate("bf16") < chip.peak_flops["bf16"]
    assert all(r < chip.peak_flops["bf16"] for rows in v5e.matmul_grid.values() for *_, r in rows)
    assert 0.7 * chip.hbm_bytes_per_s < v5e.hbm_bytes_per_s < chip.hbm_bytes_per_s
    # A small product is mostly its own start and end: 512 × 128 × 128 reaches a tenth of the big ones' rate.
    assert v5e.product_rate(512, 128, 128, "bf16") < 0.1 * v5e.product_rate(8192, 8192, 8192, "bf16")
    # The splash kernel is slower at small blocks; its backward calls faster than its forward; every rate below
    # the chip's peak; measured at grouped-query attention (4 query heads a K/V head) beside multi-head.
    assert v5e.splash_rate(8192, 512, "fwd") > 3 * v5e.splash_rate(8192, 128, "fwd")
    assert v5e.splash_rate(2048, 512, "fwd") < v5e.splash_rate(2048, 512, "dq") < chip.peak_flops["bf16"]
    assert {group for _, _, group, *_ in v5e.splash} == {1, 4}
    # The one share fitted on measured steps, said in the note every cost carries.
    assert 0.0 < v5e.product_bytes_exposed < 1.0 and "fitted on measured steps" in v5e.note()


def test_a_product_costs_the_larger_of_its_flops_and_its_bytes_plus_the_fitted_share_of_the_smaller():
    """price_tally by hand: one compute-bound and one memory-bound product op, an elementwise op and a kernel call."""
    v5e = calibration.for_chip("tpu-v5e")
    big, skinny = [8192, 8192, 8192, "bf16"], [32768, 128, 128, "bf16"]
    counts = {
        "products": [[2, 1e8, [big]], [3, 2e9, [skinny]]],
        "memory_bytes": 5e9,
        "kernel_flops": {"2048,512,dkv": 1e12},
        "host_bytes": 0.0,
        "collectives": 0,
        "asynchronous": 0,
    }
    priced = calibration.price_tally(counts, v5e)
    w, share = v5e.hbm_bytes_per_s, v5e.product_bytes_exposed
    big_s = 2.0 * 8192**3 / v5e.product_rate(*big)
    skinny_s = 2.0 * 32768 * 128 * 128 / v5e.product_rate(*skinny)
    assert 1e8 / w < big_s and skinny_s < 2e9 / w  # one bound by its FLOPs, the other by its bytes
    assert priced.products_s == pytest.approx(2 * big_s + 3 * skinny_s)
    extra = 2 * share * 1e8 / w + 3 * (2e9 / w - skinny_s + share * skinny_s)
    assert priced.product_bytes_s == pytest.approx(extra)
    assert priced.memory_s == pytest.approx(5e9 / w)
    assert priced.kernel_s == pytest.approx(1e12 / v5e.splash_rate(2048, 512, "dkv"))


def test_other_tpus_are_derived_from_the_measured_one_and_say_so():
    v5e, v5p = calibration.for_chip("tpu-v5e"), calibration.for_chip("tpu-v5p")
    assert "derived from tpu-v5e.calibration.json" in v5p.source
    ratio = CHIPS["tpu-v5p"].peak_flops["bf16"] / CHIPS["tpu-v5e"].peak_flops["bf16"]
    assert v5p.matmul_rate("bf16") == pytest.approx(v5e.matmul_rate("bf16") * ratio)
    assert v5p.splash_rate(2048, 512, "dq") == pytest.approx(v5e.splash_rate(2048, 512, "dq") * ratio)
    assert calibration.for_chip("h100") is None


def test_measured_steps_against_the_calibrated_prediction():
    """Issue 46's acceptance asks for at least 10 steps measured on the chip within 20% of the calibrated
    prediction. What holds (docs/plan-physics-measured.md): all 14 within 10% — the MLPs in bf16 and f32, splash at
    2,048 and 8,192 tokens at every remat policy in bf16 and mixed, XLA's attention, the 16B-width block. Op by
    op too (each op of the chip's profile matched to the program's): the kernel calls within 6% of their measured
    time, the products within 10%. The published-peak roofline of the same FLOPs is 1.1–2.0× too fast."""
    v5e = calibration.for_chip("tpu-v5e")
    ratios = {}
    for step in STEPS:
        priced = calibration.price_tally(step["tally"], v5e)
        ratios[step["label"], step["dtype"]] = step["measured_step_s"] / priced.step_s(0.0, 0.0)
        measured = step["measured_by_kind_s"]
        assert measured["products"] == pytest.approx(priced.products_s + priced.product_bytes_s, rel=0.1)
        if priced.kernel_s:
            assert measured["kernel"] == pytest.approx(priced.kernel_s, rel=0.06)
        flops = sum(step["tally"]["product_flops"].values()) + sum(step["tally"]["kernel_flops"].values())
        assert 1.1 < step["measured_step_s"] / (flops / CHIPS["tpu-v5e"].peak_flops["bf16"]) < 2.0
    assert len(ratios) == 14 and all(0.9 <= r <= 1.1 for r in ratios.values()), ratios
    labels = " | ".join(label for label, _ in ratios)
    for needed in ("1×8192", "4×2048", "remat none", "remat full", "minimal", "save_dots", "save_qkv_proj", "MLP"):
        assert needed in labels
    assert {dtype for _, dtype in ratios} == {"bf16", "mixed", "f32"}


def test_the_fitted_share_is_checked_on_the_steps_it_was_not_fitted_on():
    """The model's one constant fitted on steps, refitted here on every other step: the other half within 10%."""
    from tools.calibration_check import fit_exposed

    v5e = calibration.for_chip("tpu-v5e")
    assert fit_exposed(STEPS, v5e) == pytest.approx(v5e.product_bytes_exposed)
    for train, test in ((STEPS[0::2], STEPS[1::2]), (STEPS[1::2], STEPS[0::2])):
        model = dataclasses.replace(v5e, product_bytes_exposed=fit_exposed(train, v5e))
        for step in test:
            ratio = step["measured_step_s"] / calibration.price_tally(step["tally"], model).step_s(0.0, 0.0)
            assert 0.9 <= ratio <= 1.1, (step["label"], ratio)
    # Without it (each product the larger of its two terms, a roofline per op) every step runs slower than predicted.
    bare = dataclasses.replace(v5e, product_bytes_exposed=0.0)
    assert all(s["measured_step_s"] > calibration.price_tally(s["tally"], bare).step_s(0.0, 0.0) for s in STEPS)


LOOP_PROGRAM = """HloModule m, is_scheduled=true

%fused_computation (param_0: bf16[3,32,16], param_1: bf16[64,32], param_2: s32[]) -> f32[64,16] {
  %param_0 = bf16[3,32,16]{2,1,0} parameter(0)
  %param_2 = s32[] parameter(2)
  %zero = s32[] constant(0)
  %slice = bf16[1,32,16]{2,1,0} dynamic-slice(%param_0, %param_2, %zero, %zero), dynamic_slice_sizes={1,32,16}
  %w = bf16[32,16]{1,0} bitcast(%slice)
  %param_1 = bf16[64,32]{1,0} parameter(1)
  ROOT %convolution.1 = f32[64,16]{1,0} convolution(%param_1, %w), dim_labels=bf_io->bf
}

%cond (arg: (s32[], bf16[3,32,16], bf16[64,32])) -> pred[] {
  %arg = (s32[], bf16[3,32,16], bf16[64,32]) parameter(0)
  %i = s32[] get-tuple-element(%arg), index=0
  %trips = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %trips), direction=LT
}

%body (arg: (s32[], bf16[3,32,16], bf16[64,32])) -> (s32[], bf16[3,32,16], bf16[64,32]) {
  %arg = (s32[], bf16[3,32,16], bf16[64,32]) parameter(0)
  %i = s32[] get-tuple-element(%arg), index=0
  %ws = bf16[3,32,16]{2,1,0} get-tuple-element(%arg), index=1
  %x = bf16[64,32]{1,0} get-tuple-element(%arg), index=2
  %fusion.1 = f32[64,16]{1,0} fusion(%ws, %x, %i), kind=kOutput, calls=%fused_computation
  ROOT %t = (s32[], bf16[3,32,16], bf16[64,32]) tuple(%i, %ws, %x)
}

ENTRY %main (p0: bf16[3,32,16], p1: bf16[64,32]) -> bf16[64,32] {
  %p0 = bf16[3,32,16]{2,1,0} parameter(0)
  %p1 = bf16[64,32]{1,0} parameter(1)
  %c0 = s32[] constant(0)
  %init = (s32[], bf16[3,32,16], bf16[64,32]) tuple(%c0, %p0, %p1)
  %while.1 = (s32[], bf16[3,32,16], bf16[64,32]) while(%init), condition=%cond, body=%body
  %copy-start.1 = (bf16[64,32]{1,0:S(5)}, bf16[64,32]{1,0}, u32[]) copy-start(%p1)
  ROOT %copy-done.1 = bf16[64,32]{1,0:S(5)} copy-done(%copy-start.1)
}
"""


def test_a_program_read_op_by_op():
    """A hand-written program: a loop of 3 trips around a fusion with one 64×32×16 product, a dynamic-slice of a
    stacked weight (one layer read, not three), and a copy to host memory."""
    text = LOOP_PROGRAM
    found = hlo_ops.ops(text)
    counted = hlo_ops.summary(found)
    assert counted["product_flops"] == 3 * 2 * 64 * 32 * 16
    assert hlo_ops.summary(hlo_ops.ops(text, count_loops=False))["product_flops"] == 2 * 64 * 32 * 16
    # Each trip reads one layer of the stacked weight (32·16 bf16), the activations and the trip counter, and
    # writes the f32 result.
    assert counted["bytes"] == 3 * (32 * 16 * 2 + 64 * 32 * 2 + 4 + 64 * 16 * 4)
    assert counted["host_bytes"] == 64 * 32 * 2
    # The same program with its activations kept in the core's own memory (layout memory space 1): the product
    # reads none of them from HBM, and the calibrated model's tally counts only the bytes that cross HBM.
    onchip = text.replace("bf16[64,32]{1,0}", "bf16[64,32]{1,0:S(1)}")
    kept = calibration.tally(hlo_ops.ops(onchip), onchip)
    assert kept["product_flops"] == {"bf16": 3 * 2 * 64 * 32 * 16}
    assert kept["product_bytes"] == 3 * (32 * 16 * 2 + 4 + 64 * 16 * 4)
    assert calibration.tally(hlo_ops.ops(text), text)["product_bytes"] == counted["bytes"]


def test_a_collective_matmul_loop_counted_by_its_own_counter():
    """The TPU compiler's collective matmul (a ``windowed_dot_general`` loop, as it writes FSDP's gathered
    projections): a ``u32`` counter from 0 while < 4, 2 a trip (two pieces of the sharded weight a trip, one from
    each direction of the ring) — 2 trips of two 64×32×16 products, nested in a loop over 3 layers whose counter
    starts at 1 and runs while ≤ 3. Read as 4 trips or as 1 (a ``u32`` bound was not read: FSDP's projections
    on v5e-8 lost their further trips), the FLOPs are twice or half the hand count."""
    text = """HloModule m, is_scheduled=true

%wcond (p: (u32[], bf16[64,32], bf16[32,16], f32[64,16])) -> pred[] {
  %p = (u32[], bf16[64,32], bf16[32,16], f32[64,16]) parameter(0)
  %n = u32[] get-tuple-element(%p), index=0
  %four = u32[]{:T(128)} constant(4)
  ROOT %lt = pred[] compare(%n, %four), direction=LT
}

%wbody (p: (u32[], bf16[64,32], bf16[32,16], f32[64,16])) -> (u32[], bf16[64,32], bf16[32,16], f32[64,16]) {
  %p = (u32[], bf16[64,32], bf16[32,16], f32[64,16]) parameter(0)
  %two = u32[]{:T(128)} constant(2)
  %n = u32[] get-tuple-element(%p), index=0
  %x = bf16[64,32]{1,0} get-tuple-element(%p), index=1
  %w = bf16[32,16]{1,0} get-tuple-element(%p), index=2
  %from_left = f32[64,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %from_right = f32[64,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %sum = f32[64,16]{1,0} add(%from_left, %from_right)
  %next = u32[] add(%n, %two)
  ROOT %t = (u32[], bf16[64,32], bf16[32,16], f32[64,16]) tuple(%next, %x, %w, %sum)
}

%lcond (q: (s32[], bf16[64,32], bf16[32,16])) -> pred[] {
  %q = (s32[], bf16[64,32], bf16[32,16]) parameter(0)
  %i = s32[] get-tuple-element(%q), index=0
  %three = s32[] constant(3)
  ROOT %le = pred[] compare(%i, %three), direction=LE
}

%lbody (q: (s32[], bf16[64,32], bf16[32,16])) -> (s32[], bf16[64,32], bf16[32,16]) {
  %q = (s32[], bf16[64,32], bf16[32,16]) parameter(0)
  %i = s32[] get-tuple-element(%q), index=0
  %x = bf16[64,32]{1,0} get-tuple-element(%q), index=1
  %w = bf16[32,16]{1,0} get-tuple-element(%q), index=2
  %zero = u32[] constant(0)
  %start = u32[] copy(%zero)
  %acc = f32[64,16]{1,0} broadcast(f32[] constant(0)), dimensions={}
  %init = (u32[], bf16[64,32], bf16[32,16], f32[64,16]) tuple(%start, %x, %w, %acc)
  %windowed = (u32[], bf16[64,32], bf16[32,16], f32[64,16]) while(%init), condition=%wcond, body=%wbody
  %one = s32[] constant(1)
  %next = s32[] add(%one, %i)
  ROOT %t = (s32[], bf16[64,32], bf16[32,16]) tuple(%next, %x, %w)
}

ENTRY %main (p0: bf16[64,32], p1: bf16[32,16]) -> s32[] {
  %p0 = bf16[64,32]{1,0} parameter(0)
  %p1 = bf16[32,16]{1,0} parameter(1)
  %first = s32[] constant(1)
  %init = (s32[], bf16[64,32], bf16[32,16]) tuple(%first, %p0, %p1)
  %layers = (s32[], bf16[64,32], bf16[32,16]) while(%init), condition=%lcond, body=%lbody
  ROOT %done = s32[] get-tuple-element(%layers), index=0
}
"""
    product = 2 * 64 * 32 * 16
    assert hlo_ops.summary(hlo_ops.ops(text))["product_flops"] == 3 * 2 * 2 * product
    assert hlo_ops.summary(hlo_ops.ops(text, count_loops=False))["product_flops"] == 2 * product


def test_the_tools_that_made_the_figures_still_build_their_configurations():
    """tools/calibration_check.py's steps and tools/recipes_check.py's MaxText recipes plan without compiling
    (they run on the chip or for minutes: only a test notices when they rot)."""
    from sharding_lab.training.config import plan
    from tools import calibration_check, recipes_check
    from tools.measure import config_of

    for _, argv, _ in calibration_check.STEPS:  # splash plans for a TPU: the chip's one-chip target
        plan(config_of(argv + ["--target", "v5e-1"]))
    for name, (args, published, source) in recipes_check.RECIPES.items():
        config = config_of((recipes_check.COMMON + " " + args).split())
        assert config.mesh.size in (64, 256) and 0.6 < published < 0.72 and "maxtext" in source
        per_chip = config.batch_size // config.mesh.size
        assert per_chip == {"16b": 6, "32b": 4, "32b-v5p": 6}[name]  # MaxText's per_device_batch_size


def test_device_times_reads_each_program_and_op_off_the_chips_trace(tmp_path):
    """cost.device_times on a trace written by hand (the XSpace a TPU's profiler writes: a device plane with its
    'XLA Modules' and 'XLA Ops' lines): two runs of one program and one of another, their ops matched to the run
    whose span holds them; a program the trace lacks keeps its wall clock, said so; a host plane is not read."""
    from jax.profiler import ProfileData

    from sharding_lab.cost import device_times

    def event(metadata, start_us, length_us):
        return f"events {{ metadata_id: {metadata} offset_ps: {start_us * 10**6} duration_ps: {length_us * 10**6} }}"

    modules = " ".join([event(1, 0, 100), event(1, 200, 100), event(2, 400, 50)])
    ops = " ".join([event(3, 10, 30), event(3, 50, 40), event(3, 210, 30), event(4, 410, 20), event(4, 600, 5)])
    names = {1: "jit_step(7)", 2: "jit_other(8)", 3: "%fusion.7 = f32[4]{0} fusion(%p), kind=kLoop", 4: "copy.2"}
    metadata = " ".join(f'event_metadata {{ key: {k} value {{ id: {k} name: "{v}" }} }}' for k, v in names.items())
    text = f"""planes {{ id: 1 name: "/device:TPU:0"
      lines {{ id: 1 name: "XLA Modules" timestamp_ns: 1000 {modules} }}
      lines {{ id: 2 name: "XLA Ops" timestamp_ns: 1000 {ops} }} {metadata} }}
    planes {{ id: 2 name: "/host:CPU" lines {{ id: 1 name: "XLA Ops" timestamp_ns: 1000 {event(3, 20, 900)} }}
      {metadata} }}"""
    folder = tmp_path / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    (folder / "machine.xplane.pb").write_bytes(ProfileData.text_proto_to_serialized_xspace(text))
    walls = {"step": [1.0, 1.0], "other": [1.0], "lost": [0.5, 0.7]}
    timed = device_times.collect(str(tmp_path), {"jit_step": "step", "jit_other": "other"}, walls)
    assert timed["step"].device and timed["step"].calls_s == pytest.approx([100e-6, 100e-6])
    assert timed["step"].per_call() == {"fusion.7": [1.5, pytest.approx(50e-6)]}  # 3 runs of it in 2 calls
    assert timed["other"].median_s == pytest.approx(50e-6)
    assert timed["other"].ops == {"copy.2": [1, pytest.approx(20e-6)]}  # its second run lies outside the program
    assert not timed["lost"].device and timed["lost"].median_s == pytest.approx(0.6)


def test_a_kept_recipe_is_priced_again_without_a_compile(tmp_path):
    """tools/recipes_check.py --reprice: a program kept by --hlo (its text gzip'd beside its figures) priced again
    at today's model — as the cost prices it (calibration.price with the program's text), the step composed as the
    Prediction composes it (collectives as kept, the roofline a floor), the MFU over the kept model FLOPs."""
    import gzip

    from tools import recipes_check

    v5e = calibration.for_chip("tpu-v5e")
    (tmp_path / "toy.hlo.gz").write_bytes(gzip.compress(LOOP_PROGRAM.encode()))
    kept = {"recipe": "toy", "args": "", "published_mfu": 0.5, "roofline_mfu": 0.6, "step_s": 1e-9}
    kept |= {"target": "v5e-1", "comm_s": 2e-6, "latency_s": 1e-6, "model_flops": 1e5, "peak": 1.97e14}
    kept |= {"calibrated_mfu": None}
    (tmp_path / "toy.json").write_text(json.dumps(kept))
    (tmp_path / "out.json").write_text("[]")  # --json's output beside the kept programs: not a recipe
    (row,) = recipes_check.reprice(str(tmp_path))
    priced = calibration.price(hlo_ops.ops(LOOP_PROGRAM), v5e, CHIPS["tpu-v5e"].host_bytes_per_s, LOOP_PROGRAM)
    assert row["priced"] == priced.to_json() and priced.host_s > 0
    assert row["calibrated_step_s"] == pytest.approx(priced.step_s(2e-6, 1e-6))
    assert row["calibrated_step_s"] >= max(priced.compute_side_s, 3e-6)  # no collective in it: 3 µs hidden
    assert row["calibrated_mfu"] == pytest.approx(1e5 / (row["calibrated_step_s"] * 1.97e14))
    assert row["calibrated_mfu_within_25%"] is False
