"""The pipelined model: the same model, its blocks' weights stacked along a ``layers`` axis.

Pipeline parallelism gives each stage a contiguous run of blocks. A mesh axis can only split an
*array*, so the blocks' weights are stacked — ``blocks/q`` of shape (layers, embed, heads,
head_dim) instead of ``blocks/0/q``, ``blocks/1/q``, … — with the logical axis ``layers`` first; the
rule ``layers → stage`` then leaves stage s holding blocks s·L/p … (s+1)·L/p − 1 and no other.

The model is built exactly as the family builds it (same random draws, so the same initial weights
as the unpipelined model at the same seed), then its blocks are stacked into :class:`StackedBlocks`.
Iterating a ``StackedBlocks`` yields one ordinary block per layer, so the family's own forward pass
(``for block in self.blocks``) still runs, unpipelined — the probe and the layout check use it;
the pipelined step calls :meth:`StackedBlocks.apply` on a stage's slice instead.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from flax import nnx

from ..errors import ConfigError
from ..models import ModelFamily, param

LAYERS = "layers"  # the logical axis of the stacked blocks


class StackedBlocks(nnx.Module):
    """Every block's weights in one array per weight, stacked along ``layers``."""

    def __init__(self, blocks, shard):
        first = blocks[0]
        self.template = nnx.graphdef(first)  # the block's structure, to rebuild one layer from a slice
        names = []
        for path, variable in nnx.to_flat_state(nnx.state(first, nnx.Param)):
            if len(path) != 1:
                raise ConfigError(
                    f"pipeline parallelism needs each block's weights as its direct "
                    f"attributes; {'/'.join(map(str, path))} is nested",
                    "rules",
                )
            name, meta = path[0], variable.get_metadata()
            stacked = jnp.stack([getattr(block, name)[...] for block in blocks])
            setattr(self, name, param(stacked, shard, meta["rule_name"], LAYERS, *meta["logical_axes"]))
            names.append(name)
        self.names = tuple(names)

    def weights(self) -> dict:
        """name → the stacked array (layers first)."""
        return {name: getattr(self, name)[...] for name in self.names}

    def apply(self, weights: dict, x):
        """Run the blocks whose stacked ``weights`` are given (a stage's slice) one after another."""
        for i in range(next(iter(weights.values())).shape[0]):
            x = nnx.merge(self.template, nnx.State({n: w[i] for n, w in weights.items()}))(x)
        return x

    def __iter__(self):
        weights = self.weights()
        for i in range(next(iter(weights.values())).shape[0]):
            yield nnx.merge(self.template, nnx.State({n: w[i] for n, w in weights.items()}))

    def __len__(self) -> int:
        return getattr(self, self.names[0])[...].shape[0]


@functools.lru_cache(maxsize=None)
def pipelined_family(base_type: type) -> ModelFamily:
    """The family ``base_type`` with its blocks stacked: same name, presets, data and loss; its
    parameters are read back from the stacked model; no activation constraints (the pipelined step
    runs the blocks inside ``shard_map`` over the stage axis, where the data and model axes are left
    to the compiler)."""

    class Pipelined(base_type):
        pipelined = True
        export_refusal = (
            "the export script does not cover pipeline parallelism yet: it would copy "
            "a step without the schedule — choose a preset without a stage axis"
        )

        def build(self, spec, shard, rngs):
            model = super().build(spec, shard, rngs)
            # the MLP takes its hidden layers out of its own attributes (take_blocks); the transformer has a list
            blocks = model.take_blocks() if hasattr(model, "take_blocks") else list(model.blocks)
            model.blocks = StackedBlocks(blocks, shard)
            return model

        def activations(self, spec, batch_size):
            return {}

    Pipelined.__name__ = Pipelined.__qualname__ = f"Pipelined{base_type.__name__}"
    return Pipelined()
