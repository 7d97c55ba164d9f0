"""Measured beside predicted, on one H200 (or any GPU): run once, in one go, on a machine that has it.

    pip install -r requirements-cuda.txt
    SHARDING_LAB_PLATFORM=gpu python -m tools.h200_check            # prints a Markdown table
    SHARDING_LAB_PLATFORM=cpu python -m tools.h200_check --quick     # a dry run of the script itself

For each configuration (1-device meshes: one GPU) it compiles the trainer's step in bf16 exactly as
``sharding_lab.cost`` does (float state and batch cast to bf16), runs it on real arrays — blocking on
every call — and reports the median step time next to the roofline prediction for ``--chip``
(default h200). It also runs the trainer itself (f32, as the app trains) for its steps/s. Paste the
table into README.md ("What it costs on real chips"), replacing the pending row.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

import sharding_lab as sl
from sharding_lab import cost
from sharding_lab.training import Lab, Trainer, abstract_state, batch_shardings, make_train_step, output_shardings

CONFIGS = [  # (din, width, dout, hidden layers, batch)
    (1024, 1024, 1024, 2, 4096),
    (4096, 4096, 4096, 2, 8192),
    (8192, 8192, 8192, 1, 16384),
]
QUICK = [(64, 256, 64, 1, 256)]


def materialize(abstract):
    """Real arrays with the abstract ones' shapes, dtypes and shardings (small random floats)."""
    def make(leaf, key):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            value = jax.random.normal(key, leaf.shape, jnp.float32).astype(leaf.dtype) * 0.01
        else:
            value = jnp.zeros(leaf.shape, leaf.dtype)
        return jax.device_put(value, leaf.sharding)
    leaves, tree = jax.tree.flatten(abstract)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    return jax.tree.unflatten(tree, [make(leaf, k) for leaf, k in zip(leaves, keys)])


def measure_bf16_step(config: sl.LabConfig, repeats: int) -> float:
    plan = sl.plan(config)
    graphdef, state = abstract_state(plan)
    cast = lambda s: jax.ShapeDtypeStruct(s.shape, jnp.bfloat16 if jnp.issubdtype(s.dtype, jnp.floating)
                                          else s.dtype, sharding=s.sharding)
    state = jax.tree.map(cast, state)
    sx, sy = batch_shardings(plan)
    x = jax.ShapeDtypeStruct(plan.arrays["batch/x"].shape, jnp.bfloat16, sharding=sx)
    y = jax.ShapeDtypeStruct(plan.arrays["batch/y"].shape, jnp.bfloat16, sharding=sy)
    step = jax.jit(make_train_step(plan, graphdef), out_shardings=output_shardings(plan, state), donate_argnums=0)
    with jax.set_mesh(plan.mesh):
        live, xs, ys = materialize(state), materialize(x), materialize(y)
        live, loss = step(live, xs, ys)  # compile + warm up
        loss.block_until_ready()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            live, loss = step(live, xs, ys)
            loss.block_until_ready()  # block on every call (see the notes on in-flight collectives)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chip", default="h200")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="one tiny config, few repeats (a dry run)")
    args = parser.parse_args()
    info = sl.device_info()
    print(f"devices: {info.describe()}; jax {jax.__version__}")
    print(f"| config (din-width-dout, layers, batch) | predicted {args.chip} bf16 step | bound | measured bf16 step "
          "| measured ÷ predicted | trainer f32 steps/s |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for din, width, dout, layers, batch in (QUICK if args.quick else CONFIGS):
        config = sl.LabConfig(mesh=sl.MeshSpec((1,), ("data",)), preset="dp",
                              model=sl.ModelSpec(din, width, dout, layers), batch_size=batch,
                              steps=200 if args.quick else 1000, chunk=100, optimizer="seed-sgd")
        predicted = cost.predict(config, args.chip, "bf16")
        measured = measure_bf16_step(config, 3 if args.quick else args.repeats)
        result = Trainer(Lab(config)).run()
        print(f"| {din}-{width}-{dout}, {layers}, {batch} | {predicted.step_s * 1e6:,.1f} µs | {predicted.bound} "
              f"| {measured * 1e6:,.1f} µs | {measured / predicted.step_s:.2f} | {result.steps_per_s:,.0f} |")


if __name__ == "__main__":
    main()
