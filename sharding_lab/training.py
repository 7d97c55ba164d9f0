"""Training: build the sharded model and optimizer, then run the seed's loop fast.

:func:`build` creates the model and its optimizer state inside one ``jit`` under the mesh, as the
seed's ``create_model`` does, so every array is born with its sharding. :class:`Trainer` then runs
the seed's math — MSE loss, gradients, momentum update — but many steps per compiled call (a
``lax.scan`` over a *chunk*, sampling each batch on device), reporting after every chunk and
stopping between chunks on request or when the loss stops being a number.

Every chunk's result is waited on before the next is dispatched: XLA's CPU collectives can abort
the process when many collective programs are in flight at once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from .config import LabConfig, Plan, plan as make_plan
from .data import make_dataset, sample_batch
from .layout import ArrayLayout, actual_layout, compare_layouts
from .model import MLP
from .optimizer import buffer_name, make_optimizer

FINAL_LOSS_WINDOW = 100


@dataclasses.dataclass
class Progress:
    """What one chunk reports: ``losses`` are this chunk's per-step losses."""

    step: int
    total_steps: int
    losses: list[float]
    elapsed: float
    steps_per_s: float
    done: bool = False
    stop_reason: str | None = None


@dataclasses.dataclass
class TrainResult:
    losses: np.ndarray
    steps: int
    elapsed: float
    steps_per_s: float
    stop_reason: str  # "finished", "stopped" or "diverged: ..."

    @property
    def final_loss(self) -> float:
        tail = self.losses[-FINAL_LOSS_WINDOW:]
        return float(np.mean(tail)) if len(tail) else float("nan")

    @property
    def diverged(self) -> bool:
        return self.stop_reason.startswith("diverged")


def _batch_sharding(plan: Plan) -> NamedSharding:
    return NamedSharding(plan.mesh, plan.spec("batch/x"))


class Lab:
    """A live run: the plan, the sharded model + optimizer state, and the data on the devices."""

    def __init__(self, config_or_plan: LabConfig | Plan):
        self.plan = config_or_plan if isinstance(config_or_plan, Plan) else make_plan(config_or_plan)
        config = self.plan.config
        with jax.set_mesh(self.plan.mesh):
            model, optimizer = _create(config.model, self.plan.rules, config.optimizer, config.lr,
                                       config.decay, config.seed)
        self.graphdef, self.state = nnx.split((model, optimizer))
        x, y = make_dataset(config.seed, config.model.din, config.model.dout)
        replicated = NamedSharding(self.plan.mesh, P())
        self.x_all, self.y_all = jax.device_put((x, y), replicated)
        self.steps_done = 0

    @property
    def config(self) -> LabConfig:
        return self.plan.config

    def live_arrays(self) -> dict[str, jax.Array]:
        """Layout path → live array, for parameters and optimizer state."""
        model_state, opt_state = self.state[0], self.state[1]
        arrays = {f"params/{'/'.join(map(str, path))}": v[...]
                  for path, v in nnx.to_flat_state(model_state)}
        arrays.update({buffer_name(path): v[...] for path, v in nnx.to_flat_state(opt_state)})
        return arrays

    def sample_batch(self, step: int = 0) -> tuple[jax.Array, jax.Array]:
        """The batch the trainer would draw at ``step``, as a live sharded array pair."""
        fn = _batch_fn(self.plan.mesh, self.config.batch_size, _batch_sharding(self.plan))
        return fn(jax.random.key(self.config.seed), jnp.int32(step), self.x_all, self.y_all)

    def actual_layouts(self) -> dict[str, ArrayLayout]:
        arrays = self.live_arrays()
        arrays["batch/x"], arrays["batch/y"] = self.sample_batch()
        return {path: actual_layout(path, array, self.plan.arrays[path].requested
                                    if path in self.plan.arrays else P())
                for path, array in arrays.items()}

    def verify_layout(self) -> list[str]:
        """Differences between the planned and the live layout (empty: JAX did as planned)."""
        return compare_layouts(self.plan.layouts(), self.actual_layouts())

    def predict(self, x: np.ndarray) -> np.ndarray:
        model, _ = nnx.merge(self.graphdef, self.state)
        with jax.set_mesh(self.plan.mesh):
            return np.asarray(_predict(model, jnp.asarray(x, jnp.float32)))


@nnx.jit(static_argnums=(0, 1, 2, 3, 4, 5))
def _create(model_spec, rules, optimizer, lr, decay, seed):
    model = MLP(model_spec, rules, nnx.Rngs(seed))
    return model, make_optimizer(optimizer, model, lr, decay)


@nnx.jit
def _predict(model, x):
    return model(x)


@functools.lru_cache(maxsize=64)
def _batch_fn(mesh, batch_size, sharding):
    @jax.jit
    def batch(key, step, x_all, y_all):
        return sample_batch(jax.random.fold_in(key, step), x_all, y_all, batch_size, sharding)
    return batch


