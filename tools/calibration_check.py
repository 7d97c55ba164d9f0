"""Steps measured on one real TPU v5e for the calibrated step model: each step compiled for the chip, its
compiler figures and program kept, and its median time on real arrays.

    python -m tools.calibration_check --out steps.json --hlo hlos.tar.gz       # on the TPU machine
    python -m tools.calibration_check --quick --platform cpu                   # a dry run here

The prediction for each (``sharding_lab.cost.calibration`` on the ``v5e-1`` target's program, the TPU compiler
without the chip) is made where the lab runs, from the same program: this tool only measures, and keeps the
chip's compile (FLOPs, bytes, the HLO text) so that the two programs can be held against each other.
docs/plan-physics-measured.md has what it measured and what the lab predicted.
"""

from __future__ import annotations

import argparse
import io
import json
import tarfile
import time

import jax

from tools.measure import config_of, median_call_s, memory, use_platform

ONE_CHIP = ["--preset", "dp", "--mesh", "1", "--axes", "data", "--optimizer", "adamw"]
# A GQA / SwiGLU / RoPE decoder of 311 M parameters (5 GB of f32 state with AdamW: fits one v5e beside its
# activations at every remat policy).
BLOCK = [
    "--model", "transformer", "--layers", "4", "--embed", "2048", "--heads", "16", "--kv-heads", "4",
    "--head-dim", "128", "--mlp-dim", "5632", "--vocab", "32000", "--mlp-type", "swiglu", "--positions", "rope",
] + ONE_CHIP  # fmt: skip
S2K = ["--seq", "2048", "--batch", "4"]
S8K = ["--seq", "8192", "--batch", "1"]
# One block at the 16B model's width (MaxText's v5e recipe: embed 4,096, 32 heads of 128, MLP 28,672).
WIDE = [
    "--model", "transformer", "--layers", "1", "--embed", "4096", "--heads", "32", "--kv-heads", "32",
    "--head-dim", "128", "--mlp-dim", "28672", "--vocab", "32000", "--mlp-type", "swiglu", "--positions", "rope",
    "--seq", "2048", "--batch", "2", "--attention", "splash",
] + ONE_CHIP  # fmt: skip
MLP = ["--model", "mlp", "--optimizer", "seed-sgd", "--preset", "dp", "--mesh", "1", "--axes", "data"]
MLP4K = MLP + ["--din", "4096", "--width", "4096", "--dout", "4096", "--hidden-layers", "2", "--batch", "8192"]


def splash(*extra):
    return BLOCK + ["--attention", "splash", *extra]


STEPS = [  # (label, argv, dtype), most wanted first (a run cut short keeps the first ones)
    ("MLP 4096³, 2 hidden, batch 8192", MLP4K, "bf16"),
    ("block ×4, splash, 4×2048, remat none", splash(*S2K, "--remat", "none"), "mixed"),
    ("block ×4, splash, 4×2048, remat full", splash(*S2K, "--remat", "full"), "mixed"),
    ("block ×4, splash, 4×2048, save_qkv_proj", splash(*S2K, "--remat", "save_qkv_proj"), "mixed"),
    ("block ×4, splash, 4×2048, minimal", splash(*S2K, "--remat", "minimal"), "mixed"),
    ("block ×4, splash, 4×2048, save_dots", splash(*S2K, "--remat", "save_dots"), "mixed"),
    ("block ×4, splash, 1×8192, remat full", splash(*S8K, "--remat", "full"), "mixed"),
    ("block ×4, splash, 1×8192, remat none", splash(*S8K, "--remat", "none"), "mixed"),
    ("block ×4, splash, 4×2048, remat none", splash(*S2K, "--remat", "none"), "bf16"),
    ("block ×4, splash, 4×2048, remat full", splash(*S2K, "--remat", "full"), "bf16"),
    ("block ×4, splash, 1×8192, minimal", splash(*S8K, "--remat", "minimal"), "bf16"),
    ("block ×4, xla attention, 4×2048, remat none", BLOCK + ["--attention", "xla", *S2K], "mixed"),
    ("MLP 4096³, 2 hidden, batch 8192", MLP4K, "f32"),
    ("block ×1 at the 16B width, splash, 2×2048, remat full", WIDE + ["--remat", "full"], "bf16"),
]
QUICK = [
    ("MLP 64-256-64", MLP + ["--din", "64", "--width", "256", "--dout", "64", "--batch", "256"], "bf16"),
    (
        "block ×2, tiny, remat full",
        ["--model", "transformer", "--layers", "2", "--remat", "full", "--seq", "64", "--batch", "4"] + ONE_CHIP,
        "mixed",
    ),
]


def measure(label: str, argv: list[str], dtype: str, repeats: int) -> tuple[dict, str]:
    """One step compiled for this platform's device and run: its figures and its program's text."""
    from sharding_lab import plan as make_plan
    from sharding_lab.training.step import step_program

    config = config_of(argv)
    plan = make_plan(config)
    fn, state, x, y = step_program(plan, dtype)
    with jax.set_mesh(plan.mesh):
        started = time.perf_counter()
        compiled = fn.lower(state, x, y).compile()
        compile_s = time.perf_counter() - started
        cost = compiled.cost_analysis()
        cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
        seconds = median_call_s(compiled, state, x, y, repeats)
    row = {
        "label": label,
        "argv": argv,
        "dtype": dtype,
        "measured_step_s": seconds,
        "compile_s": compile_s,
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
        "optimal_seconds": float(cost.get("optimal_seconds", 0.0)),
        "memory": memory(compiled),
    }
    return row, compiled.as_text()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="steps.json")
    parser.add_argument("--hlo", default=None, help="a .tar.gz to keep each step's compiled program in")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--budget-s", type=float, default=330.0)
    parser.add_argument("--platform", default="accelerator")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    use_platform(args.platform)
    started, rows, programs = time.perf_counter(), [], {}
    for i, (label, argv, dtype) in enumerate(QUICK if args.quick else STEPS):
        if time.perf_counter() - started > args.budget_s:
            rows.append({"label": label, "argv": argv, "dtype": dtype, "skipped": "out of time"})
            continue
        try:
            row, text = measure(label, argv, dtype, args.repeats)
            programs[f"step{i:02d}.hlo"] = text
        except Exception as error:  # a step the chip refuses is a finding, not the end of the run
            row = {"label": label, "argv": argv, "dtype": dtype, "error": f"{type(error).__name__}: {error}"[:2000]}
        row["index"] = i
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "argv"}, default=str), flush=True)
        with open(args.out, "w") as f:
            json.dump({"device": str(jax.devices()[0].device_kind), "jax": jax.__version__, "steps": rows}, f, indent=1)
        if args.hlo:
            with tarfile.open(args.hlo, "w:gz") as tar:
                for name, text in programs.items():
                    data = text.encode()
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
