"""Measured beside predicted, on one real TPU v5e chip: run once, in one go, on a machine that has it.

    SHARDING_LAB_PLATFORM=gpu python -m tools.tpu_check --out tpu.md   # on the TPU machine (meshes on the chip)
    SHARDING_LAB_PLATFORM=cpu python -m tools.tpu_check --quick        # a dry run here: "real" is XLA:CPU

The app compiles for ``v5e-N`` on a machine with no TPU: libtpu, given a topology description
(:func:`sharding_lab.targets.devices`), compiles the step for chips that are not there. Four checks of that,
each a Markdown table (also written to ``--out`` as they finish, so a run cut short keeps what it measured):

1. **The compiler without the chip vs on it.** The same step compiled for the app's ``v5e-1`` description and
   for the real chip: the compiler's memory figures, its FLOPs and bytes, and the HLO programs compared.
2. **Fits.** Steps near the chip's memory: the app's verdict (``cost --target v5e-1``: the compiler's HBM need
   against the chip's usable HBM, or its refusal) beside what the real chip did when the step ran. (This check
   found the app judging against the published 16 GB, not the 15.75 GiB the compiler and the chip allow.)
3. **The step time.** Two predictions the app makes — the XLA:CPU program priced with the v5e roofline (a
   laptop without libtpu) and the ``v5e-1`` target's own program (``cost --target v5e-1``) — beside the
   median time of :func:`sharding_lab.training.step.step_program` on the chip, on real arrays.
4. **The trainer** (f32, as the app trains live): steps/s on the chip.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib.metadata
import re
import time

import jax

import sharding_lab as sl
from sharding_lab import cost
from sharding_lab.hardware import chips
from sharding_lab.training.step import lower_train_step, step_program
from sharding_lab.training.trainer import Lab, Trainer
from sharding_lab.units import format_seconds
from tools.measure import config_of, gb, median_call_s, memory, table, use_platform

TARGET = "v5e-1"
REAL = "gpu"  # SHARDING_LAB_PLATFORM for meshes on the chip (any accelerator); cpu in a dry run
ONE_CHIP = ["--preset", "dp", "--mesh", "1", "--axes", "data"]
MLP = ["--model", "mlp", "--optimizer", "seed-sgd"] + ONE_CHIP
GPT2 = ["--model", "transformer", "--size", "gpt2-small", "--optimizer", "adamw"] + ONE_CHIP
STEP_CONFIGS = [  # (label, argv, dtype)
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
    ("GPT-2 small, 8×1024 tokens, AdamW", GPT2 + ["--batch", "8"], "mixed"),
    ("GPT-2 small, 16×1024 tokens, AdamW, remat full", GPT2 + ["--batch", "16", "--remat", "full"], "mixed"),
]
FIT_CONFIGS = [  # near the chip's 16 GB, smallest first (the chip's peak memory only grows within a process)
    (f"GPT-2 small, {b}×1024 tokens, AdamW", GPT2 + ["--batch", str(b)], "mixed") for b in (12, 13, 14)
] + [("GPT-2 small, 32×1024 tokens, AdamW, remat full", GPT2 + ["--batch", "32", "--remat", "full"], "mixed")]
TRAINER_CONFIGS = [
    ("the app's default MLP, dp", ONE_CHIP, "f32"),
    ("the app's default transformer, dp", ["--model", "transformer"] + ONE_CHIP, "f32"),
]
QUICK = [
    (
        "MLP 64-256-64, 1 hidden, batch 256",
        MLP + ["--din", "64", "--width", "256", "--dout", "64", "--hidden-layers", "1", "--batch", "256"],
        "bf16",
    )
]


def on_target(config: sl.LabConfig) -> sl.LabConfig:
    return dataclasses.replace(config, target=TARGET)


def program(hlo: str) -> list[str]:
    """The HLO text without what differs between two compiles of one program: metadata, the module's name."""
    lines = []
    for line in hlo.splitlines():
        line = re.sub(r",? metadata=\{[^}]*\}", "", line)
        line = re.sub(r"^HloModule \S+", "HloModule", line)
        lines.append(line.rstrip())
    return lines


def opcodes(lines: list[str]) -> collections.Counter:
    return collections.Counter(m.group(1) for line in lines if (m := re.search(r"= \S+ ([a-z][\w-]*)\(", line)))


def flops_bytes(compiled) -> tuple[float, float]:
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    return float(analysis.get("flops", 0.0)), float(analysis.get("bytes accessed", 0.0))


