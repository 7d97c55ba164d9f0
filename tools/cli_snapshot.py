"""Run the README's CLI examples and write (or compare) their JSON output.

Why: a refactor that moves modules must not change what the command line answers. Run it before
(`--write FILE`) and after (`--check FILE`): it prints every example whose answer changed.

    python -m tools.cli_snapshot --write /tmp/before.json
    python -m tools.cli_snapshot --check /tmp/before.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

EXAMPLES = [
    "layout --mesh 2x4 --axes data,model --preset seed --json",
    "layout --mesh 2x4 --preset fsdp --json",
    "train --mesh 2x4 --axes data,model --preset seed --steps 60 --json",
    "train --mesh 8 --preset none --rule data=data --rule mlp=data --override w2=data:none --steps 60 --json",
    "comm --mesh 8x1 --preset fsdp --json",
    "comm --model transformer --preset pp --mesh 4x2 --axes stage,data --layers 4 --microbatches 8 --json",
    "comm --model transformer --preset ep --mesh 2x4 --axes data,expert --experts 8 --json",
    "comm --target v5e-8 --mesh 2x4 --axes data,model --preset seed --json",
    "cost --target v5p-8 --mesh 4 --axes data --preset dp --json",
    "challenge list --json",
    "challenge check halve-dp --preset fsdp_tp --json",
]


# Wall-clock figures differ from run to run; everything else must not.
TIMINGS = {"steps_per_s", "compile_s"}


def without_timings(answer: object) -> object:
    if isinstance(answer, dict):
        return {k: without_timings(v) for k, v in answer.items() if k not in TIMINGS}
    if isinstance(answer, list):
        return [without_timings(v) for v in answer]
    return answer


def run(example: str) -> object:
    done = subprocess.run([sys.executable, "-m", "sharding_lab", *example.split()], capture_output=True, text=True)
    try:
        return without_timings(json.loads(done.stdout))
    except json.JSONDecodeError:
        return {"exit": done.returncode, "stdout": done.stdout[-2000:], "stderr": done.stderr[-2000:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="FILE")
    group.add_argument("--check", metavar="FILE")
    args = parser.parse_args()
    answers = {example: run(example) for example in EXAMPLES}
    if args.write:
        with open(args.write, "w") as f:
            json.dump(answers, f, indent=1, sort_keys=True)
        print(f"wrote {len(answers)} answers to {args.write}")
        return 0
    with open(args.check) as f:
        before = json.load(f)
    changed = [example for example in EXAMPLES if without_timings(before.get(example)) != answers[example]]
    for example in changed:
        print(f"changed: {example}")
    print(f"{len(EXAMPLES) - len(changed)} of {len(EXAMPLES)} answers unchanged")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
