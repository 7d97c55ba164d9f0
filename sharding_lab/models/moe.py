"""The mixture of experts' routing (GShard, Switch Transformer): each token's top-k experts, each expert's
capacity, the dispatch of tokens to their experts' slots and the combine of the experts' outputs — the MLP of a
transformer block with ``experts`` > 0 (:class:`~sharding_lab.models.transformer.Block`)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from . import constrain

# Each batch row (a sequence) is one *group* of tokens routed together (GShard's groups): each expert
# takes at most `capacity` of a group's tokens, and the dispatched tensor is (expert, group, slot, embed).
# Three layouts of it, each a constrained activation (the rules place them): `routed`, the tokens put
# in their experts' slots where they are (groups split as the batch is: over data and, under ep, over
# expert too); `dispatched`, the same tensor with its expert dimension split over the `expert` mesh axis
# and its groups only over what the batch uses besides (`groups`) — going from the one to the other,
# each device keeps its own experts' slots of every group and sends the rest: an all-to-all; and
# `returned`, the experts' outputs moved back to their tokens' devices the same way before the combine.
# The routing is pure elementwise work and reductions along each group, so no device needs another's.

NO_STATS = (0.0, 0.0)  # a dense block's (load-balancing loss, dropped token choices)


# The load-balancing loss's weight in the training loss (Switch Transformer's α = 10⁻²).
AUX_LOSS_COEFFICIENT = 0.01


@dataclasses.dataclass(frozen=True)
class Routing:
    """What one block's router chose for a batch: ``logits`` (batch, seq, experts), ``chosen``
    (batch, seq, top_k) the experts of each token in order of preference, ``kept`` (batch, seq,
    top_k) whether that choice found room within the expert's capacity (else it was dropped), and
    the block's load-balancing loss."""

    logits: jax.Array
    chosen: jax.Array
    kept: jax.Array
    aux_loss: jax.Array  # this block's load-balancing loss
    capacity: int  # slots per expert per sequence


jax.tree_util.register_dataclass(
    Routing, data_fields=["logits", "chosen", "kept", "aux_loss"], meta_fields=["capacity"]
)


def expert_capacity(spec_or_block, tokens: int) -> int:
    """How many of a group's ``tokens`` one expert takes: ceil(capacity_factor × tokens × top_k /
    experts) (Switch Transformer, GShard), at most ``tokens`` (a token picks an expert once)."""
    e, k, f = spec_or_block.experts, spec_or_block.top_k, float(spec_or_block.capacity_factor)
    return max(1, min(tokens, math.ceil(f * tokens * k / e)))


def top_k_experts(probs, k: int):
    """The ``k`` largest router probabilities of each token and their experts, best first, by
    ``k`` rounds of argmax (ties go to the lower expert, as a stable sort's would). Not
    ``lax.top_k``: measured on XLA:CPU, its partitioner gathers the whole batch onto every device
    first, where an argmax keeps each device on its own tokens."""
    picked, chosen = [], []
    for _ in range(k):
        best = jnp.argmax(probs, axis=-1)
        picked.append(jnp.take_along_axis(probs, best[..., None], axis=-1)[..., 0])
        chosen.append(best)
        probs = jnp.where(jax.nn.one_hot(best, probs.shape[-1]) > 0, -jnp.inf, probs)
    return jnp.stack(picked, axis=-1), jnp.stack(chosen, axis=-1)


def route(block, h):
    """The router's decision for tokens ``h`` (batch, seq, embed): the dispatch and combine
    tensors (batch, seq, experts, capacity) — one-hot slots, the combine's weighted by the token's
    renormalised router probability —, the load-balancing loss and the count of dropped choices,
    and the :class:`Routing`. A token's first choices are served before anyone's second (Switch's
    priority), each group's tokens in order; a choice past the expert's capacity is dropped."""
    logits = constrain(jnp.einsum("bse,ex->bsx", h, block.router[...]), "router_logits")
    probs = jax.nn.softmax(logits, axis=-1)
    weights, chosen = top_k_experts(probs, block.top_k)
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    b, s, k, e = *chosen.shape, block.experts
    capacity = expert_capacity(block, s)
    mask = jax.nn.one_hot(chosen, e)  # (b, s, k, e)
    by_priority = mask.transpose(0, 2, 1, 3).reshape(b, k * s, e)  # every first choice, then every second …
    slot = (jnp.cumsum(by_priority, axis=1) * by_priority - 1).reshape(b, k, s, e).transpose(0, 2, 1, 3)
    kept_choice = (slot < capacity) & (mask > 0)  # (b, s, k, e)
    slots = jax.nn.one_hot(jnp.where(kept_choice, slot, -1).astype(jnp.int32), capacity)  # (b, s, k, e, c)
    dispatch = jnp.sum(slots, axis=2)
    combine = jnp.sum(slots * weights[..., None, None], axis=2)
    # Switch Transformer's load-balancing loss: experts × Σ_e (share of choices routed to e) × (mean
    # router probability of e); 1 when both are uniform, larger when the router favours a few experts.
    share = jnp.mean(jnp.sum(mask, axis=2), axis=(0, 1)) / k
    aux = e * jnp.sum(share * jnp.mean(probs, axis=(0, 1)))
    dropped = jnp.sum(mask) - jnp.sum(kept_choice)
    return dispatch, combine, (aux, dropped), Routing(logits, chosen, jnp.any(kept_choice, axis=-1), aux, capacity)


def moe_mlp(block, h):
    """The mixture-of-experts MLP on ``h`` (batch, seq, embed): route, dispatch each token to its
    experts' slots (einsum with the one-hot dispatch tensor, GShard's way), run every expert on its
    slots (the dense MLP, one weight per expert), and combine each token's expert outputs weighted
    by its router probabilities. Returns (output, (aux loss, dropped choices), Routing)."""
    dispatch, combine, stats, routing = route(block, h)
    # In h's dtype: the float32 one-hots would promote a bf16 block's experts (and their output) to float32.
    dispatch, combine = dispatch.astype(h.dtype), combine.astype(h.dtype)
    with jax.named_scope(DISPATCH_SCOPE):
        routed = constrain(jnp.einsum("bsxc,bse->xbce", dispatch, h), "routed")
        dispatched = constrain(routed, "dispatched")
    with jax.named_scope(EXPERTS_SCOPE):
        up = jnp.einsum("xbce,xem->xbcm", dispatched, block.expert_in[...])
        if block.gated:
            hidden = jax.nn.silu(jnp.einsum("xbce,xem->xbcm", dispatched, block.expert_gate[...])) * up
        else:
            hidden = jax.nn.gelu(up)
        hidden = constrain(hidden, "expert_hidden")
        out = constrain(jnp.einsum("xbcm,xme->xbce", hidden, block.expert_out[...]), "expert_outputs")
    with jax.named_scope(COMBINE_SCOPE):
        returned = constrain(out, "returned")
        return jnp.einsum("bsxc,xbce->bse", combine, returned), stats, routing


# Named scopes of the three parts (jax.named_scope): they reach the compiled program's op metadata,
# which is how the Communication page tells a dispatch's all-to-all from a combine's.
DISPATCH_SCOPE, EXPERTS_SCOPE, COMBINE_SCOPE = "moe_dispatch", "moe_experts", "moe_combine"
