"""Benchmark: how many candidates per second the search (``python -m sharding_lab plan``) gets through.

    python -m tools.plan_bench [plan options]      # default: llama3-8b on v5e-256, 1M tokens, seq 4096, adamw

Runs the search once in this process (nothing cached yet) and prints, per candidate, whether it was skipped
before compiling or compiled (and how long its compiles took), then ``candidates_per_s=<n>``: every
candidate counted, skipped or compiled, over the whole wall time. A benchmark, not a test: the figure
moves with the machine's load and cores. ``--workers N`` (default: one per core) compiles N at once;
``--first-only`` stops after the first ranking (the book's count for every screened candidate,
:mod:`sharding_lab.search.first`) and prints how long it took.

Against an earlier commit, in the same run (the machine is shared and its load moves: a ratio measured side by
side holds where two figures taken an hour apart do not):

    python -m tools.plan_bench --against 5e2778d [plan options]

runs ``sharding-lab plan --json`` on this checkout and then on the commit (its ``sharding_lab`` exported from
git into a temporary folder, imported through ``PYTHONPATH``), and prints each one's wall time, candidates per
second and best row, then their ratio. ``--device-run`` runs the question on this checkout only (a machine
without the repository's history: the TPU machine's 13 cores) and prints the same lines.

Measured (the default command): before any speed-up (every candidate at 1 and 2 layers, one process) 1884 s,
0.062 candidates/s; with the screens, the twin rule and 2 workers 398.5 s (2026-12-04, shared machine); with
remat full compiled at full depth and every compile watched to the compiler's memory check
(``sharding_lab.search.pool``) the ``plan --json`` run took 414.5 s, 0.475 candidates/s, on the idle
machine (2026-12-05; the same run before it: 842 s). With a loop over layers compiled once (no second compile
unrolled by 2) the default question took 358.1 s on the TPU machine's 13 cores, 339.6 s once idle workers start
steps before their twins' checks (docs/measurements.md): what is left is code generation of the programs that
pass the compiler's memory check, 2–3 times slower each with 13 side by side.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from sharding_lab import search
from sharding_lab.search import eta
from sharding_lab.search.search import compile_workers
from sharding_lab.training.options import add_config_options, config_from_args

DEFAULT = [
    "--model",
    "transformer",
    "--size",
    "llama3-8b",
    "--seq",
    "4096",
    "--target",
    "v5e-256",
    "--batch-tokens",
    "1048576",
    "--optimizer",
    "adamw",
]


def bench_parser() -> argparse.ArgumentParser:
    """The bench's options: a question as ``sharding-lab plan`` takes it, and the bench's own."""
    parser = argparse.ArgumentParser(prog="python -m tools.plan_bench")
    add_config_options(parser)
    parser.add_argument("--batch-tokens", type=int, required=True)
    parser.add_argument("--dtype", default="mixed")
    parser.add_argument("--presets", default=None)
    parser.add_argument("--remats", default=None)
    parser.add_argument("--workers", type=int, default=None, help="processes compiling at once (default: the cores)")
    parser.add_argument("--attentions", default=None, help="attention kinds searched, comma-separated")
    parser.add_argument(
        "--price-every-fit",
        action="store_true",
        help="compile every step that fits to the end (the search before it priced a step's program at its memory "
        "check)",
    )
    parser.add_argument(
        "--first-only",
        action="store_true",
        help="stop once the first ranking (the book's count, before any compile) is out; print its time",
    )
    return parser


def timeline_text(timeline: dict, started: float) -> str:
    """A candidate's compiles in the pool (kind → [sent, memory check passed, answered], perf_counter seconds), in
    seconds since the bench started: where the workers waited shows between one compile's answer and the next's
    start."""

    def at(t):
        return "—" if t is None else f"{t - started:.1f}"

    return "; ".join(
        f"{kind} sent {at(sent)} checked {at(checked)} answered {at(answered)}"
        for kind, (sent, checked, answered) in sorted(timeline.items(), key=lambda kv: kv[1][0] or 0.0)
    )


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a in argv for a in ("--model", "--size", "--target")):  # only options of the bench: the default
        argv = DEFAULT + argv
    if "--against" in argv or "--device-run" in argv:
        from tools.plan_compare import compare

        return compare(argv)
    args = bench_parser().parse_args(argv)
    config = config_from_args(args)
    base = search.base_config(config.model, config.on, args.batch_tokens, config.optimizer, config.lr)
    presets = tuple(args.presets.split(",")) if args.presets else None
    remats = tuple(args.remats.split(",")) if args.remats else None
    started = time.perf_counter()
    parameters, at_once = base.family.parameter_count(base.model), compile_workers(base, args.workers)
    seen = {"compiled": 0, "compile_s": 0.0, "checked": 0, "checked_s": 0.0, "ranked": None, "began": None}

    def estimate(label: str) -> None:
        """The search's own estimate of its whole time (search.eta), as the CLI and the Plan page give it."""
        ranked = seen["ranked"] if seen["ranked"] is not None else layouts
        to_compile = eta.to_compile(None, ranked, 0, variants=variants)
        elapsed = time.perf_counter() - started
        began = seen["began"]
        wall = elapsed - began if began is not None else 0.0
        left = eta.Progress(
            parameters,
            to_compile,
            seen["compiled"],
            seen["compile_s"],
            at_once,
            wall_s=wall,
            floors=not args.price_every_fit and eta.floors(base, remats, at_once),
            checked=seen["checked"],
            checked_s=seen["checked_s"],
        )
        print(
            f"estimate_{label}_s={elapsed + left.seconds_left:.0f} (at {elapsed:.0f} s, from {left.basis})", flush=True
        )

    attentions = tuple(args.attentions.split(",")) if args.attentions else None
    layouts, variants = eta.question(base, presets, remats, attentions)
    estimate("start")

    def progress(done, total, result):
        c = result.candidate
        if result.at_memory_check:
            seen["checked"] += 1
            seen["checked_s"] += result.compile_s
        if result.compiled:
            seen["compiled"] += 1
            seen["compile_s"] += result.compile_s
            estimate("first_compile" if seen["compiled"] == 1 else f"after_compile_{seen['compiled']}")
        depth = "+".join(map(str, result.compiled_layers))
        what = (
            f"fits, answered at its memory check in {result.compile_s:.1f} s: {result.detail}"
            if result.skipped == search.SKIP_FLOOR
            else f"skipped: {result.skipped}"
            if result.skipped
            else f"compiled in {result.compile_s:.1f} s ({depth} layers; "
            + ("refused" if result.refused else "fits" if result.fits else "does not fit")
            + (f"; step {result.step_s!r} s, floor {result.step_floor_s!r} s" if result.step_s is not None else "")
            + ")"
        )
        print(
            f"{time.perf_counter() - started:8.1f} s  [{done}/{total}] "
            f"{c.mesh_text} {c.preset} remat {c.remat}: {what}",
            flush=True,
        )
        if getattr(result, "timeline", None):  # in workers: each compile's start, memory check and answer
            print(f"{'':14}timeline: {timeline_text(result.timeline, started)}", flush=True)

    stop = threading.Event()

    def first(ranked, seconds):
        print(f"first_ranking_s={seconds:.1f} ranked={len(ranked)}", flush=True)
        seen["ranked"] = len(ranked)
        seen["began"] = time.perf_counter() - started  # the compiles begin once the first ranking is out
        estimate("first_ranking")
        print(search.first_table(ranked, seconds, rows=5), flush=True)
        if args.first_only:
            stop.set()

    found = search.search(
        base,
        args.dtype,
        presets,
        remats,
        progress,
        stop,
        check=False,
        workers=args.workers,
        attentions=attentions,
        first=first,
        price_every_fit=args.price_every_fit,
    )
    elapsed = time.perf_counter() - started
    floored = found.floored
    best = found.best
    print(
        f"candidates={len(found.results)} compiled={len(found.costed)} "
        f"fitting={len(found.fitting) + len(floored)} floored={len(floored)} elapsed_s={elapsed:.1f}"
    )
    if best is not None:
        print(f"best={search.label(best.candidate)} step_s={best.step_s!r} hbm_per_chip={best.hbm_per_chip!r}")
    print(f"candidates_per_s={len(found.results) / elapsed:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
