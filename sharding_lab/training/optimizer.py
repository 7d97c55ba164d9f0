"""Optimizer: state that is sharded exactly like the parameters it belongs to.

``seed-sgd`` is the seed's momentum SGD written for today's Flax: an ``nnx.Pytree`` (the blog's
``nnx.Object``) whose momentum buffers are ``nnx.Variable``\\ s created from each parameter's value
*and metadata*, so they inherit its ``out_sharding``. ``sgd`` and ``adamw`` are optax optimizers
through ``nnx.Optimizer``, which does the same for optax's state (``trace``, ``mu``, ``nu``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from ..errors import ConfigError

OPTIMIZERS = {
    "seed-sgd": "The seed's own momentum SGD: m = decay·m + (1−decay)·g; p −= lr·m",
    "sgd": "optax.sgd with momentum, through nnx.Optimizer (state: trace)",
    "adamw": "optax.adamw through nnx.Optimizer (state: mu, nu and a step count)",
}


class SGDState(nnx.Variable):
    """A momentum buffer; a Variable type of its own so it is easy to select and to name."""


class SGD(nnx.Pytree):
    def __init__(self, model: nnx.Module, lr: float, decay: float):
        self.lr = lr
        self.decay = decay
        params = nnx.state(model, nnx.Param)
        self.momentum = nnx.data(
            jax.tree.map(
                lambda p: SGDState(jnp.zeros_like(p[...]), **p.get_metadata()),
                params,
                is_leaf=lambda x: isinstance(x, nnx.Variable),
            )
        )

    def update(self, model: nnx.Module, grads: nnx.State) -> None:
        params = nnx.state(model, nnx.Param)

        def step(param: nnx.Variable, momentum: SGDState, grad: nnx.Variable):
            momentum[...] = self.decay * momentum[...] + (1 - self.decay) * grad[...]
            param[...] = param[...] - self.lr * momentum[...]

        jax.tree.map(step, params, self.momentum, grads, is_leaf=lambda x: isinstance(x, nnx.Variable))


# Per-parameter buffers each optimizer keeps (each sharded like its parameter), as layout names.
OPTIMIZER_BUFFERS = {"seed-sgd": ("momentum",), "sgd": ("trace",), "adamw": ("mu", "nu")}
# Scalars an optimizer keeps besides its per-parameter buffers (always replicated).
OPTIMIZER_SCALARS = {"seed-sgd": (), "sgd": ("step",), "adamw": ("count", "step")}


USES_DECAY = ("seed-sgd", "sgd")  # the optimizers whose momentum the decay setting is; adamw keeps its own betas


def make_optimizer(name: str, model: nnx.Module, lr: float, decay: float):
    """An object with ``update(model, grads)`` whose state is sharded like ``model``'s params."""
    if name == "seed-sgd":
        return SGD(model, lr, decay)
    if name == "sgd":
        return nnx.Optimizer(model, optax.sgd(lr, momentum=decay), wrt=nnx.Param)
    if name == "adamw":
        return nnx.Optimizer(model, optax.adamw(lr), wrt=nnx.Param)
    raise ConfigError(f"unknown optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}", "optimizer")


def buffer_name(path: tuple) -> str:
    """A readable layout path for one optimizer leaf: ('opt_state', 0, 'mu', 'w1') → 'opt/mu/w1',
    ('momentum', 'blocks', 0, 'q') → 'opt/momentum/blocks/0/q' (optax's chain index is dropped)."""
    parts = list(path)
    if parts[:1] == ["opt_state"]:
        parts = parts[2:] if len(parts) > 1 and isinstance(parts[1], int) else parts[1:]
    return "opt/" + "/".join(str(p) for p in parts)
