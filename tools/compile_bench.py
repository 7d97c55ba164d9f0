"""Compile seconds per default layout at XLA's default settings ("old") and at the lab's (``new``), in one run.

    python -m tools.compile_bench [--family mlp] [--family transformer] [--repeat 1]

XLA reads ``XLA_FLAGS`` once per process, so each setting is measured in a child process of its own
(``SHARDING_LAB_FAST_COMPILE=off`` and ``XLA_FLAGS`` without the lab's flags: old; the lab's default: new), the
two run one after the other, never at once. For every preset of each model family on the default 2×4 mesh a
child lowers and compiles the two programs a class makes XLA:CPU compile: the trainer's chunk (100 steps in a
``lax.scan``: what Train runs) and the one step the compile-only views read (Communication, Compare). It
prints CPU seconds (all threads; steadier than wall time on a shared machine) and wall seconds per layout,
and the ratio old/new; the ratio is the result, absolute figures move with the machine's load.

``--numbers FILE`` (one setting, in this process) instead trains each layout ``--steps`` steps and writes every
loss and every final parameter to ``FILE`` (``.npz``): tests/core/test_compile_settings.py compares the two
settings' files bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

DEFAULT_MESH = (2, 4)


def layouts(families: list[str], presets: list[str] | None = None) -> list:
    """Each family's defaults under each of its presets on the default mesh (the ones that bind there)."""
    from sharding_lab.models import FAMILIES
    from sharding_lab.server.warm import default_config

    out = []
    for name in families:
        for preset in presets or FAMILIES[name].presets:
            if ":" in preset:  # family:preset names one family's preset
                if preset.split(":")[0] != name:
                    continue
                preset = preset.split(":", 1)[1]
            config = default_config(name, DEFAULT_MESH, preset)
            if config is not None:
                out.append(config)
    return out


def whole(a, sharding):
    """``a``'s shape and dtype, laid out as ``sharding`` (an abstract argument: nothing allocated)."""
    import jax

    return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(compile_) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu_seconds()
    compile_()
    return time.perf_counter() - wall, _cpu_seconds() - cpu


def measure(configs) -> dict:
    """layout name → {program: [wall s, cpu s]} for the trainer's chunk and the compile-only step."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from sharding_lab.training.config import plan as make_plan
    from sharding_lab.training.step import abstract_state, lower_train_step
    from sharding_lab.training.trainer import build_chunk_program

    out = {}
    for config in configs:
        plan = make_plan(config)
        _, state = abstract_state(plan)
        x, y = config.family.make_dataset(config.model, config.seed)
        everywhere = NamedSharding(plan.mesh, P())

        chunk = build_chunk_program(plan, config.chunk)
        with jax.set_mesh(plan.mesh):
            lowered = chunk.lower(
                state, jax.random.key(0), jnp.int32(0), jnp.int32(1), whole(x, everywhere), whole(y, everywhere)
            )
        step = lower_train_step(plan)
        out[f"{config.family.name} {config.preset}"] = {"chunk": _timed(lowered.compile), "step": _timed(step.compile)}
    return out


def numbers(configs, steps: int, path: str) -> None:
    """Train each layout ``steps`` steps; save its losses and final parameters and optimizer state."""
    import jax
    import numpy as np

    from sharding_lab.training.trainer import Lab, Trainer

    arrays = {}
    for config in configs:
        lab = Lab(config)
        result = Trainer(lab, steps=steps).run()
        name = f"{config.family.name}_{config.preset}"
        arrays[f"{name}/losses"] = np.asarray(result.losses)
        for i, leaf in enumerate(jax.tree.leaves(lab.state)):
            arrays[f"{name}/state{i}"] = np.asarray(leaf)
    np.savez(path, **arrays)


def child_env(setting: str) -> dict:
    """The environment of a child measuring ``setting`` ("old": XLA's defaults; "new": the lab's)."""
    from sharding_lab.hardware.devices import FAST_COMPILE_FLAGS

    names = {flag.split("=", 1)[0] for flag in FAST_COMPILE_FLAGS}
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if f.split("=", 1)[0] not in names]
    kept = [f for f in kept if not f.startswith("--xla_force_host_platform_device_count")]
    env = {**os.environ, "XLA_FLAGS": " ".join(kept), "SHARDING_LAB_CACHE_DIR": "off"}
    env["SHARDING_LAB_FAST_COMPILE"] = "off" if setting == "old" else "on"
    return env


def run_child(setting: str, args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "tools.compile_bench", *args], env=child_env(setting), check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compile_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", choices=["mlp", "transformer"], help="default: both")
    parser.add_argument(
        "--preset", action="append", help="default: every preset of the family (family:preset: that family's only)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of old, new (alternating)")
    parser.add_argument("--numbers", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=100, help=argparse.SUPPRESS)
    parser.add_argument("--measure", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    families = args.family or ["mlp", "transformer"]
    pick = [f"--family={f}" for f in families] + [f"--preset={p}" for p in args.preset or []]
    if args.numbers or args.measure:  # a child: this process's XLA_FLAGS are the setting measured
        import sharding_lab  # noqa: F401  (the host devices and the compile settings, before JAX starts)

        configs = layouts(families, args.preset)
        if args.numbers:
            numbers(configs, args.steps, args.numbers)
        else:
            with open(args.measure, "w") as out:
                json.dump(measure(configs), out)
        return 0
    import sharding_lab  # noqa: F401

    results: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.repeat):
            for setting in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                path = os.path.join(folder, f"{setting}{round_}.json")
                run_child(setting, [*pick, f"--measure={path}"])
                with open(path) as f:
                    results[setting].append(json.load(f))
    from sharding_lab.hardware.devices import FAST_COMPILE_FLAGS

    print(f"old: XLA's defaults; new: {' '.join(FAST_COMPILE_FLAGS)}; best of {args.repeat} round(s); seconds")
    print(f"{'layout':<24}{'program':<8}{'old cpu':>9}{'new cpu':>9}{'ratio':>7}{'old wall':>10}{'new wall':>10}")
    totals = {"old": [0.0, 0.0], "new": [0.0, 0.0]}
    for layout in results["old"][0]:
        for program in ("chunk", "step"):
            best = {s: min((r[layout][program] for r in results[s]), key=lambda t: t[1]) for s in results}
            for s in totals:
                totals[s][0] += best[s][0]
                totals[s][1] += best[s][1]
            print(
                f"{layout:<24}{program:<8}{best['old'][1]:>9.2f}{best['new'][1]:>9.2f}"
                f"{best['old'][1] / best['new'][1]:>7.2f}{best['old'][0]:>10.2f}{best['new'][0]:>10.2f}"
            )
    (old_wall, old_cpu), (new_wall, new_cpu) = totals["old"], totals["new"]
    print(f"{'total':<32}{old_cpu:>9.2f}{new_cpu:>9.2f}{old_cpu / new_cpu:>7.2f}{old_wall:>10.2f}{new_wall:>10.2f}")
    print(f"ratio old/new: cpu {old_cpu / new_cpu:.2f}x, wall {old_wall / new_wall:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