def program_key(config: LabConfig, chunk: int) -> tuple:
    """What a compiled chunk depends on: equal keys share one program (across runs and sessions)."""
    return (config.mesh, config.resolved_rules(), config.model, config.optimizer, config.lr,
            config.decay, config.batch_size, chunk)


_programs: dict[tuple, Callable] = {}
_programs_lock = threading.Lock()


def chunk_program(lab: Lab, chunk: int):
    """The cached compiled chunk for ``lab``'s configuration (built on first use)."""
    key = program_key(lab.config, chunk)
    with _programs_lock:
        if key not in _programs:
            if len(_programs) >= 64:
                _programs.pop(next(iter(_programs)))
            _programs[key] = _chunk_program(lab, chunk)
        return _programs[key]


def _chunk_program(lab: Lab, chunk: int):
    """A jitted function (state, key, start, n_active, x_all, y_all) → (state, losses) running
    ``chunk`` steps.

    Steps at index ≥ ``n_active`` compute but keep the old state, so the last, shorter chunk
    reuses the same program instead of compiling another.
    """
    graphdef, plan = lab.graphdef, lab.plan
    batch_size, batch_sharding = lab.config.batch_size, _batch_sharding(plan)
    state_shardings = jax.tree.map(lambda a: a.sharding, lab.state)
    replicated = NamedSharding(plan.mesh, P())

    def loss_fn(model, x, y):
        return jnp.mean((y - model(x)) ** 2)

    def run_chunk(state, key, start, n_active, x_all, y_all):
        def one_step(state, i):
            model, optimizer = nnx.merge(graphdef, state)
            x, y = sample_batch(jax.random.fold_in(key, start + i), x_all, y_all, batch_size,
                                batch_sharding)
            loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
            optimizer.update(model, grads)
            new_state = nnx.state((model, optimizer))
            keep = i < n_active
            return jax.tree.map(lambda new, old: jnp.where(keep, new, old), new_state, state), loss

        return jax.lax.scan(one_step, state, jnp.arange(chunk))

    return jax.jit(run_chunk, donate_argnums=0, out_shardings=(state_shardings, replicated))


class Trainer:
    """Runs ``steps`` training steps on a :class:`Lab` in chunks, streaming :class:`Progress`."""

    def __init__(self, lab: Lab, steps: int | None = None, chunk: int | None = None):
        self.lab = lab
        self.steps = steps if steps is not None else lab.config.steps
        self.chunk = max(1, min(chunk or lab.config.chunk, self.steps))
        self._program = chunk_program(lab, self.chunk)
        self.losses: list[float] = []

    def chunks(self, stop: threading.Event | None = None) -> Iterator[Progress]:
        """Yield one Progress per chunk; the last one has ``done=True`` and a ``stop_reason``."""
        lab, key = self.lab, jax.random.key(self.lab.config.seed)
        start_time, done = time.perf_counter(), 0
        reason, unreported = "finished", []
        with jax.set_mesh(lab.plan.mesh):
            while done < self.steps:
                if stop is not None and stop.is_set():
                    reason = "stopped"
                    break
                n_active = min(self.chunk, self.steps - done)
                state, losses = self._program(lab.state, key, jnp.int32(lab.steps_done),
                                              jnp.int32(n_active), lab.x_all, lab.y_all)
                unreported = np.asarray(losses)[:n_active].tolist()  # blocks: one program in flight
                lab.state = state
                lab.steps_done += n_active
                done += n_active
                self.losses.extend(unreported)
                bad = [i for i, loss in enumerate(unreported) if not math.isfinite(loss)]
                if bad:
                    reason = _diverged(lab.config, lab.steps_done - n_active + bad[0], unreported[bad[0]])
                    break
                if done < self.steps:
                    elapsed = time.perf_counter() - start_time
                    yield Progress(done, self.steps, unreported, elapsed, done / elapsed)
                    unreported = []
        elapsed = time.perf_counter() - start_time
        yield Progress(done, self.steps, unreported, elapsed, done / elapsed if elapsed else 0.0,
                       done=True, stop_reason=reason)

    def run(self, on_progress: Callable[[Progress], None] | None = None,
            stop: threading.Event | None = None) -> TrainResult:
        last = None
        for last in self.chunks(stop):
            if on_progress is not None:
                on_progress(last)
        return TrainResult(np.asarray(self.losses), last.step, last.elapsed, last.steps_per_s,
                           last.stop_reason)


def _diverged(config: LabConfig, step: int, value: float) -> str:
    return (f"diverged: the loss became {value} at step {step} — learning rate {config.lr} is "
            f"too large for {config.optimizer}; try {min(config.lr / 10, 0.01):g} or smaller")


def train(config: LabConfig, on_progress=None, stop=None) -> tuple[Lab, TrainResult]:
    """Plan, build and train ``config`` in one call."""
    lab = Lab(config)
    return lab, Trainer(lab).run(on_progress, stop)
