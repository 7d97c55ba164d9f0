"""Rematerialisation of the transformer's blocks: a ``lax.scan`` of one ``nnx.remat``-ed block
(:func:`rematerialised_blocks`) under a policy (:func:`remat_policy`), and the switch that unrolls that
loop for the cost's compiles (:class:`unrolled_scan`).

The policies are ``jax.checkpoint_policies`` under MaxText's names (``remat_policy`` in its base.yml):
``full`` saves nothing (each block recomputed from its input); ``save_qkv_proj`` saves the q, k and v
projections; ``minimal`` every projection's output but attention's context (q, k, v, the output
projection and the MLP's matrices: ``save_only_these_names``, the names the block gives them with
``checkpoint_name``); ``save_dots`` every matrix product without batch dimensions
(``dots_with_no_batch_dims_saveable``: the same projections, found by their shape, not their name).
"""

from __future__ import annotations

import contextvars

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from . import constrain_to


def remat_policy(name: str):
    """The ``jax.checkpoint`` policy of the remat option ``name`` (None for ``full``: nothing saved)."""
    policies = jax.checkpoint_policies
    projections = ("query_proj", "key_proj", "value_proj")
    return {
        "full": None,
        "save_qkv_proj": policies.save_only_these_names(*projections),
        "minimal": policies.save_only_these_names(*projections, "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo"),
        "save_dots": policies.dots_with_no_batch_dims_saveable,
    }[name]


def rematerialised_blocks(blocks, x, policy: str = "full"):
    """The blocks applied in turn, each rematerialised, and their mixture-of-experts statistics
    summed (:meth:`Block.forward`): the backward pass keeps only each block's
    input and recomputes the rest. The blocks' weights are stacked and run as a ``lax.scan`` of
    one ``nnx.remat``-ed block: around unrolled blocks, XLA:CPU drops the optimization barriers
    remat places and its CSE folds the recomputation back into the forward pass (measured: the
    same temporaries with and without), while a recomputation inside a loop body stays. ``policy``
    names what each block keeps besides its input (:func:`remat_policy`)."""
    graphdef, first = nnx.split(blocks[0])
    treedef = jax.tree.structure(first)
    # Leaves in the same order for every block (their metadata differs, so the trees are not equal).
    variables = jax.tree.leaves(first, is_leaf=lambda v: isinstance(v, nnx.Variable))
    per_layer = zip(*(jax.tree.leaves(nnx.split(b)[1]) for b in blocks))
    stacked = [stacked_as_stored(leaves, variable) for leaves, variable in zip(per_layer, variables)]

    @nnx.remat(policy=remat_policy(policy))
    def step(x, leaves):
        return nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves)).forward(x)

    x, stats = jax.lax.scan(step, x, stacked, unroll=unrolled_scan.factor())
    return x, jax.tree.map(jnp.sum, stats)


def stacked_as_stored(leaves, variable):
    """One weight of every layer stacked for the loop (in the dtype the step computes in: a mixed-precision
    step casts its weights before the model sees them), laid out as each layer's copy is stored, the layer
    axis whole. Left to itself, XLA's partitioner may lay the stack out as the loop body's products would
    like their operand and reshard it for every layer at once, before the loop: a gathered copy of that
    weight for all layers, live through the backward pass. Laid out as stored, each layer's weight is
    gathered inside the loop, for that layer alone (FSDP's way)."""
    spec = variable.get_metadata().get("out_sharding") if isinstance(variable, nnx.Variable) else None
    return constrain_to(jnp.stack(leaves), None if spec is None else P(None, *spec))


class unrolled_scan:  # noqa: N801  (a context manager, used like a function)
    """Inside ``with unrolled_scan():`` the rematerialised blocks' ``lax.scan`` is unrolled: the same
    blocks, each still an ``nnx.remat``, but with no loop in the program. ``unrolled_scan(2)`` unrolls it
    by 2 instead (a loop whose body runs two blocks). XLA's cost analysis counts a loop's body once,
    whatever its trip count, so the lab's cost of a scanned step is read from two compiles, by 1 and by 2
    (``compile_step`` in the cost package): their difference is one block's."""

    # The factors entered, innermost last: per thread, as a search's cost compiles (unrolled) and a page's or a
    # job's step (a loop) are traced at once on different threads.
    _depth = contextvars.ContextVar("unrolled_scan", default=())

    def __init__(self, factor: int | bool = True):
        self._factor = factor

    @classmethod
    def active(cls) -> bool:
        return bool(cls._depth.get())

    @classmethod
    def factor(cls) -> int | bool:
        """``lax.scan``'s ``unroll``: 1 (a loop of one block) outside any ``unrolled_scan``."""
        depth = cls._depth.get()
        return depth[-1] if depth else 1

    def __enter__(self):
        unrolled_scan._depth.set((*unrolled_scan._depth.get(), self._factor))

    def __exit__(self, *exc):
        unrolled_scan._depth.set(unrolled_scan._depth.get()[:-1])
