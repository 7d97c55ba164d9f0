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
from jax.sharding import AxisType, PartitionSpec as P

from .errors import ConfigError
from .rules import Rules, axis_names

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
            h = matmul(h, getattr(self, w)[...])
            h = nnx.relu(h + like_columns(getattr(self, "b" + w[1:])[...], h))
        return matmul(h, getattr(self, weights[-1])[...])


def _explicit() -> bool:
    return AxisType.Explicit in jax.sharding.get_abstract_mesh().axis_types


def _spec(x: jax.Array) -> tuple:
    spec = tuple(jax.typeof(x).sharding.spec)
    return spec + (None,) * (x.ndim - len(spec))


def matmul(h: jax.Array, w: jax.Array) -> jax.Array:
    """``h @ w``. With Auto axes the compiler picks every sharding (the seed's way). With Explicit
    axes shardings are part of the types, so we say what the compiler would otherwise infer: a
    weight split over an axis the batch also uses is gathered first (that *is* FSDP), and the
    output keeps the batch's rows and the weight's columns."""
    if not _explicit():
        return h @ w
    rows = _spec(h)[0]
    w_spec = tuple(None if set(axis_names(t)) & set(axis_names(rows)) else t for t in _spec(w))
    if w_spec != _spec(w):
        w = jax.sharding.reshard(w, P(*w_spec))
    cols = w_spec[1]
    if set(axis_names(cols)) & set(axis_names(rows)):
        cols = None
    return jnp.matmul(h, w, out_sharding=P(rows, cols))


def like_columns(b: jax.Array, h: jax.Array) -> jax.Array:
    """The bias laid out like ``h``'s columns, so ``h + b`` is well typed under Explicit axes."""
    if not _explicit() or _spec(b)[0] == _spec(h)[1]:
        return b
    return jax.sharding.reshard(b, P(_spec(h)[1]))
