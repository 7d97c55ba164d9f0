"""shard_map, the third way: one training step written three ways, and what each compiles to.

The step is the seed MLP's (mean squared error, then plain SGD) with its weights fully sharded over the
mesh axis playing ``data`` (FSDP: w1 and b1 split by their hidden units, w2 by its rows) and the batch's
rows split over the same axis. The three ways differ in who decides the communication:

1. **Auto axes** — the code is the maths; the inputs carry their shardings and the compiler (GSPMD /
   Shardy) chooses every collective.
2. **Explicit axes** — shardings are part of the types: the code says where the weights are gathered
   (``jax.sharding.reshard`` to replicated — FSDP's all-gather) and what sharding each matmul's output
   has; the compiler derives the backward pass.
3. **shard_map** — the code runs on each device's own blocks and writes every collective itself:
   ``all_gather`` the weights, compute the local gradients, ``psum_scatter`` them (a reduce-scatter: each
   device keeps the summed slice of its own weights) and ``psum`` the loss. This is the way the pipeline
   (:mod:`sharding_lab.pipeline`) has to be written: a schedule of sends between stages is not a layout
   the compiler can infer.

:func:`compile_three` compiles each for abstract inputs and reads its collectives from the optimized HLO
(:func:`sharding_lab.program.communication.parse_collectives`); :func:`run_three` runs them on real arrays so a
test can check they compute the same step.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..errors import ConfigError
from ..program.communication import Collective, parse_collectives
from ..sharding.mesh import MeshSpec, build_mesh

LR = 0.01
NAMES = ("w1", "b1", "w2")


def auto_step(params, x, y):
    """Auto axes: the maths, nothing else (the inputs carry their shardings)."""

    def loss_fn(params):
        w1, b1, w2 = params
        prediction = jax.nn.relu(x @ w1 + b1) @ w2
        return jnp.mean((y - prediction) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda w, g: w - LR * g, params, grads), loss


def explicit_step(params, x, y):
    """Explicit axes: the gathers and each matmul's output sharding are written down."""
    rows = jax.typeof(x).sharding.spec[0]  # the batch axis

    def loss_fn(params):
        w1, b1, w2 = (jax.sharding.reshard(w, P()) for w in params)  # all-gather the weights (FSDP)
        hidden = jax.nn.relu(jnp.matmul(x, w1, out_sharding=P(rows, None)) + b1)
        prediction = jnp.matmul(hidden, w2, out_sharding=P(rows, None))
        return jnp.mean((y - prediction) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda w, g: w - LR * g, params, grads), loss


def shard_map_step(axis: str, batch: int):
    """shard_map: the step on one device's blocks, every collective by hand (``batch``: the global
    batch size, for the mean)."""

    def step(params, x, y):
        w1, b1, w2 = params  # this device's blocks: w1[:, mine], b1[mine], w2[mine, :]
        full = (
            jax.lax.all_gather(w1, axis, axis=1, tiled=True),  # FSDP: gather each weight to use it
            jax.lax.all_gather(b1, axis, axis=0, tiled=True),
            jax.lax.all_gather(w2, axis, axis=0, tiled=True),
        )

        def local_loss(full):
            w1, b1, w2 = full
            prediction = jax.nn.relu(x @ w1 + b1) @ w2
            return jnp.sum((y - prediction) ** 2) / (batch * y.shape[1])  # this device's share of the mean

        loss, grads = jax.value_and_grad(local_loss)(full)
        grads = (
            jax.lax.psum_scatter(grads[0], axis, scatter_dimension=1, tiled=True),  # sum, keep my slice
            jax.lax.psum_scatter(grads[1], axis, scatter_dimension=0, tiled=True),
            jax.lax.psum_scatter(grads[2], axis, scatter_dimension=0, tiled=True),
        )
        new = tuple(w - LR * g for w, g in zip(params, grads))
        return new, jax.lax.psum(loss, axis)  # every device's share of the loss, added

    return step


WAYS = {"Auto axes": auto_step, "Explicit axes": explicit_step, "shard_map": shard_map_step}


