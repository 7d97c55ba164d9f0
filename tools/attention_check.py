"""Measured beside predicted for an attention-heavy step, per attention kind, on one real TPU v5e chip.

    SHARDING_LAB_PLATFORM=accelerator python -m tools.attention_check --attention splash --out a.json

One kind per process: the chip's peak memory only grows within a process. The prediction is the app's
``cost --target v5e-1`` (the TPU compiler without the chip: its FLOPs, HBM traffic and memory, the splash
kernel's FLOPs and streamed bytes from its formula); the measurement is the same step compiled for the chip
and run on real arrays (median of ``--repeats`` calls, after a warm-up), with the chip's own peak memory.
docs/plan-physics-measured.md holds what it printed on 2026-12-06.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax

from sharding_lab import cost
from tools.measure import config_of, median_call_s, memory, use_platform

# Attention-heavy: 4,096 tokens a sequence, 16 heads of 128, a narrow MLP (the scores are 2·b·h·s² of the
# step's memory and 4·b·h·s²·d of its FLOPs against 6·N·tokens for the weights).
STEP = [
    "--model", "transformer", "--layers", "2", "--embed", "2048", "--heads", "16", "--head-dim", "128",
    "--mlp-dim", "2048", "--vocab", "8192", "--seq", "4096", "--mlp-type", "swiglu", "--positions", "rope",
    "--batch", "2", "--preset", "dp", "--mesh", "1", "--axes", "data", "--optimizer", "adamw",
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attention", default="splash")
    parser.add_argument("--remat", default="none")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default=None)
    parser.add_argument("--platform", default="accelerator", help="cpu: a dry run here (xla attention, --quick)")
    parser.add_argument("--quick", action="store_true", help="seq 256: a dry run of the script itself")
    args = parser.parse_args()
    argv = STEP + ["--attention", args.attention, "--remat", args.remat] + (["--seq", "256"] if args.quick else [])
    config = config_of(argv)
    from sharding_lab import plan as make_plan

    predicted = cost.predict(make_plan(dataclasses.replace(config, target="v5e-1")), None, "mixed")
    use_platform(args.platform)
    from sharding_lab.training.step import step_program

    plan = make_plan(config)
    fn, state, x, y = step_program(plan, "mixed")
    with jax.set_mesh(plan.mesh):
        compiled = fn.lower(state, x, y).compile()
        seconds = median_call_s(compiled, state, x, y, args.repeats)
    stats = jax.devices()[0].memory_stats() or {}
    out = {
        "attention": args.attention,
        "remat": args.remat,
        "argv": " ".join(argv),
        "device": str(jax.devices()[0].device_kind),
        "measured_step_s": seconds,
        "measured_peak_bytes": stats.get("peak_bytes_in_use"),
        "chip_compile_memory": memory(compiled),
        "predicted": {
            k: getattr(predicted, k)
            for k in ("step_s", "compute_s", "memory_s", "flops", "hbm_bytes", "hbm_needed", "bound", "fits")
        },
        "notes": predicted.notes,
    }
    print(json.dumps(out, indent=1, default=str))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
