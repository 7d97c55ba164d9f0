"""Steps measured on one real TPU v5e for the calibrated step model: each step compiled for the chip, its
compiler figures and program kept, and its median time on real arrays.

    python -m tools.calibration_check --out steps.json --hlo hlos.tar.gz       # on the TPU machine
    python -m tools.calibration_check --quick --platform cpu                   # a dry run here
    python -m tools.calibration_check --tally steps.json hlos.tar.gz tests/core/data/v5e_measured_steps.json
    python -m tools.calibration_check --fit tests/core/data/v5e_measured_steps.json   # the model's fitted share

The prediction for each (``sharding_lab.cost.calibration`` on the ``v5e-1`` target's program, the TPU compiler
without the chip) is made where the lab runs, from the same program: this tool only measures, and keeps the
chip's compile (FLOPs, bytes, the HLO text) so that the two programs can be held against each other.
docs/plan-physics-measured.md has what it measured and what the lab predicted. ``--tally`` makes the suite's copy of a
run (tests/core/data/v5e_measured_steps.json) from what it kept: each step's program read op by op again with
today's code (its tally for the calibrated model) and the chip's own time of its products, kernel calls and other
ops (each op of the chip's profile matched to the program's op of its name).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import sys
import tarfile
import time

import jax

from sharding_lab.cost.device_times import collect, traced
from tools.measure import config_of, materialize, memory, use_platform

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
        timed = timed_steps(compiled, state, x, y, repeats)
    row = {
        "label": label,
        "argv": argv,
        "dtype": dtype,
        "measured_step_s": timed.median_s,
        "device_timed": timed.device,
        "calls_s": timed.calls_s,
        "ops": timed.per_call(),
        "compile_s": compile_s,
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
        "optimal_seconds": float(cost.get("optimal_seconds", 0.0)),
        "memory": memory(compiled),
    }
    return row, compiled.as_text()


def timed_steps(step, state, x, y, repeats: int):
    """``step(state, x, y)`` on real arrays made like the abstract ones, ``repeats`` calls after a warm-up, under
    JAX's profiler: the chip's own time of each call and of each op (:mod:`sharding_lab.cost.device_times`; the
    wall clock, blocking on every call, where the trace has no device plane). The state is donated and threaded."""
    live, xs, ys = materialize(state), materialize(x), materialize(y)
    live, loss = step(live, xs, ys)
    loss.block_until_ready()
    walls = []
    with traced() as folder:
        for _ in range(repeats):
            start = time.perf_counter()
            live, loss = step(live, xs, ys)
            loss.block_until_ready()
            walls.append(time.perf_counter() - start)
    return collect(folder.name, None, {"step": walls})["step"]


def tallies(steps_json: str, hlo_tar: str, out: str) -> None:
    """The suite's copy of a run (module docstring): per step its label, arguments, dtype, measured time, XLA's
    FLOPs, the calibrated model's tally of its program and the measured seconds of each kind of op."""
    from sharding_lab.cost import calibration, hlo_ops

    run = json.load(open(steps_json))
    with tarfile.open(hlo_tar) as tar:
        programs = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}
    rows = []
    for step in run["steps"]:
        text = programs.get(f"step{step.get('index', -1):02d}.hlo")
        if text is None or "measured_step_s" not in step:
            continue
        found = hlo_ops.ops(text)
        kinds: dict[str, float] = {}
        for op in found:
            kind = "kernel" if op.kernel_flops() else "products" if op.products else "other"
            kinds[kind] = kinds.get(kind, 0.0) + step.get("ops", {}).get(op.name, [0, 0.0])[1]
        rows.append(
            {
                "label": step["label"],
                "argv": " ".join(step["argv"]),
                "dtype": step["dtype"],
                "measured_step_s": step["measured_step_s"],
                "measured_by_kind_s": kinds,
                "xla_flops": step["flops"],
                "tally": calibration.tally(found, text),
            }
        )
    measured = f"{run.get('date', '')}, {run['device']} through the device tool, JAX {run['jax']}"
    with open(out, "w") as f:
        json.dump({"measured": measured + ", " + METHOD, "steps": rows}, f, indent=1)


def fit_exposed(steps: list[dict], calibration) -> float:
    """The share of a product's smaller term (FLOPs or HBM bytes) that the calibrated model adds to its larger
    (``Calibration.product_bytes_exposed``) that best fits ``steps`` (least squares of log(measured ÷ predicted),
    over shares 0–1 in hundredths; a step's prediction is linear in the share)."""
    import dataclasses
    import math

    from sharding_lab.cost.calibration import price_tally

    def predicted(share):
        model = dataclasses.replace(calibration, product_bytes_exposed=share)
        return [price_tally(s["tally"], model).step_s(0.0, 0.0) for s in steps]

    bare, whole = predicted(0.0), predicted(1.0)

    def error(share):
        return sum(math.log(s["measured_step_s"] / (a + share * (b - a))) ** 2 for s, a, b in zip(steps, bare, whole))

    return min((i / 100 for i in range(101)), key=error)


def fit(measured_steps: str) -> None:
    """``--fit``: the fitted share from every step of ``measured_steps`` written into the package's data file, with
    how it was checked out of sample: fitted on each half of the steps (every other one), the other half's
    measured ÷ predicted."""
    import dataclasses
    from pathlib import Path

    from sharding_lab.cost import calibration
    from sharding_lab.cost.calibration import price_tally

    steps = json.loads(Path(measured_steps).read_text())["steps"]
    chip = calibration.for_chip(calibration.MEASURED)
    checks = {}
    for name, train, test in (("even", steps[0::2], steps[1::2]), ("odd", steps[1::2], steps[0::2])):
        share = fit_exposed(train, chip)
        model = dataclasses.replace(chip, product_bytes_exposed=share)
        ratios = [s["measured_step_s"] / price_tally(s["tally"], model).step_s(0.0, 0.0) for s in test]
        checks[f"fitted on the {name} steps"] = {"share": share, "the other steps' measured / predicted": ratios}
    path = calibration.HERE / f"{calibration.MEASURED}.calibration.json"
    data = json.loads(path.read_text())
    data["fitted"] = {
        "product_bytes_exposed": fit_exposed(steps, chip),
        "parameters": 1,
        "fitted_on": f"the {len(steps)} steps of {Path(measured_steps).name} (tools/calibration_check.py --fit)",
        "out_of_sample": checks,
    }
    path.write_text(json.dumps(data, indent=1))
    print(json.dumps(data["fitted"], indent=1))


METHOD = (
    "tools/calibration_check.py: the chip's own time of each call from JAX's profiler, median of 3 calls after a "
    "warm-up; each op's time from the same trace"
)


def main() -> None:
    if sys.argv[1:2] == ["--tally"]:
        return tallies(*sys.argv[2:5])
    if sys.argv[1:2] == ["--fit"]:
        return fit(sys.argv[2])
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
        print(json.dumps({k: v for k, v in row.items() if k not in ("argv", "ops")}, default=str), flush=True)
        with open(args.out, "w") as f:
            device, today = str(jax.devices()[0].device_kind), datetime.date.today().isoformat()
            json.dump({"device": device, "date": today, "jax": jax.__version__, "steps": rows}, f)
        if args.hlo:
            with tarfile.open(args.hlo, "w:gz") as tar:
                for name, text in programs.items():
                    data = text.encode()
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
