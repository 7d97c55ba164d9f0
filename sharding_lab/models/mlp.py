"""The MLP family: the seed's model, ``relu(x @ w1 + b1) @ w2``, on the seed's toy regression.

Each parameter names its dimensions by meaning (the seed's choice: ``w1`` and ``w2`` are both
``('embed', 'mlp')``, ``b1`` is ``('mlp',)``), and the batch's rows are ``data``. Optional extra
hidden layers ``wh1, bh1, ...`` sit between ``w1`` and ``w2``. The data: y = 0.8·x² + 0.1 + N(0, 0.1)
on 100 points in [-2, 2].
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..errors import ConfigError
from . import (
    DP_TEXTBOOK,
    FSDP_TEXTBOOK,
    MEGATRON_TEXTBOOK,
    PIPELINE_TEXTBOOK,
    REPLICATED_TEXTBOOK,
    ArraySpec,
    Expect,
    ModelFamily,
    Preset,
    SizeField,
    param,
    register,
)
from .ops import like_columns, matmul

MAX_WIDTH = 16384
MAX_HIDDEN_LAYERS = 8


@dataclasses.dataclass(frozen=True)
class MLPSpec:
    """The MLP's sizes: din → dmid (→ dmid × hidden_layers) → dout."""

    family: ClassVar[str] = "mlp"
    din: int = 1
    dmid: int = 32
    dout: int = 1
    hidden_layers: int = 0

    def validate(self) -> None:
        for name, value in (("din", self.din), ("dmid", self.dmid), ("dout", self.dout)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"model size {name} must be a whole number ≥ 1, got {value!r}", "model")
            if value > MAX_WIDTH:
                raise ConfigError(
                    f"model size {name}={value} is larger than this lab allows ({MAX_WIDTH}): pick a smaller width",
                    "model",
                )
        if not isinstance(self.hidden_layers, int) or not 0 <= self.hidden_layers <= MAX_HIDDEN_LAYERS:
            raise ConfigError(
                f"hidden layers must be between 0 and {MAX_HIDDEN_LAYERS}, got {self.hidden_layers!r}", "model"
            )


class HiddenLayer(nnx.Module):
    """One extra hidden layer, ``relu(h @ w + b)``: the unit the pipeline stacks and divides into stages
    (the lab's pipeline), built from the MLP's own ``wh<i>, bh<i>``."""

    def __init__(self, w: nnx.Param, b: nnx.Param):
        self.w, self.b = w, b

    def __call__(self, h):
        return MLP.hidden_layer(self.w, self.b, h)


