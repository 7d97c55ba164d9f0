"""Training: build the sharded model and optimizer, then run the seed's loop fast.

:func:`build` creates the model and its optimizer state inside one ``jit`` under the mesh, as the
seed's ``create_model`` does, so every array is born with its sharding. :class:`Trainer` then runs
the seed's math — MSE loss, gradients, momentum update — but many steps per compiled call (a
``lax.scan`` over a *chunk*, sampling each batch on device), reporting after every chunk and
stopping between chunks on request or when the loss stops being a number.

With ``host_batches=True`` the same steps take their batches from host memory instead: before each
chunk every JAX process loads only the rows of each batch that its own devices hold
(``jax.make_array_from_process_local_data``) — the way data reaches a model trained by several
processes (:mod:`sharding_lab.worker`). The batches are the very ones the device sampler draws, so
both ways give the same losses.

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
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..errors import ConfigError
from ..models import activation_rules
from ..models.data import place, sample_batch
from ..sharding.layout import ArrayLayout, actual_layout, compare_layouts
from .config import LabConfig, Plan, check_memory
from .config import plan as make_plan
from .optimizer import buffer_name
from .step import abstract_state, batch_shardings, create, make_train_step, output_shardings

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


class Lab:
    """A live run: the plan, the sharded model + optimizer state, and the data on the devices."""

    def __init__(self, config_or_plan: LabConfig | Plan):
        self.plan = config_or_plan if isinstance(config_or_plan, Plan) else make_plan(config_or_plan)
        refuse_compile_only(self.plan.config)
        check_memory(self.plan)  # refuse before allocating what would not fit
        config = self.plan.config
        with jax.set_mesh(self.plan.mesh):
            model, optimizer = create(
                config.model, self.plan.rules, config.optimizer, config.lr, config.decay, config.seed
            )
        self.graphdef, self.state = nnx.split((model, optimizer))
        self.x_host, self.y_host = config.family.make_dataset(config.model, config.seed)
        replicated = NamedSharding(self.plan.mesh, P())
        self.x_all, self.y_all = jax.device_put((self.x_host, self.y_host), replicated)
        self.steps_done = 0
        self._predict_all = None
        self._activations = None

    @property
    def config(self) -> LabConfig:
        return self.plan.config

    def live_arrays(self) -> dict[str, jax.Array]:
        """Layout path → live array, for parameters and optimizer state."""
        model_state, opt_state = self.state[0], self.state[1]
        arrays = {f"params/{'/'.join(map(str, path))}": v[...] for path, v in nnx.to_flat_state(model_state)}
        arrays.update({buffer_name(path): v[...] for path, v in nnx.to_flat_state(opt_state)})
        return arrays

    def sample_batch(self, step: int = 0) -> tuple[jax.Array, jax.Array]:
        """The batch the trainer would draw at ``step``, as a live sharded array pair."""
        fn = _batch_fn(self.plan.mesh, self.config.batch_size, batch_shardings(self.plan))
        return fn(jax.random.key(self.config.seed), jnp.int32(step), self.x_all, self.y_all)

    def load_batches(self, start: int, count: int) -> tuple[jax.Array, jax.Array]:
        """The batches of steps ``start .. start+count-1`` stacked, shape (count, batch, features),
        built from host memory: this process loads only the batch rows its devices hold."""
        idx = np.asarray(
            _indices_fn(self.config.batch_size, count, self.x_host.shape[0])(
                jax.random.key(self.config.seed), jnp.int32(start)
            )
        )  # the device sampler's indices
        return tuple(
            _from_process_rows(host, idx, NamedSharding(self.plan.mesh, P(None, *self.plan.spec(path))))
            for host, path in ((self.x_host, "batch/x"), (self.y_host, "batch/y"))
        )

    def load_batch(self, step: int = 0) -> tuple[jax.Array, jax.Array]:
        """One step's batch, loaded from host memory as :meth:`load_batches` does."""
        idx = np.asarray(
            _indices_fn(self.config.batch_size, 1, self.x_host.shape[0])(
                jax.random.key(self.config.seed), jnp.int32(step)
            )
        )[0]
        return tuple(
            _from_process_rows(host, idx, NamedSharding(self.plan.mesh, self.plan.spec(path)))
            for host, path in ((self.x_host, "batch/x"), (self.y_host, "batch/y"))
        )

    def actual_layouts(self, batch: tuple[jax.Array, jax.Array] | None = None) -> dict[str, ArrayLayout]:
        """Where the live arrays are (this process's shards only, when there are several). The
        batch is ``batch`` if given, else one drawn by the device sampler; the activations are
        those the forward pass produced on that batch (:meth:`live_activations`)."""
        arrays = self.live_arrays()
        arrays["batch/x"], arrays["batch/y"] = batch if batch is not None else self.sample_batch()
        layouts = {
            path: actual_layout(path, array, self.plan.arrays[path].requested if path in self.plan.arrays else P())
            for path, array in arrays.items()
        }
        for name, values in self.live_activations(arrays["batch/x"], arrays["batch/y"]).items():
            path = f"act/{name}"
            found = [actual_layout(path, value, self.plan.arrays[path].requested) for value in values]
            # Every place the forward pass constrains this activation (the residual stream: after
            # the embedding and after each sublayer) must agree; the first that does not is shown.
            layouts[path] = next((f for f in found if f.devices != found[0].devices), found[0])
        return layouts

    def live_activations(self, x: jax.Array, y: jax.Array) -> dict[str, list[jax.Array]]:
        """Activation name → the live arrays the forward pass (the family's loss, as in the train
        step) produced at each of its ``constrain`` calls on batch (x, y). The program returns them
        with unpinned outputs, so each comes back in the layout the compiled program gave it."""
        specs = self.plan.activation_specs()
        if not specs:
            return {}
        if self._activations is None:
            graphdef, family, mesh = self.graphdef, self.config.family, self.plan.mesh

            def forward(state, x, y):
                record: list = []
                with activation_rules(mesh, specs, record):
                    family.loss(nnx.merge(graphdef, state)[0], x, y)
                # The names ride in the output's structure (dict keys), in the order of the calls.
                return {f"{i:04d} {name}": value for i, (name, value) in enumerate(record)}

            self._activations = jax.jit(forward)
        with jax.set_mesh(self.plan.mesh):
            values = self._activations(self.state, x, y)
        found: dict[str, list[jax.Array]] = {}
        for key in sorted(values):
            found.setdefault(key.split(" ", 1)[1], []).append(values[key])
        return found

    def verify_layout(self) -> list[str]:
        """Differences between the planned and the live layout (empty: JAX did as planned)."""
        return compare_layouts(self.plan.layouts(), self.actual_layouts())

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The family's probe (the MLP: its prediction) on host inputs ``x``."""
        return self._probe(jnp.asarray(x, self.x_host.dtype))

    def predict_dataset(self) -> np.ndarray:
        """The probe on the whole dataset (or its first ``family.probe_rows`` rows), gathered whole
        onto every device — so any process can read it (every process must call this together)."""
        rows = self.config.family.probe_rows
        return self._probe(self.x_all if rows is None else self.x_all[:rows])

    def _probe(self, x) -> np.ndarray:
        if self._predict_all is None:
            graphdef, family = self.graphdef, self.config.family
            self._predict_all = jax.jit(
                lambda state, x: family.probe(nnx.merge(graphdef, state)[0], x),
                out_shardings=NamedSharding(self.plan.mesh, P()),
            )
        with jax.set_mesh(self.plan.mesh):
            return np.asarray(self._predict_all(self.state, x))