def peak_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


class Report:
    """The tables so far, rewritten to ``--out`` whenever one changes (a run cut short keeps them)."""

    def __init__(self, path: str | None, start: float, budget_s: float):
        self.path, self.parts, self.start, self.budget_s = path, {}, start, budget_s

    def set(self, key: str, text: str, show: bool = True) -> None:
        self.parts[key] = text
        if show:
            print(text, flush=True)
        if self.path:
            with open(self.path, "w") as f:
                f.write("\n".join(self.parts.values()) + "\n")

    def out_of_time(self) -> bool:
        return time.perf_counter() - self.start > self.budget_s


def real_step(config: sl.LabConfig, dtype: str, repeats: int):
    """The step compiled for the real chip (its ``jax.stages.Compiled``) and its median seconds on real
    arrays — ``None`` with the error's first line when it could not run (out of memory, say)."""
    plan = sl.plan(config)
    fn, state, x, y = step_program(plan, dtype)
    with jax.set_mesh(plan.mesh):
        try:
            compiled = None
            compiled = fn.lower(state, x, y).compile()
            return compiled, median_call_s(compiled, state, x, y, repeats), None
        except Exception as error:  # one failure must not lose the others' figures
            text = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
            return compiled, None, f"{type(error).__name__}: {text}"


def same_program(ours, real) -> str:
    pa, pb = program(ours.as_text()), program(real.as_text())
    if pa == pb:
        return "identical"
    differ = sum(x != y for x, y in zip(pa, pb)) + abs(len(pa) - len(pb))
    return f"{differ} of {len(pb)} lines differ; ops {'the same' if opcodes(pa) == opcodes(pb) else 'differ'}"


def measured_beside_predicted(report: Report, configs, repeats: int, laptop: set[str]) -> None:
    """Per config: the app's predictions (XLA:CPU priced as a v5e for the labels in ``laptop``; the v5e-1 target's own
    program), the real chip's compile of the same step, and its time on the chip."""
    compare, times, fit_rows = [], [], []
    for label, argv, dtype in configs:
        if report.out_of_time():
            compare.append([label, dtype, "skipped: out of time"] + [""] * 5)
            continue
        config = config_of(argv)
        try:
            use_platform("cpu")
            a = cost.predict(sl.plan(config), "tpu-v5e", dtype) if label in laptop else None
            use_platform(REAL)
            b = cost.predict(sl.plan(on_target(config)), None, dtype)
            compiled, seconds, failed = real_step(config, dtype, repeats)
            ours = b.memory or {}
            if compiled is None:
                compare.append([label, dtype, f"the chip's compile failed: {failed}"] + [""] * 5)
            else:
                m, (flops, accessed) = memory(compiled), flops_bytes(compiled)
                hlo = ""
                if config.model.family == "mlp":  # cheap to compile twice: the whole program compared
                    hlo = same_program(lower_train_step(sl.plan(on_target(config)), dtype).compile(), compiled)
                compare.append(
                    [label, dtype]
                    + [f"{gb(ours.get(k, float('nan')))} / {gb(m[k])}" for k in ("temp", "argument", "output")]
                    + [f"{b.flops:.4g} / {flops:.4g}", f"{b.hbm_bytes:.4g} / {accessed:.4g}", hlo]
                )
            peak = peak_bytes()
            verdict = "refused by the compiler" if b.refused else ("fits" if b.fits else "over the usable HBM")
            ran = f"ran, {format_seconds(seconds)}/step" if seconds else f"did not run: {failed}"
            fit_rows.append(
                [
                    label,
                    dtype,
                    gb(b.hbm_needed) if not b.refused else "",
                    verdict,
                    ran,
                    gb(peak) if peak is not None else "n/a",
                ]
            )
            if seconds and not b.refused:
                times.append(
                    [
                        label,
                        dtype,
                        f"{format_seconds(a.step_s)} ({a.bound})" if a else "",
                        f"{format_seconds(b.step_s)} ({b.bound})",
                        format_seconds(seconds),
                        f"{seconds / a.step_s:.2f}" if a else "",
                        f"{seconds / b.step_s:.2f}",
                        f"{b.flops / seconds / b.peak:.0%}",
                    ]
                )
        except Exception as error:
            compare.append([label, dtype, f"failed: {type(error).__name__}: {str(error)[:160]}"] + [""] * 5)
        print(compare[-1], fit_rows[-1:], times[-1:], flush=True)
        publish(report, compare, fit_rows, times, show=False)
    publish(report, compare, fit_rows, times, show=True)