class MLP(nnx.Module):
    """The seed's MLP; every parameter is born sharded as ``shard(name, *logical_axes)`` says."""

    def __init__(self, spec, shard, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.w1 = param(init(rngs.params(), (spec.din, spec.dmid)), shard, "w1", "embed", "mlp")
        self.b1 = param(jnp.zeros((spec.dmid,)), shard, "b1", "mlp")
        self.layers = [("w1", "b1")]
        for i in range(1, spec.hidden_layers + 1):
            setattr(self, f"wh{i}", param(init(rngs.params(), (spec.dmid, spec.dmid)), shard, f"wh{i}", "embed", "mlp"))
            setattr(self, f"bh{i}", param(jnp.zeros((spec.dmid,)), shard, f"bh{i}", "mlp"))
            self.layers.append((f"wh{i}", f"bh{i}"))
        self.w2 = param(init(rngs.params(), (spec.dmid, spec.dout)), shard, "w2", "embed", "mlp")

    def __call__(self, x):
        h = self.embed(x)
        for layer in self.hidden():
            h = layer(h)
        return self.head(h)

    # Pipeline parallelism (the lab's pipeline) runs __call__ in three parts: embed on the first stage,
    # the hidden layers stage by stage, head on the last.
    def embed(self, x):
        """The first layer, ``relu(x @ w1 + b1)``: what enters the hidden layers."""
        z = matmul(x, self.w1[...])
        return nnx.relu(z + like_columns(self.b1[...], z))

    def hidden(self):
        """The extra hidden layers in order, each a function of ``h`` (when pipelined: the stacked blocks')."""
        if hasattr(self, "blocks"):
            return list(self.blocks)
        return [functools.partial(self.hidden_layer, getattr(self, w), getattr(self, b)) for w, b in self.layers[1:]]

    @staticmethod
    def hidden_layer(w, b, h):
        """One extra hidden layer, ``relu(h @ w + b)``."""
        z = matmul(h, w[...])
        return nnx.relu(z + like_columns(b[...], z))

    def head(self, h):
        """The output layer, ``h @ w2``."""
        return matmul(h, self.w2[...])

    def take_blocks(self) -> list[HiddenLayer]:
        """The extra hidden layers as modules, taken out of this model (their ``wh<i>, bh<i>`` attributes go):
        the pipeline stacks them into ``blocks``."""
        blocks = [HiddenLayer(getattr(self, w), getattr(self, b)) for w, b in self.layers[1:]]
        for w, b in self.layers[1:]:
            delattr(self, w)
            delattr(self, b)
        self.layers = self.layers[:1]
        return blocks


def make_dataset(spec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(X, Y) of shape (100, din) and (100, dout): y = 0.8·x² + 0.1 + noise; extra columns repeat."""
    rng = np.random.default_rng(seed)
    x = np.linspace(-2, 2, 100, dtype=np.float32)[:, None]
    y = (0.8 * x**2 + 0.1 + rng.normal(0, 0.1, size=x.shape)).astype(np.float32)
    return np.repeat(x, spec.din, axis=1), np.repeat(y, spec.dout, axis=1)


def mse_loss(model, x, y):
    """The seed's loss: mean squared error."""
    return jnp.mean((y - model(x)) ** 2)


DP, FSDP, MEGATRON = DP_TEXTBOOK, FSDP_TEXTBOOK, MEGATRON_TEXTBOOK  # on paper (models/__init__.py)

# Values are roles: "data" and "model" are replaced by the mesh's axes playing those roles.
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "seed",
            "Seed (the blog's rules)",
            "The Flax example's MeshRules: batch split on data, hidden units (mlp) split on model, "
            "embed replicated — so w2 (32×1) cannot split and JAX replicates it.",
            {"embed": None, "mlp": "model", "data": "data"},
            textbook=DP + (Expect(("all-gather", "all-reduce"), "activations", "forward", "model"),),
        ),
        Preset(
            "replicated",
            "Replicated",
            "Every device holds every parameter and the whole batch: no sharding at all.",
            {"embed": None, "mlp": None, "data": None},
            textbook=REPLICATED_TEXTBOOK,
        ),
        Preset(
            "dp",
            "Data parallel",
            "The batch is split on data; every device keeps a full copy of the parameters.",
            {"embed": None, "mlp": None, "data": "data"},
            textbook=DP,
        ),
        Preset(
            "fsdp",
            "FSDP (fully sharded)",
            "The batch and every parameter are split on data, so each device stores only its slice "
            "of parameters and momentum.",
            {"embed": None, "mlp": "data", "data": "data"},
            (("w2", ("data", None)),),
            textbook=FSDP,
        ),
        Preset(
            "tp",
            "Tensor parallel",
            "w1 is split by columns and w2 by rows on model, so the hidden layer lives in "
            "slices; the batch is not split.",
            {"embed": None, "mlp": "model", "data": None},
            (("w2", ("model", None)),),
            textbook=MEGATRON,
        ),
        Preset(
            "fsdp_tp",
            "FSDP + tensor parallel",
            "Hidden units split on model (w1 columns, w2 rows) and again on data, so each device "
            "stores 1/(data×model) of the weights; the batch is split on data.",
            {"embed": None, "mlp": ("model", "data"), "data": "data"},
            (("w2", (("model", "data"), None)),),
            needs_two_axes=True,
            textbook=FSDP + MEGATRON,
        ),
        Preset(
            "pp",
            "Pipeline parallel (+ data)",
            "The extra hidden layers split into stages on stage (w1 with the first, w2 with the last), the "
            "batch into microbatches that flow through them (GPipe or 1F1B); each stage sends activations to "
            "the next and their gradients back. The batch on data. Needs extra hidden layers.",
            {"embed": None, "mlp": None, "data": "data", "layers": "stage"},
            needs_two_axes=True,
            textbook=PIPELINE_TEXTBOOK,
        ),
    ]
}


@register
class MLPFamily(ModelFamily):
    name = "mlp"
    title = "MLP (the seed)"
    Spec = MLPSpec
    Model = MLP
    logical_axes = {
        "embed": "model input features (w1, w2 rows in the seed)",
        "mlp": "hidden units (w1 columns, b1)",
        "data": "batch rows",
        "layers": "the extra hidden layers: mapped to a mesh axis, they are stacked and split into pipeline stages",
    }
    blocks_field = "hidden_layers"  # the Spec field that counts what the pipeline divides into stages
    presets = PRESETS
    default_preset = "seed"
    export_objects = (MLP, make_dataset, mse_loss)
    size_fields = {
        "din": SizeField("din", 1, 4096, "--din", "input features"),
        "dmid": SizeField("dmid", 1, MAX_WIDTH, "--width", "hidden width (the seed: 32)"),
        "dout": SizeField("dout", 1, 4096, "--dout", "outputs"),
        "hidden_layers": SizeField("Extra hidden layers", 0, MAX_HIDDEN_LAYERS, "--hidden-layers"),
    }

    def batch(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        return {
            "x": ArraySpec((batch_size, spec.din), ("data", None), "x"),
            "y": ArraySpec((batch_size, spec.dout), ("data", None), "y"),
        }

    def activation_bytes(self, spec, batch_size: int) -> int:
        return 2 * 4 * batch_size * spec.dmid * (spec.hidden_layers + 1)  # forward and backward

    def make_dataset(self, spec, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return make_dataset(spec, seed)

    def loss(self, model, x: jax.Array, y: jax.Array) -> jax.Array:
        return mse_loss(model, x, y)

    def target_count(self, y: jax.Array) -> jax.Array:
        """How many numbers the loss averages over: the mean squared error's denominator."""
        return jnp.asarray(y.size, jnp.float32)

    def partial_loss(self, model, h: jax.Array, y: jax.Array, count: jax.Array) -> jax.Array:
        """One microbatch's share of :func:`mse_loss` whose last hidden layer output is ``h``: its summed squared
        error over the whole batch's ``count``, so the microbatches' shares add up to the batch's loss."""
        return jnp.sum((y - model.head(h)) ** 2) / count
