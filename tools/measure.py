"""What the chip checks share (tools/h200_check.py, tools/tpu_check.py): a config from CLI words, the
analysed step run on real arrays and timed, the compiler's memory figures, Markdown tables."""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp

import sharding_lab as sl
from sharding_lab.sharding import mesh as mesh_module
from sharding_lab.training.options import add_config_options, config_from_args
from sharding_lab.training.step import step_program


def config_of(argv: list[str]) -> sl.LabConfig:
    parser = argparse.ArgumentParser()
    add_config_options(parser)
    return config_from_args(parser.parse_args(argv))


def use_platform(name: str) -> None:
    """Lay meshes on ``name``'s devices from now on (the mesh cache remembers the last platform's)."""
    os.environ["SHARDING_LAB_PLATFORM"] = name
    mesh_module.build_mesh.cache_clear()
    mesh_module.device_grid.cache_clear()


def materialize(abstract):
    """Real arrays with the abstract ones' shapes, dtypes and shardings (small random floats; ints 0)."""

    def make(leaf, key):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            value = jax.random.normal(key, leaf.shape, jnp.float32).astype(leaf.dtype) * 0.01
        else:
            value = jnp.zeros(leaf.shape, leaf.dtype)
        return jax.device_put(value, leaf.sharding)

    leaves, tree = jax.tree.flatten(abstract)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    return jax.tree.unflatten(tree, [make(leaf, k) for leaf, k in zip(leaves, keys)])


def median_call_s(step, state, x, y, repeats: int) -> float:
    """Median seconds of ``step(state, x, y)`` on real arrays made like the abstract ones, blocking on every
    call; the first call (compile, warm-up) is not counted. The state is donated and threaded through."""
    live, xs, ys = materialize(state), materialize(x), materialize(y)
    live, loss = step(live, xs, ys)
    loss.block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        live, loss = step(live, xs, ys)
        loss.block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_step(config: sl.LabConfig, dtype: str, repeats: int) -> float:
    """Median seconds of the analysed step on this platform's device, blocking on every call."""
    plan = sl.plan(config)
    step, state, x, y = step_program(plan, dtype)
    with jax.set_mesh(plan.mesh):
        return median_call_s(step, state, x, y, repeats)


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [
        f"**{title}**",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |",
    ]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def gb(n: float) -> str:
    return f"{n / 1e9:,.3f} GB"


def memory(compiled) -> dict[str, int]:
    m = compiled.memory_analysis()
    return {
        "argument": m.argument_size_in_bytes,
        "output": m.output_size_in_bytes,
        "temp": m.temp_size_in_bytes,
        "alias": m.alias_size_in_bytes,
    }
