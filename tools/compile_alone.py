"""Benchmark: how long one search candidate's compile takes on this machine with nothing beside it — the anchors
of the search's time estimate (:data:`sharding_lab.search.eta.ANCHORS`).

    python -m tools.compile_alone             # the three anchors, one after the other, in one process each
    python -m tools.compile_alone small gpt2  # some of them

Each runs in a fresh process (nothing cached; warmed by one small compile first, as a search's workers are) as a
search's worker runs it (``search.costing.compile_job``: remat
full compiled as its loop runs, a step without remat as ``cost`` compiles it) and prints its wall time and CPU
time. A benchmark, not a test: the figures are this machine's, at its load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

# name → (model size, target, batch tokens, mesh, preset, remat): the estimate's anchors
ANCHORS = {
    "small": ("default", "v5e-8", 1024, (8,), "fsdp", "none"),
    "gpt2": ("gpt2-small", "v5e-8", 8192, (8,), "fsdp", "full"),
    "llama3-8b": ("llama3-8b", "v5e-256", 1_048_576, (256,), "fsdp", "full"),
}

ONE = """
import dataclasses, json, os, sys, time
import sharding_lab as sl
from sharding_lab.hardware import targets
from sharding_lab.models import family
from sharding_lab.search.candidates import base_config
from sharding_lab.search.costing import compile_job, first_jobs

size, target, tokens, mesh, preset, remat = json.loads(sys.argv[1])
fam = family("transformer")
spec = dataclasses.replace(fam.named_spec(size), remat=remat)
if size == "llama3-8b":
    spec = dataclasses.replace(spec, seq=4096)
on = targets.parse(target)
base = base_config(spec, on, tokens)
axes = ("data", "model")[: len(mesh)]
config = dataclasses.replace(base, mesh=sl.MeshSpec(tuple(mesh), axes), preset=preset)
kind = first_jobs(config)[0]
kind = "whole" if kind.startswith("probe") else kind
# warm: the process's first compile also starts the compiler (seconds); a search's workers are past that
small = dataclasses.replace(
    base_config(fam.named_spec("default"), targets.parse("v5e-8"), 1024), mesh=sl.MeshSpec((8,), ("data",)),
    preset="dp",
)
compile_job("whole", small, "mixed")
wall, cpu = time.perf_counter(), time.process_time()
compiled = compile_job(kind, config, "mixed")
print(json.dumps({"kind": kind, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "compile_s": compiled.compile_s, "parameters": fam.parameter_count(spec),
                  "refused": bool(compiled.refused)}))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compile_alone", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"anchors to time (default all): {', '.join(ANCHORS)}")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in ANCHORS]
    if unknown:
        parser.error(f"no anchor named {', '.join(unknown)}: choose from {', '.join(ANCHORS)}")
    for name in args.names or ANCHORS:
        done = subprocess.run(
            [sys.executable, "-c", ONE, json.dumps(ANCHORS[name])], capture_output=True, text=True, check=False
        )
        if done.returncode:
            print(f"{name}: failed: {done.stderr.strip()[-1500:]}", flush=True)
            continue
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"{name}: {figures['parameters']:,} parameters, {figures['kind']} compile {figures['compile_s']:.1f} s "
            f"(wall {figures['wall_s']:.1f} s, CPU {figures['cpu_s']:.1f} s)"
            + (" refused" if figures["refused"] else ""),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