def publish(report: Report, compare, fit_rows, times, show: bool) -> None:
    report.set(
        "1",
        table(
            f"1. The app's {TARGET} compile (no chip) / the real chip's compile of the same step",
            ["config", "dtype", "temp", "arguments", "outputs", "FLOPs", "bytes accessed", "HLO program"],
            compare,
        ),
        show,
    )
    report.set(
        "2",
        table(
            f"2. Fits: the app's verdict for {TARGET} beside what the real chip did",
            [
                "config",
                "dtype",
                "HBM needed (compiler)",
                "app's verdict",
                "on the chip",
                "chip's peak bytes in use so far",
            ],
            fit_rows,
        ),
        show,
    )
    report.set(
        "3",
        table(
            "3. Step time: predicted (v5e roofline) vs measured on the chip",
            [
                "config",
                "dtype",
                "predicted from XLA:CPU (laptop)",
                f"predicted from {TARGET} (libtpu)",
                "measured (median)",
                "measured ÷ XLA:CPU's",
                f"measured ÷ {TARGET}'s",
                "MFU measured (libtpu FLOPs)",
            ],
            times,
        ),
        show,
    )


def trainer(report: Report, configs, steps: int) -> None:
    rows = []
    for label, argv, _ in configs:
        if report.out_of_time():
            break
        result = Trainer(Lab(config_of(argv + ["--steps", str(steps), "--chunk", "100"]))).run()
        rows.append([label, f"{result.steps_per_s:,.0f}", f"{result.final_loss:.4g}"])
        print(rows[-1], flush=True)
    report.set(
        "4",
        table(
            "4. The trainer (f32, chunks of 100 steps, the first chunk's compile included)",
            ["config", "steps/s", "final loss"],
            rows,
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="one tiny config, few repeats (a dry run)")
    parser.add_argument("--budget-s", type=float, default=400, help="skip what is left after this many seconds")
    parser.add_argument(
        "--fit-batches",
        default=None,
        help="only the fits check, GPT-2 small at these batch sizes (e.g. 15,16,17): where the chip says no",
    )
    parser.add_argument(
        "--fit-remat",
        default="none",
        choices=("none", "full"),
        help="with --fit-batches: the blocks rematerialised (a scan) or not",
    )
    parser.add_argument("--out", default=None, help="also write the tables to this file")
    args = parser.parse_args()
    report = Report(args.out, time.perf_counter(), args.budget_s)
    steps, fit_configs = (QUICK, []) if args.quick else (STEP_CONFIGS, FIT_CONFIGS)
    repeats = 3 if args.quick else args.repeats
    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in ("jax", "jaxlib", "libtpu", "flax") if _installed(name)
    )
    report.set(
        "0",
        f"{versions}; device: {device.device_kind} ({device.platform}); its memory limit "
        f"{stats.get('bytes_limit', 'n/a')} bytes; the app's v5e: {chips.chip('tpu-v5e').hbm_bytes:.0f} "
        f"bytes HBM, {chips.chip('tpu-v5e').peak_flops['bf16']:.3g} FLOP/s bf16\n",
    )
    global REAL
    REAL = "gpu" if device.platform != "cpu" else "cpu"
    if args.fit_batches:  # only the fits check, at the sizes asked for
        remat = [] if args.fit_remat == "none" else ["--remat", args.fit_remat]
        runs = [
            (
                f"GPT-2 small, {b}×1024 tokens, AdamW{', remat ' + args.fit_remat if remat else ''}",
                GPT2 + ["--batch", b] + remat,
                "mixed",
            )
            for b in args.fit_batches.split(",")
        ]
        measured_beside_predicted(report, runs, 3, set())
        return
    # the most telling first, in case the budget runs out; the laptop's XLA:CPU compile only where cheap
    runs = steps if args.quick else [steps[0], steps[2], *fit_configs[:3], steps[3], fit_configs[3], steps[1]]
    laptop = {label for label, _, _ in (steps if args.quick else steps[:3])}
    measured_beside_predicted(report, runs, repeats, laptop)
    trainer(report, QUICK if args.quick else TRAINER_CONFIGS, 300 if args.quick else 2000)
    report.set("end", f"\n(total {time.perf_counter() - report.start:.0f} s)")


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


if __name__ == "__main__":
    main()
