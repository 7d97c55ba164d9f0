"""Model: the seed's MLP, ``relu(x @ w1 + b1) @ w2``, with every parameter created sharded.

Each parameter carries its logical axis names (the seed's choice: ``w1`` and ``w2`` are both
``('embed', 'mlp')``, ``b1`` is ``('mlp',)``); the rules turn those into a PartitionSpec which is
passed as ``out_sharding=`` (flax ≥ 0.11; the blog's ``sharding=``) so the array is born sharded.
Optional extra hidden layers ``wh1, bh1, ...`` sit between ``w1`` and ``w2``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from .errors import ConfigError
from .rules import Rules

MAX_WIDTH = 16384
MAX_HIDDEN_LAYERS = 8


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    din: int = 1
    dmid: int = 32
    dout: int = 1
    hidden_layers: int = 0

    def parameters(self) -> dict[str, tuple[tuple[int, ...], tuple[str | None, ...]]]:
        """name → (shape, logical axes), in forward order."""
        params = {"w1": ((self.din, self.dmid), ("embed", "mlp")), "b1": ((self.dmid,), ("mlp",))}
        for i in range(1, self.hidden_layers + 1):
            params[f"wh{i}"] = ((self.dmid, self.dmid), ("embed", "mlp"))
            params[f"bh{i}"] = ((self.dmid,), ("mlp",))
        params["w2"] = ((self.dmid, self.dout), ("embed", "mlp"))
        return params

    def parameter_count(self) -> int:
        total = 0
        for shape, _ in self.parameters().values():
            size = 1
            for dim in shape:
                size *= dim
            total += size
        return total

    def validate(self) -> None:
        for name, value, top in (("din", self.din, MAX_WIDTH), ("dmid", self.dmid, MAX_WIDTH),
                                 ("dout", self.dout, MAX_WIDTH)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"model size {name} must be a whole number ≥ 1, got {value!r}", "model")
            if value > top:
                raise ConfigError(f"model size {name}={value} is larger than this lab allows "
                                  f"({top}): pick a smaller width", "model")
        if not isinstance(self.hidden_layers, int) or not 0 <= self.hidden_layers <= MAX_HIDDEN_LAYERS:
            raise ConfigError(f"hidden layers must be between 0 and {MAX_HIDDEN_LAYERS}, got "
                              f"{self.hidden_layers!r}", "model")


class MLP(nnx.Module):
    """The seed's MLP. Must be created under ``jax.set_mesh(mesh)`` inside ``jit`` (see
    :func:`sharding_lab.training.build_state`) so indivisible specs replicate as in the seed."""

    def __init__(self, spec: ModelSpec, rules: Rules, rngs: nnx.Rngs):
        self.names = tuple(spec.parameters())
        init = nnx.initializers.lecun_normal()
        for name, (shape, logical_axes) in spec.parameters().items():
            value = jnp.zeros(shape) if name.startswith("b") else init(rngs.params(), shape)
            setattr(self, name, nnx.Param(value, out_sharding=rules.spec(name, logical_axes)))

    def __call__(self, x: jax.Array) -> jax.Array:
        weights = [name for name in self.names if name.startswith("w")]
        h = x
        for w in weights[:-1]:
            h = nnx.relu(h @ getattr(self, w)[...] + getattr(self, "b" + w[1:])[...])
        return h @ getattr(self, weights[-1])[...]
