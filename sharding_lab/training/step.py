"""The one training step — loss, gradients, optimizer update — and what compiles it.

The trainer (:mod:`.trainer`) runs this step inside its chunks; the Communication and Compare pages, the
cost model and the search compile it without running it (:func:`lower_train_step`,
:func:`compile_train_step`, on abstract arguments: nothing allocated); the export script copies it.
:func:`create` builds the model and its optimizer state inside one ``jit`` under the mesh, so every
array is born with its sharding; :func:`abstract_state` is the same, unallocated.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..errors import ConfigError
from ..models import activation_rules, forget_creation_order
from ..pipeline import family_for
from .config import Plan
from .optimizer import buffer_name, make_optimizer


def create(model_spec, rules, optimizer, lr, decay, seed):
    """Model and optimizer created inside jit, under the mesh: every array is born sharded. Without the
    parameters' creation stamps, so every build has the same pytree and a cached chunk fits any Lab's state
    (a retrace, after ``jax.clear_caches``, stamps anew)."""
    model, optimizer = _create(model_spec, rules, optimizer, lr, decay, seed)
    forget_creation_order(model, optimizer)
    return model, optimizer


@nnx.jit(static_argnums=(0, 1, 2, 3, 4, 5))
def _create(model_spec, rules, optimizer, lr, decay, seed):
    model = family_for(model_spec, rules).build(model_spec, lambda name, *axes: rules.spec(name, axes), nnx.Rngs(seed))
    return model, make_optimizer(optimizer, model, lr, decay)


def layout_paths(state) -> object:
    """The state's tree with each leaf replaced by its layout path (``params/w1``, ``opt/mu/w1``)."""

    def path_of(path, _leaf):
        keys = [getattr(p, "key", getattr(p, "idx", getattr(p, "name", None))) for p in path]
        part, names = keys[0], tuple(k for k in keys[1:] if k != "value")
        return "params/" + "/".join(map(str, names)) if part == 0 else buffer_name(names)

    return jax.tree_util.tree_map_with_path(path_of, state)


def abstract_state(plan: Plan):
    """(graphdef, state of ShapeDtypeStructs carrying the planned shardings): a run, unallocated."""
    config = plan.config
    with jax.set_mesh(plan.mesh):
        model, optimizer = nnx.eval_shape(
            lambda: create(config.model, plan.rules, config.optimizer, config.lr, config.decay, config.seed)
        )
    graphdef, state = nnx.split((model, optimizer))
    shardings = jax.tree.map(lambda path: NamedSharding(plan.mesh, plan.arrays[path].spec), layout_paths(state))
    return graphdef, jax.tree.map(
        lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding), state, shardings
    )


def batch_shardings(plan: Plan) -> tuple[NamedSharding, NamedSharding]:
    return tuple(NamedSharding(plan.mesh, plan.spec(path)) for path in ("batch/x", "batch/y"))


def make_train_step(plan: Plan, graphdef, compute_dtype=None):
    """The one training step — loss, gradients, optimizer update — that the trainer runs (inside
    its chunk), the Communication and Compare pages compile, and the export script copies.

    ``state`` is ``nnx.state((model, optimizer))``; the activations the family constrains are laid
    out as the plan says. With ``compute_dtype`` (bf16) the step is *mixed precision*, as large runs
    train: the weights and optimizer state stay in the state's dtype (f32) and the update happens
    there, while the forward and backward passes run on a ``compute_dtype`` copy of the weights.

    A pipelined configuration (rules with ``layers`` → a mesh axis) gets the pipelined step instead
    (:mod:`sharding_lab.pipeline.pipelined_step`): the same signature, loss and gradients, its microbatches
    scheduled over the stages (its math in the state's dtype: mixed precision is not applied to it)."""
    if plan.config.stage_axis is not None:
        from ..pipeline.pipelined_step import make_pipelined_step

        return make_pipelined_step(plan, graphdef)
    family, mesh, activations = plan.config.family, plan.mesh, plan.activation_specs()

    def value_and_grad(model, x, y):
        if compute_dtype is None:
            return nnx.value_and_grad(family.loss)(model, x, y)
        graph, params, rest = nnx.split(model, nnx.Param, ...)

        def low(a):
            return a.astype(compute_dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a

        def loss_of(params):  # the cast inside: its transpose hands back f32 gradients
            return family.loss(nnx.merge(graph, jax.tree.map(low, params), rest), low(x), low(y))

        return jax.value_and_grad(loss_of)(params)

    def train_step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)
        with activation_rules(mesh, activations):
            loss, grads = value_and_grad(model, x, y)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return train_step


def output_shardings(plan: Plan, state) -> tuple:
    """What every step's outputs are pinned to: each array the layout it was born with, the loss
    replicated. Unpinned, XLA may hand arrays back in a layout of its choosing — and compile a
    different program (on 2×4 with the seed's rules: 2 more all-gathers)."""
    return (jax.tree.map(lambda a: a.sharding, state), NamedSharding(plan.mesh, P()))


COMPUTE_DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32, "mixed": jnp.float32}  # mixed: f32 state, bf16 math