def refuse_compile_only(config: LabConfig) -> None:
    """A run needs the chips it is laid on: only the simulated host (target ``cpu``, or accelerators JAX
    really sees) trains; a TPU slice or GPU node target is compiled for, never run."""
    if config.target != "cpu":
        raise ConfigError(
            f"training on {config.target} needs those chips, and this machine compiles for them "
            f"only: every view that compiles (Communication, Compare, cost) works on {config.target}; "
            "to train, choose the target cpu",
            "target",
        )


@functools.lru_cache(maxsize=64)
def _batch_fn(mesh, batch_size, shardings):
    @jax.jit
    def batch(key, step, x_all, y_all):
        return sample_batch(jax.random.fold_in(key, step), x_all, y_all, batch_size, shardings)

    return batch


@functools.lru_cache(maxsize=16)
def _indices_fn(batch_size: int, count: int, n_points: int):
    """key, start → (count, batch_size) row indices: for each step, the rows ``sample_batch`` draws."""

    @jax.jit
    def indices(key, start):
        return jax.vmap(lambda i: jax.random.randint(jax.random.fold_in(key, start + i), (batch_size,), 0, n_points))(
            jnp.arange(count)
        )

    return indices


def process_rows(sharding: NamedSharding, shape: tuple[int, ...], dim: int) -> np.ndarray:
    """The indices along ``dim`` that this process's devices hold, in order (all of them when the
    dimension is not split across processes)."""
    index_map = sharding.addressable_devices_indices_map(shape)
    return np.array(sorted({i for index in index_map.values() for i in range(*index[dim].indices(shape[dim])[:2])}))


