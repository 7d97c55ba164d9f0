"""MaxText's published recipes against `cost` (issue 46's acceptance): each recipe's model, mesh, remat, attention and
global batch, compiled for its slice without the chips, and the predicted MFU beside the MFU MaxText measured.

    python -m tools.recipes_check [--only 16b] [--json out.json]

Each compile takes 15–30 minutes on a loaded 2-core machine (256 devices; a remat step compiles its loop once, and
again unrolled by 2 to count its collectives per block), so this is run by hand, not by the suite;
docs/plan-physics.md has what it printed.
"""

from __future__ import annotations

import argparse
import json

from sharding_lab import cost
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


def check(name: str) -> dict:
    args, published, source = RECIPES[name]
    config = config_of((COMMON + " " + args).split())
    p = cost.predict(config, None, "mixed")
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
    for key in ("roofline_mfu", "calibrated_mfu"):
        value = out[key]
        out[key + "_within_25%"] = None if value is None else abs(value / published - 1) <= 0.25
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=None, help="one recipe: " + ", ".join(RECIPES))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = [check(name) for name in ([args.only] if args.only else RECIPES)]
    print(json.dumps(rows, indent=1, default=str))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
