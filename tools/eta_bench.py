"""Benchmark: the search's time estimate (:mod:`sharding_lab.search.eta`) against the time each question took.

    python -m tools.eta_bench                 # the five questions below, one after the other
    python -m tools.eta_bench small gpt2-v5e8 # some of them, by name
    python -m tools.eta_bench --timeout 300   # each question stopped after 300 s (its row then says so)
    python -m tools.eta_bench --keep DIR      # each question's whole output kept in DIR/<name>.txt

Each question runs as ``python -m tools.plan_bench`` (the search as the command line runs it, the default workers:
one per core) in its own process, and this prints, for each: the time it took; the estimate of the whole time the
search gave at its start, after its first ranking (the screens: the estimate the command line and the Plan page show
first) and after its first compile; and the worst ratio of any estimate given once the first ranking was out to the
time taken. A benchmark, not a test: it measures the estimate on this machine and prints what it found.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time

QUESTIONS = {
    "small": "--model transformer --target v5e-8 --batch-tokens 1024 --presets dp,fsdp,tp,fsdp_tp --remats none",
    "8layers": (
        "--model transformer --layers 8 --embed 256 --heads 4 --head-dim 64 --mlp-dim 1024 --seq 1024 "
        "--target v5e-8 --batch-tokens 32768 --presets dp,fsdp,fsdp_tp --remats full,none"
    ),
    "gpt2-v5e16": (
        "--model transformer --size gpt2-small --target v5e-16 --batch-tokens 16384 --presets fsdp,fsdp_tp "
        "--remats full,save_qkv_proj"
    ),
    "gpt2-v5e8": (
        "--model transformer --size gpt2-small --target v5e-8 --batch-tokens 8192 --presets dp,fsdp --remats full,none"
    ),
    "llama3-8b": (
        "--model transformer --size llama3-8b --seq 4096 --target v5e-256 --batch-tokens 1048576 --optimizer adamw"
    ),
}

ESTIMATE = re.compile(r"^estimate_(\w+?)_s=(\d+) \(at (\d+) s")


def run(name: str, timeout: float, keep: str | None = None) -> dict:
    """One question through ``tools.plan_bench``: its estimates (label → (seconds at, whole time said)) and the time
    it took (or None: stopped at ``timeout``)."""
    started = time.perf_counter()
    # its own process group: a question stopped at the timeout takes its compiling workers with it
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.plan_bench", *QUESTIONS[name].split()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
    if keep:  # the whole output, for replaying another rule over the same compiles
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, f"{name}.txt"), "w") as f:
            f.write(out)
    if process.returncode not in (0, -signal.SIGKILL):
        print(f"{name}: plan_bench failed ({process.returncode}): {err.strip()[-1500:]}", file=sys.stderr)
    return parse(name, out, time.perf_counter() - started)


def parse(name: str, out: str, wall: float) -> dict:
    """What ``tools.plan_bench`` printed: the time it took (None: stopped), its estimates (label → (seconds at,
    whole time said)) and how many candidates it compiled."""
    found = re.search(r"elapsed_s=([\d.]+)", out)
    estimates = {}
    for line in out.splitlines():
        m = ESTIMATE.match(line)
        if m:
            estimates[m.group(1)] = (float(m.group(3)), float(m.group(2)))
    return {
        "name": name,
        "took": float(found.group(1)) if found else None,
        "wall": wall,
        "estimates": estimates,
        "compiled": len(re.findall(r": compiled in ", out)),
    }


def ratio(estimate: float | None, took: float | None) -> str:
    if estimate is None or not took:
        return "—"
    return f"{estimate:.0f} s ({estimate / took:.2f}×)"


def row(found: dict) -> str:
    took, e = found["took"], found["estimates"]
    said = {k: v[1] for k, v in e.items()}
    after_ranking = [v for k, (at, v) in e.items() if k != "start"]
    worst = max(after_ranking, key=lambda v: max(v / took, took / v)) if took and after_ranking else None
    took_text = f"{took:.1f} s" if took else f"stopped at {found['wall']:.0f} s"
    return (
        f"| {found['name']} | {took_text} | {found['compiled']} | {ratio(said.get('start'), took)} | "
        f"{ratio(said.get('first_ranking'), took)} | {ratio(said.get('first_compile'), took)} | "
        f"{ratio(worst, took)} |"
    )


COMPILED = re.compile(r"^\s+([\d.]+) s\s+\[\d+/\d+\].*: compiled in ([\d.]+) s", re.M)
FLOORED = re.compile(r"^\s+([\d.]+) s\s+\[\d+/\d+\].*: fits, answered at its memory check(?: in ([\d.]+) s)?")
TIMELINE = re.compile(r"(\w+) sent ([\d.]+) checked ([\d.]+|—) answered ([\d.]+|—)")


def answered(out: str) -> list[tuple[str, str, bool]]:
    """Each candidate the compiler answered, in order: (seconds from the start, seconds its compiles took, whether at
    its memory check: refused there, or answered there — its compiles' time as the bench printed it, or in an output
    from before it did from its timeline, each compile to its check — or compiled to the end)."""
    lines, events = out.splitlines(), []
    for k, line in enumerate(lines):
        whole, floored = COMPILED.match(line), FLOORED.match(line)
        if whole:
            events.append((*whole.groups(), "refused)" in line))
        elif floored and k + 1 < len(lines):
            at = float(floored.group(1))
            spans = [(float(s), None if c == "—" else float(c)) for _, s, c, _ in TIMELINE.findall(lines[k + 1])]
            took = sum((c or at) - s for s, c in spans)  # parked or generating, not told apart: to the check
            events.append((floored.group(1), floored.group(2) or f"{took:.1f}", True))
    return events


def replay(name: str, out: str, cores: int) -> dict:
    """Today's rule (:mod:`sharding_lab.search.eta`) over a kept output's compiles, as if it had said its estimates
    then: after the first ranking and after each compile, on a machine of ``cores`` (the workers: one per core, one
    for a small model) — for another rule judged on the same compiles. The start is left out (it needs the
    question's layouts only, which the output does not hold)."""
    from sharding_lab import search
    from sharding_lab.search import eta
    from sharding_lab.search.search import compile_workers
    from sharding_lab.training.options import config_from_args
    from tools.plan_bench import bench_parser

    args = bench_parser().parse_args(QUESTIONS[name].split())
    config = config_from_args(args)
    base = search.base_config(config.model, config.on, args.batch_tokens, config.optimizer, config.lr)
    presets = tuple(args.presets.split(",")) if args.presets else None
    remats = tuple(args.remats.split(",")) if args.remats else None
    _, variants = eta.question(base, presets, remats)
    parameters = base.family.parameter_count(base.model)
    workers = compile_workers(base, None, cores)  # the workers the search gave itself on that machine
    floored = eta.floors(base, remats, workers) and "floor" in out  # a run before floors priced every step
    ranked = re.search(r"first_ranking_s=([\d.]+) ranked=(\d+)", out)
    began, layouts = float(ranked.group(1)), int(ranked.group(2))
    to_compile = eta.to_compile(None, layouts, 0, variants=variants)
    events = answered(out)
    found = parse(name, out, float(events[-1][0]) if events else began)
    found["estimates"] = {}

    def said(label, at, compiled, compile_s, checked=(0, 0.0)):
        left = eta.Progress(parameters, to_compile, compiled, compile_s, workers, cores, at - began, floored, *checked)
        found["estimates"][label] = (at, at + left.seconds_left)

    said("first_ranking", began, 0, 0.0)
    total, checked, checked_s = 0.0, 0, 0.0
    for k, (at, compile_s, at_check) in enumerate(events, 1):
        total += float(compile_s)
        checked, checked_s = checked + at_check, checked_s + (float(compile_s) if at_check else 0.0)
        said("first_compile" if k == 1 else f"after_compile_{k}", float(at), k, total, (checked, checked_s))
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.eta_bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"questions to run (default all): {', '.join(QUESTIONS)}")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a question may run (default 900)")
    parser.add_argument("--keep", metavar="DIR", help="write each question's plan_bench output to DIR/<name>.txt")
    parser.add_argument("--replay", metavar="DIR", help="no run: today's rule over the outputs kept in DIR")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="the replayed machine's cores")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in QUESTIONS]
    if unknown:
        parser.error(f"no question named {', '.join(unknown)}: choose from {', '.join(QUESTIONS)}")
    print("| question | took | compiled | at the start | after the first ranking | after the first compile | worst |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    for name in args.names or QUESTIONS:
        if args.replay:
            kept = os.path.join(args.replay, f"{name}.txt")
            if os.path.exists(kept):
                with open(kept) as f:
                    print(row(replay(name, f.read(), args.cores)), flush=True)
            continue
        print(row(run(name, args.timeout, args.keep)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
