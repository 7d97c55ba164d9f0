"""Benchmark: the seed's step-by-step loop against the chunked trainer, same config, one process.

    python -m tools.bench [--mesh 2x4 --axes data,model --preset seed --steps 3000]

Both are compiled first; then each runs the same number of steps and we print steps/s and, last,
``speedup=<trainer/seed>``. Absolute numbers move with the machine's load; the ratio is the result.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np
from flax import nnx

from sharding_lab.training import options
from sharding_lab.training.trainer import Lab, Trainer


def seed_loop(lab: Lab, steps: int) -> float:
    """The seed's loop: numpy batch, ``device_put`` split on data, jitted step, ``float(loss)``."""
    model, optimizer = nnx.merge(lab.graphdef, lab.state)
    x_all, y_all = lab.x_host, lab.y_host  # the family's dataset, as the trainer samples it
    batch_sharding = jax.sharding.NamedSharding(lab.plan.mesh, lab.plan.spec("batch/x"))
    rng = np.random.default_rng(lab.config.seed)

    @nnx.jit
    def train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lab.config.family.loss)(model, x, y)
        optimizer.update(model, grads)
        return loss

    def run(n):
        for _ in range(n):
            idx = rng.choice(len(x_all), size=lab.config.batch_size)
            x, y = jax.device_put((x_all[idx], y_all[idx]), batch_sharding)
            float(train_step(model, optimizer, x, y))

    with jax.set_mesh(lab.plan.mesh):
        run(5)  # compile
        start = time.perf_counter()
        run(steps)
        return steps / (time.perf_counter() - start)


def trainer_speed(lab: Lab, steps: int) -> float:
    trainer = Trainer(lab, steps=steps)
    Trainer(lab, steps=trainer.chunk, chunk=trainer.chunk).run()  # compile the same program
    return trainer.run().steps_per_s


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n")[0])
    options.add_config_options(parser)
    parser.add_argument("--repeats", type=int, default=3, help="alternate runs of each; medians are printed")
    args = parser.parse_args(argv)
    config = options.config_from_args(args)
    lab = Lab(config)
    seed, fused = [], []
    for _ in range(args.repeats):
        seed.append(seed_loop(lab, config.steps))
        fused.append(trainer_speed(lab, config.steps))
    seed_s, fused_s = float(np.median(seed)), float(np.median(fused))
    print(
        f"config: {config.mesh.label()} preset={config.preset} optimizer={config.optimizer} "
        f"steps={config.steps} chunk={config.chunk} devices={len(jax.devices())}"
    )
    print(f"seed loop: {seed_s:9.0f} steps/s   (runs: {', '.join(f'{s:.0f}' for s in seed)})")
    print(f"trainer:   {fused_s:9.0f} steps/s   (runs: {', '.join(f'{s:.0f}' for s in fused)})")
    print(f"speedup={fused_s / seed_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
