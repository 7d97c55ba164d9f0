"""The calibrated chip model (issue 46.3): the shipped v5e calibration (measured 2026-12-07), its fit, the steps
measured on the real chip against what the calibrated model predicts for them, and the program read op by op
(cost.hlo_ops) against hand counts. No chip needed: the measured steps' programs are kept as their tallies
(tests/core/data/v5e_measured_steps.json, made by tools/calibration_check.py on the chip)."""

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
    # Measured: the matrix unit below its published 1.97e14, HBM below 8.1e11, each call's cost well under 1 ms.
    assert 0.8 * chip.peak_flops["bf16"] < v5e.matmul_rate("bf16") < chip.peak_flops["bf16"]
    assert 0.6 * chip.hbm_bytes_per_s < v5e.hbm_bytes_per_s < chip.hbm_bytes_per_s
    assert 1e-4 < v5e.call_overhead_s < 1e-3
    # The splash kernel is slower at small blocks and short sequences; every rate below the chip's peak.
    assert v5e.splash_rate(8192, 512, "fwd") > 3 * v5e.splash_rate(8192, 128, "fwd")
    assert v5e.splash_rate(1024, 512, "dkv") < v5e.splash_rate(8192, 512, "dkv") < chip.peak_flops["bf16"]


def test_the_matmul_fit_recovers_a_made_up_chip():
    """fit_matmuls on times made by the model itself gives back its three constants."""
    rate, bandwidth, call = 1.7e14, 6e11, 5e-4
    table = []
    for m, k, n in ((512, 128, 128), (8192, 8192, 8192), (32768, 128, 32768), (2048, 2048, 2048), (8192, 512, 128)):
        flops, moved = 2.0 * m * k * n, (m * k + k * n + m * n) * 2
        table.append([m, k, n, flops / (max(flops / rate, moved / bandwidth) + call)])
    got = calibration.fit_matmuls(table, 2)
    assert got == pytest.approx((rate, bandwidth, call), rel=0.03)


def test_other_tpus_are_derived_from_the_measured_one_and_say_so():
    v5e, v5p = calibration.for_chip("tpu-v5e"), calibration.for_chip("tpu-v5p")
    assert "derived from tpu-v5e.calibration.json" in v5p.source
    ratio = CHIPS["tpu-v5p"].peak_flops["bf16"] / CHIPS["tpu-v5e"].peak_flops["bf16"]
    assert v5p.matmul_rate("bf16") == pytest.approx(v5e.matmul_rate("bf16") * ratio)
    assert calibration.for_chip("h100") is None


def test_measured_steps_against_the_calibrated_prediction():
    """Issue 46's acceptance asks for at least 10 steps measured on the chip within 20% of the calibrated
    prediction. What holds (docs/plan-physics-measured.md): 9 of 14 within 20% — the MLPs, every step without
    remat, XLA's attention, the 16B-width block — and every step within 25%, the calibrated model too slow by
    20–22% on the remat steps of grouped-query attention (the kernel was measured on multi-head attention). The
    published-peak roofline is a lower bound of every one of them, 1.2–2.1× too fast."""
    v5e = calibration.for_chip("tpu-v5e")
    ratios = {}
    for step in STEPS:
        predicted = calibration.price_tally(step["tally"], v5e).step_s(0.0, 0.0)
        ratios[step["label"], step["dtype"]] = step["measured_step_s"] / predicted
        roofline = step["xla_flops"] / CHIPS["tpu-v5e"].peak_flops["bf16"]
        assert roofline < step["measured_step_s"]
    within = {key for key, r in ratios.items() if 0.8 <= r <= 1.2}
    assert len(within) >= 9 and all(0.75 <= r <= 1.25 for r in ratios.values()), ratios
    labels = " | ".join(label for label, _ in within)
    for needed in ("1×8192", "4×2048", "remat none", "xla attention", "16B width", "MLP"):
        assert needed in labels
    assert {dtype for _, dtype in within} >= {"bf16", "mixed"}


def test_a_program_read_op_by_op():
    """A hand-written program: a loop of 3 trips around a fusion with one 64×32×16 product, a dynamic-slice of a
    stacked weight (one layer read, not three), and a copy to host memory."""
    text = """HloModule m, is_scheduled=true

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
    found = hlo_ops.ops(text)
    counted = hlo_ops.summary(found)
    assert counted["product_flops"] == 3 * 2 * 64 * 32 * 16
    assert hlo_ops.summary(hlo_ops.ops(text, count_loops=False))["product_flops"] == 2 * 64 * 32 * 16
    # Each trip reads one layer of the stacked weight (32·16 bf16), the activations and the trip counter, and
    # writes the f32 result.
    assert counted["bytes"] == 3 * (32 * 16 * 2 + 64 * 32 * 2 + 4 + 64 * 16 * 4)
    assert counted["host_bytes"] == 64 * 32 * 2


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
