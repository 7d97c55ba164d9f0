"""Measured beside predicted, on one H200 (or any NVIDIA GPU): run once, in one go, on a machine that has it.

    SHARDING_LAB_PLATFORM=gpu python -m tools.h200_check --out h200.md    # on the GPU machine
    SHARDING_LAB_PLATFORM=cpu python -m tools.h200_check --quick          # a dry run of the script itself

Three checks, each printed as a Markdown table (and written to ``--out``):

1. **The step time.** For each configuration (one-device meshes: one GPU) the prediction the app shows on a
   laptop — the step compiled by XLA:CPU, costed with the chip's roofline (:func:`sharding_lab.cost.predict`)
   — beside the median time of the same step (:func:`sharding_lab.training.step.step_program`, the one the cost is
   read from) compiled by XLA:GPU and run on real arrays, blocking on every call.
2. **The GPU compiler without the GPU.** The app compiles for ``h100-N``/``h200-N`` on a CPU machine from a
   device description it writes itself (:func:`sharding_lab.hardware.targets._gpu_target_config`). Here the same step
   is compiled both ways — for that description (a 1-GPU topology) and for the real GPU — and their memory
   figures and kernel counts are set side by side; the real device's own description is printed beside ours.
3. **The trainer** (f32, as the app trains): its steps/s on the GPU.
"""

from __future__ import annotations

import argparse
import os
import re

import jax
import numpy as np

import sharding_lab as sl
from sharding_lab import cost
from sharding_lab.hardware import targets
from sharding_lab.training.step import lower_train_step
from sharding_lab.training.trainer import Lab, Trainer
from sharding_lab.units import format_seconds
from tools.measure import config_of, gb, measure_step, memory, table, use_platform

MLP = ["--model", "mlp", "--preset", "dp", "--mesh", "1", "--axes", "data", "--optimizer", "seed-sgd"]
GPT2 = [
    "--model",
    "transformer",
    "--size",
    "gpt2-small",
    "--preset",
    "dp",
    "--mesh",
    "1",
    "--axes",
    "data",
    "--optimizer",
    "adamw",
]
STEP_CONFIGS = [  # (label, argv, dtype)
    (
        "MLP 1024-1024-1024, 2 hidden, batch 4096",
        MLP + ["--din", "1024", "--width", "1024", "--dout", "1024", "--hidden-layers", "2", "--batch", "4096"],
        "bf16",
    ),
    (
        "MLP 4096-4096-4096, 2 hidden, batch 8192",
        MLP + ["--din", "4096", "--width", "4096", "--dout", "4096", "--hidden-layers", "2", "--batch", "8192"],
        "bf16",
    ),
    (
        "MLP 8192-8192-8192, 1 hidden, batch 16384",
        MLP + ["--din", "8192", "--width", "8192", "--dout", "8192", "--hidden-layers", "1", "--batch", "16384"],
        "bf16",
    ),
    ("GPT-2 small, 16×1024 tokens, AdamW", GPT2 + ["--batch", "16"], "bf16"),
    ("GPT-2 small, 16×1024 tokens, AdamW", GPT2 + ["--batch", "16"], "mixed"),
    ("GPT-2 small, 32×1024 tokens, AdamW, remat full", GPT2 + ["--batch", "32", "--remat", "full"], "mixed"),
]
QUICK = [
    (
        "MLP 64-256-64, 1 hidden, batch 256",
        MLP + ["--din", "64", "--width", "256", "--dout", "64", "--hidden-layers", "1", "--batch", "256"],
        "bf16",
    ),
    (
        "transformer default, AdamW",
        ["--model", "transformer", "--preset", "dp", "--mesh", "1", "--axes", "data", "--optimizer", "adamw"],
        "mixed",
    ),
]


def kernels(hlo: str) -> dict[str, int]:
    """How many fusions and library calls (cuBLAS/cuDNN custom-calls) the compiled program launches."""
    entry = hlo[hlo.find("ENTRY") :]
    return {
        "fusions": len(re.findall(r"= \S+ fusion\(", entry)),
        "custom-calls": len(re.findall(r"custom-call\(", entry)),
    }


def compiled_for_description(config: sl.LabConfig, dtype: str):
    """The step compiled for the app's own description of ``--chip`` (a 1-GPU topology, no GPU used)."""
    from jax.experimental import topologies

    desc = topologies.get_topology_desc(
        platform="cuda", target_config=targets._gpu_target_config(CHIP), topology="1x1x1"
    )
    plan = sl.plan(config)
    plan.mesh = jax.sharding.Mesh(np.array(desc.devices).reshape(plan.mesh.devices.shape), plan.mesh.axis_names)
    return lower_train_step(plan, dtype).compile()


