"""An example model family that lives outside Sharding Lab: a residual MLP fitting a sine wave.

Plug it in without editing Sharding Lab (docs/own-model.md):

    PYTHONPATH=examples/families python -m sharding_lab train --family sine_family --model sine --preset fsdp
    SHARDING_LAB_FAMILIES=sine_family PYTHONPATH=examples/families ./run_app.sh    # in the app's model picker

or install a package that declares it under the ``sharding_lab.models`` entry-point group.

One file holds the whole family, as in ``sharding_lab/models/``: the sizes (``SineSpec``), the
model (every parameter made with ``param``, so it is born sharded and the planner reads its
logical axes back), the data, the loss, the presets, and the ``ModelFamily`` subclass that names
them. The exported script copies ``ResidualMLP``, ``sine_points`` and ``squared_error`` by their
own names, so they need not be called ``make_dataset`` or ``loss``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from sharding_lab.errors import ConfigError
from sharding_lab.models import (
    DP_TEXTBOOK,
    FSDP_TEXTBOOK,
    MEGATRON_TEXTBOOK,
    REPLICATED_TEXTBOOK,
    ArraySpec,
    ModelFamily,
    Preset,
    SizeField,
    param,
    register,
)
from sharding_lab.models.ops import like_columns, matmul


@dataclasses.dataclass(frozen=True)
class SineSpec:
    """The sizes: ``features`` hidden units, ``residual_blocks`` blocks of x + tanh(x·W + b)."""

    family: ClassVar[str] = "sine"
    features: int = 32
    residual_blocks: int = 2

    def validate(self) -> None:
        if not isinstance(self.features, int) or not 1 <= self.features <= 4096:
            raise ConfigError(f"sine features must be from 1 to 4096, got {self.features!r}", "model")
        if not isinstance(self.residual_blocks, int) or not 0 <= self.residual_blocks <= 8:
            raise ConfigError(f"sine residual_blocks must be from 0 to 8, got {self.residual_blocks!r}", "model")


class ResidualMLP(nnx.Module):
    """x → tanh(x·w_in + b_in) → residual blocks → ·w_out. Weights are (rows, cols): a rule for
    ``cols`` splits their output units, one for ``rows`` their input units."""

    def __init__(self, spec, shard, rngs: nnx.Rngs):
        f = spec.features
        self.w_in = param(jax.random.normal(rngs.params(), (1, f)), shard, "w_in", None, "cols")
        self.b_in = param(jnp.zeros((f,)), shard, "b_in", "cols")
        self.blocks = nnx.List(
            [
                param(jax.random.normal(rngs.params(), (f, f)) * f**-0.5, shard, "w_block", "rows", "cols")
                for _ in range(spec.residual_blocks)
            ]
        )
        self.w_out = param(jax.random.normal(rngs.params(), (f, 1)) * f**-0.5, shard, "w_out", "rows", None)

    def __call__(self, x):
        z = matmul(x, self.w_in[...])
        h = jnp.tanh(z + like_columns(self.b_in[...], z))
        for w in self.blocks:
            h = h + jnp.tanh(matmul(h, w[...]))
        return matmul(h, self.w_out[...])


def sine_points(spec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(X, Y) of shape (256, 1): y = sin(3x) + N(0, 0.05) on 256 points in [-2, 2]."""
    rng = np.random.default_rng(seed)
    x = np.linspace(-2, 2, 256, dtype=np.float32)[:, None]
    return x, (np.sin(3 * x) + rng.normal(0, 0.05, size=x.shape)).astype(np.float32)


def squared_error(model, x, y):
    """Mean squared error."""
    return jnp.mean((model(x) - y) ** 2)


# Presets are written with roles ("data", "model"); Sharding Lab binds them to the mesh's axes.
PRESETS = {
    p.name: p
    for p in [
        Preset("replicated", "Replicated", "Every device holds everything.", {}, textbook=REPLICATED_TEXTBOOK),
        Preset(
            "dp",
            "Data parallel",
            "The batch's rows split on data; weights replicated.",
            {"batch": "data"},
            textbook=DP_TEXTBOOK,
        ),
        Preset(
            "fsdp",
            "FSDP",
            "The batch and every weight's input units split on data.",
            {"batch": "data", "rows": "data"},
            textbook=FSDP_TEXTBOOK,
        ),
        Preset(
            "tp",
            "Tensor parallel",
            "Every weight's output units split on model.",
            {"cols": "model"},
            textbook=MEGATRON_TEXTBOOK,
        ),
    ]
}


@register
class SineFamily(ModelFamily):
    name = "sine"
    title = "Residual MLP on a sine (example plug-in)"
    Spec = SineSpec
    Model = ResidualMLP
    logical_axes = {"batch": "rows of a batch", "rows": "a weight's input units", "cols": "a weight's output units"}
    presets = PRESETS
    default_preset = "dp"
    export_objects = (ResidualMLP, sine_points, squared_error)
    train_defaults = {"optimizer": "adamw", "lr": 0.01, "steps": 600}
    size_fields = {
        "features": SizeField("Features", 1, 4096, "--features", "hidden units"),
        "residual_blocks": SizeField("Residual blocks", 0, 8, "--residual-blocks"),
    }

    def batch(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        return {
            "x": ArraySpec((batch_size, 1), ("batch", None), "x"),
            "y": ArraySpec((batch_size, 1), ("batch", None), "y"),
        }

    def activation_bytes(self, spec, batch_size: int) -> int:
        return 2 * 4 * batch_size * spec.features * (spec.residual_blocks + 1)  # forward and backward

    def make_dataset(self, spec, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return sine_points(spec, seed)

    def loss(self, model, x: jax.Array, y: jax.Array) -> jax.Array:
        return squared_error(model, x, y)
