"""``python -m tools.plan_bench --against COMMIT`` / ``--device-run``: the search timed on this checkout and on an
earlier commit, one after the other in the same run, each as a user runs it (``sharding-lab plan --json``, the
default workers), with the ratio of their candidates per second and each one's best row (a speed-up must not move
it; a commit that changed the model or the cost may)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(commit: str, into: Path) -> Path:
    """``sharding_lab`` as it stood at ``commit``, written under ``into`` (``git archive``: no checkout touched)."""
    archive = into / "tree.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", commit, "sharding_lab"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def timed(tree: Path, plan_args: list[str]) -> dict:
    """One ``plan --json`` run from ``tree`` (its ``sharding_lab`` the one imported): wall time, CPU time of it and
    its workers, the answer."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    started, cpu = time.perf_counter(), os.times()
    done = subprocess.run(  # run from the tree: `-m` puts the working folder first on the import path
        [sys.executable, "-m", "sharding_lab", "plan", *plan_args, "--json"],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
    )
    wall, after = time.perf_counter() - started, os.times()
    if done.returncode:
        raise SystemExit(f"plan failed on {tree} ({done.returncode}): {done.stderr.strip()[-2000:]}")
    answer = json.loads(done.stdout)
    cpu_s = (after.children_user - cpu.children_user) + (after.children_system - cpu.children_system)
    return {"wall_s": wall, "cpu_s": cpu_s, "answer": answer}


def best_row(answer: dict) -> str:
    best = answer.get("best")
    if best is None:
        return "no layout fits"
    return (
        f"{best['mesh']} ({','.join(best['axes'])}) {best['preset']} remat {best['remat']}"
        + (f" attention {best['attention']}" if best.get("attention") else "")
        + f": step {best['step_s']!r} s, {best['hbm_per_chip']!r} B per chip, fits {best['fits']}"
    )


def rate(run: dict) -> float:
    answer = run["answer"]
    return (len(answer["candidates"]) + sum(answer["skipped"].values())) / run["wall_s"]


def line(name: str, run: dict) -> str:
    answer = run["answer"]
    return (
        f"{name}: wall_s={run['wall_s']:.1f} cpu_s={run['cpu_s']:.1f} compiled={len(answer['candidates'])} "
        f"candidates_per_s={rate(run):.3f}\n  best: {best_row(answer)}"
    )


def compare(argv: list[str]) -> int:
    args = list(argv)
    device = "--device-run" in args
    against = None
    if "--against" in args:
        at = args.index("--against")
        against = args[at + 1]
        del args[at : at + 2]
    args = [a for a in args if a not in ("--device-run", "--first-only")]
    print(f"cores={os.cpu_count()} load={os.getloadavg()[0]:.1f} question: plan {' '.join(args)}", flush=True)
    here = timed(ROOT, args)
    print(line("this checkout", here), flush=True)
    if device or against is None:
        return 0
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as folder:
        old = timed(export(against, Path(folder)), args)
    print(line(against, old), flush=True)
    same = best_row(here["answer"]) == best_row(old["answer"])
    print(
        f"speed-up (candidates per second, this checkout ÷ {against}): "
        f"{rate(here) / rate(old):.2f}x; best row {'the same' if same else 'different'} "
        f"load={os.getloadavg()[0]:.1f}"
    )
    if not same:  # a change meant to be behaviour-neutral must keep it; across the cost model's changes it moves
        print("the best rows differ: between commits that changed the cost or the model, expected; else a bug")
    return 0