@dataclasses.dataclass(frozen=True)
class Setup:
    """The sizes and the mesh axis of the step (the batch and every weight split over ``axis``)."""

    mesh: MeshSpec
    axis: str
    din: int
    dmid: int
    dout: int
    batch: int

    def specs(self) -> tuple[tuple[P, P, P], P, P]:
        a = self.axis
        return (P(None, a), P(a), P(a, None)), P(a, None), P(a, None)

    def shapes(self):
        return (
            ((self.din, self.dmid), (self.dmid,), (self.dmid, self.dout)),
            (self.batch, self.din),
            (self.batch, self.dout),
        )

    def validate(self) -> None:
        n = self.mesh.axis_sizes[self.axis]
        for what, size in (("the batch", self.batch), ("the hidden width", self.dmid)):
            if size % n:
                raise ConfigError(
                    f"{what} ({size}) does not split {n} ways over {self.axis!r}: this chapter needs "
                    f"a size {n} divides",
                    "batch" if what == "the batch" else "model",
                )


def shard_map_program(setup: Setup, mesh):
    """The step above, run by every device on its own blocks: ``in_specs`` say which block of each input a device
    gets, ``out_specs`` how the blocks it returns form the global arrays."""
    weights, batch, labels = setup.specs()
    return jax.shard_map(
        shard_map_step(setup.axis, setup.batch),
        mesh=mesh,
        in_specs=(weights, batch, labels),
        # P(): the loss is one value on every device. shard_map checks it (check_vma, on by default): without the
        # psum it varies across devices, and JAX refuses this out_spec
        out_specs=(weights, P()),
    )


def _program(setup: Setup, way: str):
    """(jitted function, mesh) for ``way``, its outputs pinned to the inputs' layouts."""
    mesh = build_mesh(dataclasses.replace(setup.mesh, axis_type="explicit" if way == "Explicit axes" else "auto"))
    (ws, xs, ys) = setup.specs()
    param_shardings = tuple(NamedSharding(mesh, s) for s in ws)
    out = (param_shardings, NamedSharding(mesh, P()))
    if way == "shard_map":
        fn = shard_map_program(setup, mesh)
    else:
        fn = WAYS[way]
    return jax.jit(fn, out_shardings=out), mesh


def _abstract(setup: Setup, mesh):
    (ws, xs, ys), (wshapes, xshape, yshape) = setup.specs(), setup.shapes()
    params = tuple(jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, p)) for s, p in zip(wshapes, ws))
    return (
        params,
        jax.ShapeDtypeStruct(xshape, jnp.float32, sharding=NamedSharding(mesh, xs)),
        jax.ShapeDtypeStruct(yshape, jnp.float32, sharding=NamedSharding(mesh, ys)),
    )


@dataclasses.dataclass
class Compiled:
    way: str
    collectives: list[Collective]
    hlo: str


@functools.lru_cache(maxsize=16)
def compile_three(setup: Setup) -> dict[str, Compiled]:
    """Each way compiled on abstract inputs (nothing allocated), with the collectives of its program."""
    setup.validate()
    found = {}
    for way in WAYS:
        fn, mesh = _program(setup, way)
        with jax.set_mesh(mesh):
            hlo = fn.lower(*_abstract(setup, mesh)).compile().as_text()
        found[way] = Compiled(way, parse_collectives(hlo, setup.mesh.shape, setup.mesh.axes), hlo)
    return found


def run_three(setup: Setup, seed: int = 0) -> dict[str, tuple[tuple[np.ndarray, ...], float]]:
    """Each way run once on the same real arrays: (updated weights, loss)."""
    setup.validate()
    rng = np.random.default_rng(seed)
    (wshapes, xshape, yshape), (ws, xs, ys) = setup.shapes(), setup.specs()
    host = (
        tuple(rng.normal(size=s).astype(np.float32) * 0.5 for s in wshapes),
        rng.normal(size=xshape).astype(np.float32),
        rng.normal(size=yshape).astype(np.float32),
    )
    results = {}
    for way in WAYS:
        fn, mesh = _program(setup, way)
        with jax.set_mesh(mesh):
            params = tuple(jax.device_put(w, NamedSharding(mesh, s)) for w, s in zip(host[0], ws))
            x, y = jax.device_put(host[1], NamedSharding(mesh, xs)), jax.device_put(host[2], NamedSharding(mesh, ys))
            new, loss = fn(params, x, y)
            results[way] = (tuple(np.asarray(w) for w in new), float(loss))
    return results


__all__ = [
    "Compiled",
    "LR",
    "NAMES",
    "Setup",
    "WAYS",
    "auto_step",
    "compile_three",
    "explicit_step",
    "run_three",
    "shard_map_program",
    "shard_map_step",
]