CHIP = "h200"


def main() -> None:
    global CHIP
    parser = argparse.ArgumentParser()
    parser.add_argument("--chip", default="h200", help="the chip the prediction and the description are for")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="tiny configs, few repeats (a dry run)")
    parser.add_argument("--out", default=None, help="also write the tables to this file")
    args = parser.parse_args()
    CHIP = args.chip
    configs = QUICK if args.quick else STEP_CONFIGS
    repeats = 3 if args.quick else args.repeats
    measure_on = os.environ.get("SHARDING_LAB_PLATFORM", "gpu")
    out = [f"jax {jax.__version__}; devices: {jax.devices()}"]
    device = jax.devices()[0]
    out.append(
        "device: "
        + ", ".join(
            f"{k}={getattr(device, k)}"
            for k in ("device_kind", "core_count", "compute_capability")
            if hasattr(device, k)
        )
    )
    print("\n".join(out), flush=True)

    # 1. predicted (XLA:CPU + roofline, as on a laptop) beside measured (XLA:GPU, real arrays)
    use_platform("cpu")
    predicted = {}
    for label, argv, dtype in configs:
        predicted[(label, dtype)] = cost.predict(sl.plan(config_of(argv)), args.chip, dtype)
    use_platform(measure_on)
    rows = []
    for label, argv, dtype in configs:
        p = predicted[(label, dtype)]
        try:
            measured = measure_step(config_of(argv), dtype, repeats)
            rows.append(
                [
                    label,
                    dtype,
                    format_seconds(p.step_s),
                    p.bound,
                    format_seconds(measured),
                    f"{measured / p.step_s:.2f}",
                    f"{p.flops / measured / p.peak:.0%}",
                ]
            )
        except Exception as error:  # one failure must not lose the others' figures
            rows.append(
                [
                    label,
                    dtype,
                    format_seconds(p.step_s),
                    p.bound,
                    f"failed: {type(error).__name__}: {str(error)[:120]}",
                    "",
                    "",
                ]
            )
        print(rows[-1], flush=True)
    out.append(
        table(
            f"1. Step time: predicted ({args.chip} roofline of the XLA:CPU program) vs measured",
            ["config", "dtype", "predicted", "bound", "measured (median)", "measured ÷ predicted", "MFU measured"],
            rows,
        )
    )

    # 2. the app's GPU description, compiled without the GPU, vs the real GPU's compile
    rows = []
    for label, argv, dtype in configs:
        config = config_of(argv)
        try:
            real = lower_train_step(sl.plan(config), dtype).compile()
            ours = compiled_for_description(config, dtype)
            a, b = memory(ours), memory(real)
            ka, kb = kernels(ours.as_text()), kernels(real.as_text())
            rows.append(
                [
                    label,
                    dtype,
                    gb(a["temp"]),
                    gb(b["temp"]),
                    gb(a["argument"]),
                    gb(b["argument"]),
                    f"{ka['fusions']} / {ka['custom-calls']}",
                    f"{kb['fusions']} / {kb['custom-calls']}",
                ]
            )
        except Exception as error:
            rows.append([label, dtype, f"failed: {type(error).__name__}: {str(error)[:160]}", "", "", "", "", ""])
        print(rows[-1], flush=True)
    out.append(
        table(
            "2. Compiled for the app's description of the chip (no GPU) vs for the real GPU",
            [
                "config",
                "dtype",
                "temp (description)",
                "temp (real)",
                "arguments (description)",
                "arguments (real)",
                "fusions / library calls (description)",
                "fusions / library calls (real)",
            ],
            rows,
        )
    )
    out.append("The app's description of the chip:\n```\n" + targets._gpu_target_config(args.chip) + "```")

    # 3. the trainer as the app runs it (f32, chunks of 100 steps)
    rows = []
    for label, argv, _ in configs[:3]:
        config = config_of(argv + ["--steps", "300" if args.quick else "1000", "--chunk", "100"])
        result = Trainer(Lab(config)).run()
        rows.append([label, f"{result.steps_per_s:,.0f}", f"{result.final_loss:.4g}"])
        print(rows[-1], flush=True)
    out.append(table("3. The trainer (f32, chunks of 100 steps)", ["config", "steps/s", "final loss"], rows))
    text = "\n".join(out)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