def _from_process_rows(host: np.ndarray, idx: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """The global array ``host[idx]`` (batch rows along ``idx``'s last dimension), of which this
    process builds and loads only the rows its devices hold."""
    shape = idx.shape + host.shape[1:]
    rows = process_rows(sharding, shape, idx.ndim - 1)
    return jax.make_array_from_process_local_data(sharding, host[idx[..., rows]], shape)


def program_key(config: LabConfig, chunk: int, host_batches: bool = False) -> tuple:
    """What a compiled chunk depends on: equal keys share one program (across runs and sessions)."""
    return (
        config.mesh,
        config.resolved_rules(),
        config.model,
        config.optimizer,
        config.lr,
        config.decay,
        config.batch_size,
        chunk,
        host_batches,
        config.microbatches,
        config.schedule,
    )


_programs: dict[tuple, Callable] = {}
_programs_lock = threading.Lock()


def chunk_program(plan: Plan, chunk: int, host_batches: bool = False):
    """The cached compiled chunk for ``plan``'s configuration (built on first use)."""
    key = program_key(plan.config, chunk, host_batches)
    with _programs_lock:
        if key not in _programs:
            if len(_programs) >= 64:
                oldest = next(iter(_programs))
                del _programs[oldest]
                _ran.discard(oldest)
            _programs[key] = build_chunk_program(plan, chunk, host_batches)
        return _programs[key]


_ran: set = set()  # the keys in _programs whose chunk has run once (compiled)


def is_compiled(config: LabConfig) -> bool:
    """Whether a run of ``config`` finds its training chunk compiled in this process (one has run already), so
    its first loss comes without a compile (the server's queue serves such runs first)."""
    with _programs_lock:
        return program_key(config, config.chunk) in _ran


def forget_chunk_programs() -> None:
    """Drop the cached chunks (after ``jax.clear_caches()``, their jitted functions would no longer match a
    state built after)."""
    with _programs_lock:
        _programs.clear()
        _ran.clear()


def build_chunk_program(plan: Plan, chunk: int, host_batches: bool = False):
    """A jitted function (state, key, start, n_active, x_all, y_all) → (state, losses) running
    ``chunk`` steps — or, with ``host_batches``, (state, xs, ys, n_active) → (state, losses), the
    chunk's batches loaded from the hosts (``xs[i]`` is step i's batch).

    Steps at index ≥ ``n_active`` compute but keep the old state, so the last, shorter chunk
    reuses the same program instead of compiling another.
    """
    graphdef, state = abstract_state(plan)
    train_step = make_train_step(plan, graphdef)
    batch_size, shardings = plan.config.batch_size, batch_shardings(plan)

    def masked_step(state, x, y, keep):
        new_state, loss = train_step(state, x, y)
        return jax.tree.map(lambda new, old: jnp.where(keep, new, old), new_state, state), loss

    def run_chunk(state, key, start, n_active, x_all, y_all):
        def one_step(state, i):
            x, y = sample_batch(jax.random.fold_in(key, start + i), x_all, y_all, batch_size, shardings)
            return masked_step(state, x, y, i < n_active)

        return jax.lax.scan(one_step, state, jnp.arange(chunk))

    def run_loaded_chunk(state, xs, ys, n_active):
        def one_step(state, batch):
            x, y, i = batch
            return masked_step(state, place(x, shardings[0]), place(y, shardings[1]), i < n_active)

        return jax.lax.scan(one_step, state, (xs, ys, jnp.arange(chunk)))

    return jax.jit(
        run_loaded_chunk if host_batches else run_chunk, donate_argnums=0, out_shardings=output_shardings(plan, state)
    )


def chunk_length(chunk: int, steps: int) -> int:
    """The steps one compiled chunk runs: ``chunk``, or all of a shorter run's (at least one). A run's last chunk
    computes a whole one, its steps past the run's end masked (:func:`chunk_program`)."""
    return max(1, min(chunk, steps))


class Trainer:
    """Runs ``steps`` training steps on a :class:`Lab` in chunks, streaming :class:`Progress`."""

    def __init__(self, lab: Lab, steps: int | None = None, chunk: int | None = None, host_batches: bool = False):
        self.lab = lab
        self.steps = steps if steps is not None else lab.config.steps
        self.chunk = chunk_length(chunk or lab.config.chunk, self.steps)
        self.host_batches = host_batches
        self._program = chunk_program(lab.plan, self.chunk, host_batches)
        self._key = program_key(lab.config, self.chunk, host_batches)
        self.losses: list[float] = []

    def chunks(self, stop: threading.Event | None = None) -> Iterator[Progress]:
        """Yield one Progress per chunk; the last one has ``done=True`` and a ``stop_reason``.

        ``stop`` is anything with ``is_set()``, asked once before each chunk (several processes
        pass an object that agrees on the answer: :class:`sharding_lab.worker.AgreedStop`)."""
        lab, key = self.lab, jax.random.key(self.lab.config.seed)
        start_time, done = time.perf_counter(), 0
        reason, unreported = "finished", []
        with jax.set_mesh(lab.plan.mesh):
            while done < self.steps:
                if stop is not None and stop.is_set():
                    reason = "stopped"
                    break
                n_active = min(self.chunk, self.steps - done)
                if self.host_batches:
                    xs, ys = lab.load_batches(lab.steps_done, self.chunk)
                    state, losses = self._program(lab.state, xs, ys, jnp.int32(n_active))
                else:
                    state, losses = self._program(
                        lab.state, key, jnp.int32(lab.steps_done), jnp.int32(n_active), lab.x_all, lab.y_all
                    )
                unreported = np.asarray(losses)[:n_active].tolist()  # blocks: one program in flight
                if done == 0:
                    with _programs_lock:
                        if self._key in _programs:  # not dropped from the cache meanwhile
                            _ran.add(self._key)
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
        yield Progress(
            done, self.steps, unreported, elapsed, done / elapsed if elapsed else 0.0, done=True, stop_reason=reason
        )

    def run(
        self, on_progress: Callable[[Progress], None] | None = None, stop: threading.Event | None = None
    ) -> TrainResult:
        last = None
        for last in self.chunks(stop):
            if on_progress is not None:
                on_progress(last)
        return self.result(last)

    def result(self, last: Progress) -> TrainResult:
        """The run's result, from the last Progress :meth:`chunks` yielded."""
        return TrainResult(np.asarray(self.losses), last.step, last.elapsed, last.steps_per_s, last.stop_reason)


def _diverged(config: LabConfig, step: int, value: float) -> str:
    return (
        f"diverged: the loss became {value} at step {step} — learning rate {config.lr} is "
        f"too large for {config.optimizer}; try {min(config.lr / 10, 0.01):g} or smaller"
    )


def train(config: LabConfig, on_progress=None, stop=None) -> tuple[Lab, TrainResult]:
    """Plan, build and train ``config`` in one call."""
    lab = Lab(config)
    return lab, Trainer(lab).run(on_progress, stop)


def compile_first_run(config: LabConfig, keep_going: Callable[[], bool] | None = None) -> bool:
    """One short run compiles what a learner's first run of ``config`` would: the model's creation, the
    training chunk (the same program as a full run's), the prediction and the layout check — for the
    server's warm-up and for the layout a learner is reading (``sharding_lab.server.warm``, ``.precompile``).

    ``keep_going`` is asked before each part after the model's creation; when it says no, the run stops there
    and returns False (what was compiled stays compiled: the next call finds it in memory). The class warm-up
    gives way to learners that way — a part takes 0.1–0.8 s on a quiet machine, a whole first run took 26 s
    while a class of twenty set up its pages."""
    lab = Lab(config)
    parts = (
        lambda: Trainer(lab, steps=min(config.chunk, config.steps)).run(),
        lambda: lab.predict(lab.x_host),
        lab.verify_layout,
    )
    for part in parts:
        if keep_going is not None and not keep_going():
            return False
        part()
    return True
