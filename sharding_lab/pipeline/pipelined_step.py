"""The pipelined training step: the schedule's table run tick by tick inside ``jax.shard_map`` over
the stage axis, activations sent forward and their gradients back with ``jax.lax.ppermute``.

``shard_map`` is manual only over the stage axis (``axis_names={stage}``): each stage sees its own
slice of the stacked blocks (``layers`` split on ``stage``) and writes its sends by hand; the data
(and model) axes stay *automatic* inside, so the compiler splits each microbatch's rows over
``data`` and all-reduces the gradients as it does for data parallelism.

Each tick, every stage looks up its cell of the table (:mod:`.schedule`) and runs one branch of a
``lax.switch`` — idle, forward or backward of one microbatch:

- **forward** — the first stage embeds the microbatch's tokens; the others read the input that
  arrived from the previous stage. The input is kept (in its slot) for the backward, and the blocks'
  output is sent on.
- **backward** — the stage runs its blocks again from the kept input under ``jax.vjp`` (GPipe's
  re-materialisation: only stage inputs are kept, not every activation) and pulls back the gradient
  that arrived from the next stage — or, on the last stage, the gradient of its loss share (the head
  and cross-entropy of this microbatch). It adds the weights' gradients to its sums and sends the
  input's gradient back.

After the switch the tick's sends happen: one ``ppermute`` forward whose pairs are exactly the stages
that ran a forward this tick, one backward likewise (none when no stage sends), each scoped
``pipeline_forward`` / ``pipeline_backward`` so the Communication page can name what they carry.
The first stage's embedding and the last stage's head are computed inside the masked functions on
every stage (``jnp.where`` picks the stage's own input), a simplification that costs one embedding
per microbatch on the other stages. The loss is the sum of the microbatches' shares, each divided by
the whole batch's target count — the same number, and the same gradients, as the unpipelined step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..sharding.rules import axis_names
from . import BACKWARD_SCOPE, FORWARD_SCOPE, GRADIENT_SCOPE, schedule_of
from . import schedule as schedules
from .schedule import BACKWARD, FORWARD, IDLE


def tables(table: schedules.Schedule) -> dict[str, np.ndarray]:
    """The schedule as integer arrays [tick, stage]: ``kind`` (idle/forward/backward), ``mb``
    (microbatch), ``act`` / ``grad`` (the slot the work reads), ``recv_act`` / ``recv_grad`` (the
    slot an arriving activation / gradient goes to at the tick's end; -1: nothing arrives)."""
    p, ticks = table.stages, table.ticks
    out = {
        name: np.full((ticks, p), fill, np.int32)
        for name, fill in (("kind", IDLE), ("mb", 0), ("act", 0), ("grad", 0), ("recv_act", -1), ("recv_grad", -1))
    }
    slots = table.slots
    for t, row in enumerate(table.grid):
        for s, cell in enumerate(row):
            if cell is None:
                continue
            k = cell.microbatch
            out["mb"][t, s] = k
            out["act"][t, s] = slots[("act", s, k)]
            if cell.kind == "F":
                out["kind"][t, s] = FORWARD
                if s + 1 < p:
                    out["recv_act"][t, s + 1] = slots[("act", s + 1, k)]
            else:
                out["kind"][t, s] = BACKWARD
                if s + 1 < p:
                    out["grad"][t, s] = slots[("grad", s, k)]
                if s > 0:
                    out["recv_grad"][t, s - 1] = slots[("grad", s - 1, k)]
    return out


def _split(params: nnx.State) -> tuple[nnx.State, nnx.State]:
    """(the stacked blocks' weights, every other parameter)."""
    return params["blocks"], nnx.State({k: v for k, v in params.items() if k != "blocks"})


def _join(blocks: nnx.State, rest: nnx.State) -> nnx.State:
    return nnx.State({**dict(rest.items()), "blocks": blocks})


def microbatches(a: jax.Array, m: int) -> jax.Array:
    """(batch, …) → (m, batch/m, …), microbatch i = rows i, i+m, i+2m, …: each data shard's rows
    spread evenly over the microbatches, so splitting needs no communication."""
    return jnp.swapaxes(a.reshape(a.shape[0] // m, m, *a.shape[1:]), 0, 1)


def make_pipelined_step(plan, graphdef):
    """The pipelined counterpart of :func:`sharding_lab.training.step.make_train_step`: the same
    signature ``(state, x, y) → (state, loss)``, the same loss and gradients."""
    config, mesh = plan.config, plan.mesh
    family, axis, m = config.family, config.stage_axis, config.microbatches
    batch_axes = plan.spec("batch/x")[0] if len(plan.spec("batch/x")) else None
    data_axes = tuple(a for a in axis_names(batch_axes) if a != axis)
    manual = (axis, *data_axes)  # the axes shard_map hands to us; the others stay with the compiler
    # When every axis shard_map hands us has size 1 (pp_tp on a 1×1×8 mesh: one stage, one data shard),
    # XLA's SPMD partitioner does not see a manual region and stops at the first sum across it (RET_CHECK
    # "Cross-partition allreduce must be in (partial) manual partitioning mode", jax 0.10.2 — found by the
    # class warm-up). A sum over one device is the value itself: skip those sums, and JAX's check that
    # asks for them (`check_vma`).
    alone = all(mesh.shape[a] == 1 for a in manual)
    run = _stages(plan, data_axes, manual, alone)

    def train_step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)
        model_def, params = nnx.split(model, nnx.Param)
        blocks, rest = _split(params)
        rows = P(None, data_axes or None)
        xm = jax.lax.with_sharding_constraint(microbatches(x, m), NamedSharding(mesh, rows))
        ym = jax.lax.with_sharding_constraint(microbatches(y, m), NamedSharding(mesh, rows))
        count = family.target_count(y)
        piped = jax.shard_map(
            lambda b, r, xm, ym, c: run(b, r, xm, ym, c, model_def),
            mesh=mesh,
            in_specs=(P(axis), P(), rows, rows, P()),
            out_specs=(P(axis), P(), P()),
            axis_names=set(manual),
            check_vma=not alone,
        )
        d_blocks, d_rest, loss = piped(blocks, rest, xm, ym, count)
        # the gradients in the parameters' own tree (a dict where nnx.state nests one, as the seed's momentum
        # optimizer maps the two trees together), leaf by leaf in the same sorted-key order
        grads = jax.tree.unflatten(jax.tree.structure(params), jax.tree.leaves(_join(d_blocks, d_rest)))
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return train_step


def _stages(plan, data_axes: tuple, manual: tuple, alone: bool):
    """The body under shard_map, ``run(blocks, rest, xm, ym, count, model_def)``: this stage's blocks, every other
    weight and all microbatches in; the table run tick by tick; the summed gradients and loss out."""
    config, mesh = plan.config, plan.mesh
    axis = config.stage_axis
    p = mesh.shape[axis]
    table = schedule_of(config)
    cells = {name: jnp.asarray(values) for name, values in tables(table).items()}
    n_act, n_grad = table.slot_count("act"), table.slot_count("grad")
    psum = (lambda value, axes: value) if alone else jax.lax.psum

    def run(blocks, rest, xm, ym, count, model_def):
        s = jax.lax.axis_index(axis)
        varying = lambda a, axes=manual: jax.lax.pcast(a, axes, to="varying")  # noqa: E731
        # The other weights are the same on every stage and data shard; the blocks the same on every
        # data shard. Marked as varying here, outside any derivative: else the vjp of a backward tick
        # would sum their gradients over those axes right there (the transpose of the cast) — once
        # per microbatch, and over the stages inside one stage's branch, which the other stages
        # never join. Summed once, after the last tick, below.
        rest = jax.tree.map(varying, rest)
        blocks = jax.tree.map(lambda a: varying(a, data_axes), blocks) if data_axes else blocks
        # What one stage hands the next for one microbatch: the shape of the embedded tokens.
        act = jax.eval_shape(lambda r, t: nnx.merge(model_def, _join(blocks, r)).embed(t), rest, xm[0])
        store = varying(jnp.zeros((n_act, *act.shape), act.dtype))
        inbox = varying(jnp.zeros((n_grad, *act.shape), act.dtype))
        nothing = varying(jnp.zeros(act.shape, act.dtype))
        grads = (jax.tree.map(jnp.zeros_like, blocks), jax.tree.map(jnp.zeros_like, rest))
        loss = varying(jnp.zeros((), jnp.float32))
        work = _Work(config.family, model_def, blocks, rest, xm, ym, count, s == 0, s == p - 1, nothing)
        branches = [work.idle, work.forward, work.backward]
        kinds, carry = cells["kind"], (store, inbox, grads, loss)
        for t in range(table.ticks):
            k, a, g = cells["mb"][t][s], cells["act"][t][s], cells["grad"][t][s]
            carry, send_act, send_grad = jax.lax.switch(kinds[t][s], branches, carry, k, a, g)
            store, inbox, grads, loss = carry
            store, inbox = _exchange(table.grid[t], p, axis, (cells, t, s), (send_act, send_grad), store, inbox)
            carry = (store, inbox, grads, loss)
        _, _, (d_blocks, d_rest), loss = carry
        with jax.named_scope(GRADIENT_SCOPE):
            # Each data shard's gradients summed once per step (data parallelism's all-reduce); the
            # other weights' gradients also over the stages (only the first and last have any).
            d_blocks = psum(d_blocks, data_axes) if data_axes else d_blocks
            return d_blocks, psum(d_rest, manual), psum(loss, manual)

    return run


class _Work:
    """What a stage does in one tick, as the three branches of its ``lax.switch`` (each ``(carry, k, a, g) →
    (carry, activation sent on, gradient sent back)`` for microbatch ``k``, activation slot ``a``, gradient
    slot ``g``): idle, forward, backward."""

    def __init__(self, family, model_def, blocks, rest, xm, ym, count, first, last, nothing):
        self.family, self.model_def, self.blocks, self.rest = family, model_def, blocks, rest
        self.xm, self.ym, self.count, self.first, self.last, self.nothing = xm, ym, count, first, last, nothing

    def stage_input(self, model, kept, tokens):
        """The first stage embeds the tokens; the others take the input that arrived."""
        return jnp.where(self.first, model.embed(tokens), kept)

    def stage(self, blocks, rest, kept, tokens, targets):
        """This stage on one microbatch: (its blocks' output, its loss share — nonzero on the last)."""
        model = nnx.merge(self.model_def, _join(blocks, rest))
        h = model.blocks.apply({n: blocks[n][...] for n in model.blocks.names}, self.stage_input(model, kept, tokens))
        return h, jnp.where(self.last, self.family.partial_loss(model, h, targets, self.count), 0.0)

    def idle(self, carry, k, a, g):
        return carry, self.nothing, self.nothing

    @jax.named_scope(FORWARD_SCOPE)  # what the compiler adds inside (tensor parallelism) is forward
    def forward(self, carry, k, a, g):
        store, inbox, grads, loss = carry
        blocks = self.blocks
        model = nnx.merge(self.model_def, _join(blocks, self.rest))
        x_in = self.stage_input(model, store[a], self.xm[k])
        h = model.blocks.apply({n: blocks[n][...] for n in model.blocks.names}, x_in)
        return (store.at[a].set(x_in), inbox, grads, loss), h, self.nothing

    @jax.named_scope(BACKWARD_SCOPE)  # the recomputed forward included: it runs in the backward pass
    def backward(self, carry, k, a, g):
        store, inbox, grads, loss = carry
        xm, ym = self.xm, self.ym
        (h, share), pull = jax.vjp(lambda b, r, x: self.stage(b, r, x, xm[k], ym[k]), self.blocks, self.rest, store[a])
        d_blocks, d_rest, d_x = pull((jnp.where(self.last, jnp.zeros_like(h), inbox[g]), jnp.ones_like(share)))
        grads = (jax.tree.map(jnp.add, grads[0], d_blocks), jax.tree.map(jnp.add, grads[1], d_rest))
        return (store, inbox, grads, loss + share), self.nothing, d_x


def _exchange(row, p: int, axis: str, at: tuple, sends: tuple, store, inbox):
    """The tick's sends (``row`` of the table): one ppermute forward between exactly the stages that ran a forward,
    one backward likewise (none when no stage sends); what arrives goes to the slot the table names for it
    (``at``: the cells, the tick and this stage). Returns the stage's (store, inbox)."""
    cells, t, s = at
    send_act, send_grad = sends
    forward_pairs = [(i, i + 1) for i in range(p - 1) if row[i] is not None and row[i].kind == "F"]
    backward_pairs = [(i, i - 1) for i in range(1, p) if row[i] is not None and row[i].kind == "B"]
    if forward_pairs:
        with jax.named_scope(FORWARD_SCOPE):
            arrived = jax.lax.ppermute(send_act, axis, forward_pairs)
        slot = cells["recv_act"][t][s]
        store = jnp.where(slot >= 0, store.at[jnp.maximum(slot, 0)].set(arrived), store)
    if backward_pairs:
        with jax.named_scope(BACKWARD_SCOPE):
            arrived = jax.lax.ppermute(send_grad, axis, backward_pairs)
        slot = cells["recv_grad"][t][s]
        inbox = jnp.where(slot >= 0, inbox.at[jnp.maximum(slot, 0)].set(arrived), inbox)
    return store, inbox
