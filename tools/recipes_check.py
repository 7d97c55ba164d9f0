"""MaxText's published recipes against `cost` (issue 46's acceptance): each recipe's model, mesh, remat, attention and
global batch, compiled for its slice without the chips, and the predicted MFU beside the MFU MaxText measured.

    python -m tools.recipes_check [--only 16b] [--json out.json] [--hlo DIR]
    python -m tools.recipes_check --reprice DIR        # the kept programs priced again, no compile

Each compile takes 15–30 minutes on a loaded 2-core machine (256 devices; a remat step compiles its loop once, read
with its trip count), so this is run by hand, not by the suite;
docs/plan-physics.md has what it printed. With ``--hlo DIR`` each recipe's looped program (the one the calibrated
model prices) is kept as ``DIR/<recipe>.hlo.gz`` beside ``DIR/<recipe>.json`` (its prediction, its tally and the
figures the step is made of), so that a changed chip model can price it again in seconds (``--reprice DIR``).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from sharding_lab import cost
from sharding_lab import plan as make_plan
from sharding_lab.cost import calibration, compiled, hlo_ops
from tools.measure import config_of

MAXTEXT = "https://github.com/AI-Hypercomputer/maxtext"
RECIPES = {  # name: (cost's arguments, published MFU, where MaxText publishes it)
    "16b": (
        "--size maxtext-16b --target v5e-256 --mesh 256 --axes data --preset fsdp --batch 1536 --remat full",
        0.6110,
        f"{MAXTEXT} MaxText/configs/v5e/README.md (1x v5e-256: 120 TFLOP/s, 61.10%); configs/v5e/16b.sh "
        "(per_device_batch_size=6, remat_policy=full, global_parameter_scale=16, max_target_length=2048, flash)",
    ),
    "32b": (
        "--size maxtext-32b --target v5e-256 --mesh 256 --axes data --preset fsdp --batch 1024 --remat full",
        0.6686,
        f"{MAXTEXT} MaxText/configs/v5e/README.md (1x v5e-256: 132 TFLOP/s, 66.86%); configs/v5e/32b.sh "
        "(per_device_batch_size=4, remat_policy=full, global_parameter_scale=32)",
    ),
    "32b-v5p": (
        "--size maxtext-32b --target v5p-128 --mesh 16x4 --axes data,model --preset fsdp_tp --batch 384 "
        "--remat minimal",
        0.7147,
        f"{MAXTEXT} MaxText/configs/v5p/README.md (1x v5p-128: 328 TFLOP/s, 71.47%); configs/v5p/32b.sh "
        "(per_device_batch_size=6, remat_policy=minimal, ici_fsdp_parallelism=-1, ici_tensor_parallelism=4)",
    ),
}
COMMON = "--model transformer --optimizer adamw --attention splash"


def check(name: str, keep: str | None = None) -> dict:
    args, published, source = RECIPES[name]
    config = config_of((COMMON + " " + args).split())
    compiled.PROGRAMS = [] if keep else None
    try:
        p = cost.predict(make_plan(config), None, "mixed")
    finally:
        programs, compiled.PROGRAMS = compiled.PROGRAMS, None
    out = {
        "recipe": name,
        "args": args,
        "published_mfu": published,
        "source": source,
        "fits": p.fits,
        "hbm_needed": p.hbm_needed,
        "refused": p.refused,
        "roofline_mfu": p.mfu,
        "calibrated_mfu": p.calibrated_mfu,
        "calibrated_step_s": p.calibrated_step_s,
        "step_s": None if p.refused else p.step_s,
        "compile_s": p.compile_s,
        "notes": p.notes,
    }
    within(out)
    if keep and programs and not p.refused:
        # The first compile is the loop as it runs: the program the calibrated model priced (compiled.compile_step).
        target, text = programs[0]
        folder = Path(keep)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.hlo.gz").write_bytes(gzip.compress(text.encode()))
        kept = out | {
            "target": target,
            "tally": calibration.tally(hlo_ops.ops(text), text),
            "priced": None if p.priced is None else p.priced.to_json(),
            "comm_s": p.comm_s,
            "latency_s": p.latency_s,
            "model_flops": p.model_flops,
            "flops": p.flops,
            "peak": p.peak,
        }
        (folder / f"{name}.json").write_text(json.dumps(kept, indent=1, default=str))
    return out


def within(out: dict) -> None:
    for key in ("roofline_mfu", "calibrated_mfu"):
        value = out[key]
        out[key + "_within_25%"] = None if value is None else abs(value / out["published_mfu"] - 1) <= 0.25


def reprice(folder: str) -> list[dict]:
    """The recipes kept under ``folder`` (``--hlo``) priced again at today's chip model: each program read op by
    op afresh (:mod:`sharding_lab.cost.hlo_ops`), priced at its chip's calibration, the step composed as
    :class:`sharding_lab.cost.prediction.Prediction` composes it (collectives as kept, the roofline a floor)."""
    from sharding_lab.hardware.chips import chip as get_chip
    from sharding_lab.hardware.targets import parse as parse_target

    rows = []
    for program in sorted(Path(folder).glob("*.hlo.gz")):  # a kept recipe is its program and its JSON beside it
        kept = json.loads(program.with_name(program.name.removesuffix(".hlo.gz") + ".json").read_text())
        text = gzip.decompress(program.read_bytes()).decode()
        chip_id = parse_target(kept["target"]).chip
        chip = calibration.for_chip(chip_id)
        priced = calibration.price(hlo_ops.ops(text), chip, get_chip(chip_id).host_bytes_per_s, program=text)
        step = max(priced.step_s(kept["comm_s"], kept["latency_s"]), kept["step_s"])
        out = {k: kept[k] for k in ("recipe", "args", "published_mfu", "roofline_mfu", "step_s")}
        out |= {"calibrated_step_s": step, "calibrated_mfu": kept["model_flops"] / (step * kept["peak"])}
        out |= {"priced": priced.to_json(), "kept_calibrated_mfu": kept["calibrated_mfu"]}
        within(out)
        rows.append(out)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=None, help="one recipe: " + ", ".join(RECIPES))
    parser.add_argument("--json", default=None)
    parser.add_argument("--hlo", default=None, help="a folder to keep each recipe's program and figures in")
    parser.add_argument("--reprice", default=None, help="a folder --hlo wrote: price its programs again")
    args = parser.parse_args()
    if args.reprice:
        rows = reprice(args.reprice)
    else:
        rows = [check(name, args.hlo) for name in ([args.only] if args.only else RECIPES)]
    print(json.dumps(rows, indent=1, default=str))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