def step_program(plan: Plan, dtype: str = "f32"):
    """The trainer's one step for ``plan``'s mesh and target in a compute dtype: ``(jitted step, state,
    x, y)`` with the arguments abstract (``jax.ShapeDtypeStruct``, nothing allocated) — what the cost is
    read from (:func:`lower_train_step`) and what ``tools/h200_check.py`` runs on a real GPU.

    Every float leaf of the state and the batch is cast to ``dtype`` (ints — step counters, tokens —
    kept), so parameters, gradients, optimizer state and activations are all ``dtype`` ("pure" bf16);
    ``mixed`` keeps the state in f32 and computes in bf16 (:func:`make_train_step`). The state is
    donated as in the trainer's chunks."""
    target = COMPUTE_DTYPES[dtype]
    graphdef, state = abstract_state(plan)

    def kind(dtype):  # float → the compute dtype; integers stay as they are
        return target if jnp.issubdtype(dtype, jnp.floating) else dtype

    state = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, kind(leaf.dtype), sharding=leaf.sharding), state)
    (sx, sy), arrays = batch_shardings(plan), plan.arrays
    x = jax.ShapeDtypeStruct(arrays["batch/x"].shape, kind(np.dtype(arrays["batch/x"].dtype)), sharding=sx)
    y = jax.ShapeDtypeStruct(arrays["batch/y"].shape, kind(np.dtype(arrays["batch/y"].dtype)), sharding=sy)
    step = make_train_step(plan, graphdef, jnp.bfloat16 if dtype == "mixed" else None)
    return jax.jit(step, out_shardings=output_shardings(plan, state), donate_argnums=0), state, x, y


def lower_train_step(plan: Plan, dtype: str = "f32"):
    """:func:`step_program` lowered on its abstract inputs (a ``jax.stages.Lowered``)."""
    fn, state, x, y = step_program(plan, dtype)
    with jax.set_mesh(plan.mesh):
        return fn.lower(state, x, y)


# The innermost compiler_options of this thread (None: none). Per thread: a search's compiles dump to their own
# folder while a page's or a job's compile on another thread must not (nor read that folder as its own).
_compiler_options: contextvars.ContextVar[dict | None] = contextvars.ContextVar("compiler_options", default=None)


@contextlib.contextmanager
def compiler_options(**options):
    """Extra options for every :func:`compile_lowered` inside the block (on this thread) — XLA debug options such as
    ``xla_dump_to``: the search's workers have the compiler write its buffer assignment to a folder they
    watch, to know when it has passed its memory check, before the TPU compiler's code generation (minutes)."""
    token = _compiler_options.set(dict(options))
    try:
        yield
    finally:
        _compiler_options.reset(token)


def current_compiler_options() -> dict:
    """The options :func:`compile_lowered` compiles with here (those of the innermost :func:`compiler_options`)."""
    return dict(_compiler_options.get() or {})


_turns = threading.local()  # this thread's wait before each compile (a page's: the server's compile queue)


@contextlib.contextmanager
def compiles_wait_for(turn):
    """Inside the block, every :func:`compile_lowered` of this thread runs inside ``turn(lowered)`` (a context
    manager): a page's compile of a big program waits for the class server's compile queue
    (:mod:`sharding_lab.server.page_compiles`). Per thread: the server's other threads (runs, searches) and
    what a cache already holds never wait."""
    outer = getattr(_turns, "turn", None)
    _turns.turn = turn
    try:
        yield
    finally:
        _turns.turn = outer


def compile_lowered(lowered, target: str):
    """``lowered.compile()``; a step too big for the target's memory raises :class:`CompileRefused`
    carrying the compiler's own sentence (the TPU compiler checks HBM; nothing is allocated)."""
    turn = getattr(_turns, "turn", None)
    with turn(lowered) if turn is not None else contextlib.nullcontext():
        return _compile(lowered, target)


def _compile(lowered, target: str):
    try:
        options = _compiler_options.get()
        return lowered.compile(compiler_options=options) if options is not None else lowered.compile()
    except Exception as error:  # the accelerator compilers refuse what does not fit: JaxRuntimeError
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        raise CompileRefused(target, str(error)) from None


def compile_train_step(plan: Plan, dtype: str = "f32"):
    """:func:`lower_train_step`, compiled by the target's compiler: a ``jax.stages.Compiled``."""
    return compile_lowered(lower_train_step(plan, dtype), plan.config.target)


class CompileRefused(ConfigError):
    """The target's compiler refused the step: it does not fit in the chip's memory."""

    def __init__(self, target: str, compiler_text: str):
        reason = next(
            (line.strip() for line in compiler_text.splitlines() if "RESOURCE_EXHAUSTED" in line),
            compiler_text.strip().splitlines()[0],
        )
        reason = reason[reason.index("RESOURCE_EXHAUSTED") :] if "RESOURCE_EXHAUSTED" in reason else reason
        super().__init__(f"does not fit on {target}: the compiler says {reason}", "model")
        self.reason = reason
        self.compiler_text = compiler_text  # the whole error: the TPU compiler lists its largest allocations
