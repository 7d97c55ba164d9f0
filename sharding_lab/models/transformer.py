"""The transformer family: a decoder-only transformer (token + position embeddings, L pre-norm
blocks of causal attention and an MLP, a final norm, an unembedding) on a task that needs
attention — reversing a sequence.

Every parameter names its dimensions by meaning: the q kernel is ``(embed, heads, head_dim)``, k
and v ``(embed, kv_heads, head_dim)``, the output kernel ``(heads, head_dim, embed)``, the MLP
``(embed, mlp)`` (``mlp_in``, and ``mlp_gate`` under SwiGLU) and ``(mlp, embed)``, the embedding
``(vocab, embed)`` and the unembedding ``(embed, vocab)``. Rule names are shared by every layer
(``q``, ``o``, ``mlp_in``, ...), so one override applies to all blocks.

Real decoders' shapes are options whose defaults are the small model the app trains:
grouped-query attention (``kv_heads``), a SwiGLU MLP, tied embeddings, rotary positions, and
rematerialisation of each block (``remat``). ``named_sizes`` holds public models' shapes
(GPT-2 small, Llama 3 8B and 70B), each with its model card, for planning: their parameter counts
are computed from the abstract shapes, and training them is refused by the memory check.

Activations are arrays too: the forward pass constrains the residual stream (``resid``), each
norm's output as it enters a sublayer (``normed``), the attention scores, the attention output before its
projection, the MLP's hidden units and the
logits with :func:`constrain`, and :meth:`TransformerFamily.activations` declares them.

Two sequence axes: ``seq`` is the sequence of the residual stream (and of the tokens, targets and
position embedding) — what sequence parallelism splits between the sublayers, where each token is
handled on its own (norms, residual adds); ``inner_seq`` is the sequence *inside* attention and
the MLP, where Megatron splits heads and hidden units instead. One logical name for both could not
express sequence parallelism: the scores would need ``seq`` and ``heads`` on the same mesh axis.

The task: each row is ``a_1 … a_h a_h … a_1`` (h = seq/2 random tokens, then the same reversed);
the model predicts the next token, and only the second half is predictable, so the loss is the
mean cross-entropy over those h positions (targets -1 elsewhere). Predicting ``a_{h-j}`` at
position ``h+j-1`` means looking back at position ``h-1-j``: attention, by position.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..errors import ConfigError
from . import (  # noqa: E402  (the pp and ep presets)
    DP_TEXTBOOK,
    EXPERT_TEXTBOOK,
    FSDP_TEXTBOOK,
    MEGATRON_TEXTBOOK,
    PIPELINE_TEXTBOOK,
    REPLICATED_TEXTBOOK,
    SEQUENCE_TEXTBOOK,
    ArraySpec,
    ChoiceField,
    ModelFamily,
    NamedSize,
    Preset,
    SizeField,
    constrain,
    param,
    recording_activations,
    register,
)

# Limits that allow a real model to be *planned* (Llama 3 70B: 80 layers, embed 8192, mlp 28672,
# vocab 128256, seq 8192); training such a size is refused by the memory check, not by these.
LIMITS = {
    "layers": (1, 128),
    "embed_dim": (1, 16384),
    "heads": (1, 128),
    "kv_heads": (0, 128),
    "head_dim": (1, 1024),
    "mlp_dim": (1, 65536),
    "vocab": (2, 262144),
    "seq": (4, 32768),
    "experts": (0, 256),
    "top_k": (1, 256),
}
# Options that are words, not numbers; the first of each is today's model (and the default).
CHOICES = {
    "mlp_type": ("gelu", "swiglu"),
    "embeddings": ("untied", "tied"),
    "positions": ("learned", "rope"),
    "remat": ("none", "full"),
    # A mixture of experts' capacity factor, as a choice among the values papers use (Switch
    # Transformer: 1.0 and 1.25; GShard: 2.0), so that every form and link handles it as a word.
    "capacity_factor": ("1.25", "1.0", "1.5", "2.0"),
}
# The load-balancing loss's weight in the training loss (Switch Transformer's α = 10⁻²).
AUX_LOSS_COEFFICIENT = 0.01


@dataclasses.dataclass(frozen=True)
class TransformerSpec:
    """The transformer's sizes and options; defaults train in seconds on two CPU cores.

    ``kv_heads`` 0 means as many K/V heads as query heads (multi-head attention); fewer is
    grouped-query attention, each K/V head shared by ``heads // kv_heads`` query heads.
    ``mlp_type``: ``gelu`` (two matrices, GPT-2's) or ``swiglu`` (gate, up, down: Llama's).
    ``embeddings``: ``tied`` reuses the token embedding as the unembedding (GPT-2), ``untied`` has
    its own (Llama 3). ``positions``: a ``learned`` table (GPT-2) or ``rope``, rotary, no parameters
    (Llama). ``remat``: ``full`` recomputes each block in the backward pass, keeping only its input.
    ``experts``: 0 is the dense MLP; more makes each block's MLP a mixture of that many experts, of
    which each token uses ``top_k``, each expert taking at most ``capacity_factor`` × its fair share
    of a sequence's tokens (:func:`moe_mlp`).
    """

    family: ClassVar[str] = "transformer"
    layers: int = 2
    embed_dim: int = 64  # not "embed": Streamlit reserves the ?embed= query parameter of a share link
    heads: int = 4
    head_dim: int = 16
    mlp_dim: int = 256
    vocab: int = 32
    seq: int = 32
    kv_heads: int = 0
    mlp_type: str = "gelu"
    embeddings: str = "untied"
    positions: str = "learned"
    remat: str = "none"
    experts: int = 0
    top_k: int = 2
    capacity_factor: str = "1.25"

    def validate(self) -> None:
        for name, (low, high) in LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ConfigError(
                    f"transformer size {name} must be a whole number from {low} to {high:,}, got {value!r}", "model"
                )
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"transformer {name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}", "model"
                )
        if self.seq % 2:
            raise ConfigError(
                f"transformer seq must be even (a sequence and its reverse), got {self.seq}: try {self.seq + 1}",
                "model",
            )
        if self.heads % kv_heads_of(self):
            divisors = [k for k in range(1, self.heads + 1) if self.heads % k == 0]
            near = sorted(divisors, key=lambda k: abs(k - self.kv_heads))[:2]
            raise ConfigError(
                f"transformer heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}): "
                f"each K/V head serves the same number of query heads — try kv_heads "
                f"{' or '.join(map(str, sorted(near)))}, or 0 for one per query head",
                "model",
            )
        if self.experts and self.top_k > self.experts:
            raise ConfigError(
                f"top_k ({self.top_k}) cannot exceed experts ({self.experts}): each token picks top_k "
                f"different experts — try top_k {min(2, self.experts)} or experts {self.top_k} or more",
                "model",
            )
        if self.positions == "rope" and self.head_dim % 2:
            raise ConfigError(
                f"rotary positions turn pairs of features, so head_dim must be even, got "
                f"{self.head_dim}: try {self.head_dim + 1}",
                "model",
            )


def kv_heads_of(spec) -> int:
    """The number of K/V heads (``kv_heads``, or ``heads`` when it is 0)."""
    return spec.kv_heads or spec.heads


def rms_norm(x, scale):
    """RMSNorm over the last (embed) dimension, with a learned scale."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def kernel(key, shape, fan_in):
    """A weight drawn from N(0, 1/fan_in): activations keep their scale through the layer."""
    return jax.random.normal(key, shape) * fan_in**-0.5


def rope(x, theta=10_000.0):
    """Rotary positions (Su et al. 2021) on ``x`` (batch, seq, heads, head_dim): feature pair i of
    position p turned by the angle p·θ^(-2i/head_dim), so q·k depends on their distance. θ is
    RoFormer's 10,000; Llama 3 uses 500,000 (a frequency, not a parameter: the counts agree)."""
    half = x.shape[-1] // 2
    angles = jnp.arange(x.shape[1])[:, None] * theta ** (-jnp.arange(half) / half)[None, :]
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class Block(nnx.Module):
    """One pre-norm decoder block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, spec, shard, rngs: nnx.Rngs):
        e, h, kv, d, m = spec.embed_dim, spec.heads, kv_heads_of(spec), spec.head_dim, spec.mlp_dim
        self.rope = spec.positions == "rope"
        self.attn_norm = param(jnp.ones((e,)), shard, "norm", "embed")
        self.q = param(kernel(rngs.params(), (e, h, d), e), shard, "q", "embed", "heads", "head_dim")
        # K and V are sized by kv_heads (grouped-query attention): their own logical axis, so a
        # rule can place them apart from the query heads (tp puts both on model).
        self.k = param(kernel(rngs.params(), (e, kv, d), e), shard, "k", "embed", "kv_heads", "head_dim")
        self.v = param(kernel(rngs.params(), (e, kv, d), e), shard, "v", "embed", "kv_heads", "head_dim")
        self.o = param(kernel(rngs.params(), (h, d, e), h * d), shard, "o", "heads", "head_dim", "embed")
        self.mlp_norm = param(jnp.ones((e,)), shard, "norm", "embed")
        self.gated = spec.mlp_type == "swiglu"
        self.experts, self.top_k = spec.experts, spec.top_k
        self.capacity_factor = float(spec.capacity_factor)
        if self.experts:  # a mixture of experts: a router, and each MLP weight stacked along `expert`
            n = spec.experts
            # The router's output dimension is not `expert`: it is small, and every device routes its own
            # tokens to every expert, so it stays whole wherever the experts go.
            self.router = param(kernel(rngs.params(), (e, n), e), shard, "router", "embed", None)
            if self.gated:
                self.expert_gate = param(
                    kernel(rngs.params(), (n, e, m), e), shard, "expert_gate", "expert", "embed", "mlp"
                )
            self.expert_in = param(kernel(rngs.params(), (n, e, m), e), shard, "expert_in", "expert", "embed", "mlp")
            self.expert_out = param(kernel(rngs.params(), (n, m, e), m), shard, "expert_out", "expert", "mlp", "embed")
            return
        if self.gated:  # SwiGLU (Shazeer 2020): silu(x·gate) * (x·up), then down; Llama's MLP
            self.mlp_gate = param(kernel(rngs.params(), (e, m), e), shard, "mlp_gate", "embed", "mlp")
        self.mlp_in = param(kernel(rngs.params(), (e, m), e), shard, "mlp_in", "embed", "mlp")
        self.mlp_out = param(kernel(rngs.params(), (m, e), m), shard, "mlp_out", "mlp", "embed")

    def __call__(self, x):
        return self.forward(x)[0]

    def forward(self, x, routing: bool = False):
        """The block's output and its mixture-of-experts statistics (:func:`moe_mlp`; zeros for a
        dense MLP) — with ``routing``, also the router's choices (:class:`Routing`)."""
        seq = x.shape[1]
        # The sublayer's input: under sequence parallelism the norm ran on this device's positions,
        # and here the whole sequence is gathered (Megatron-SP's all-gather) before the q/k/v matmuls.
        h = constrain(rms_norm(x, self.attn_norm[...]), "normed")
        q = jnp.einsum("bse,ehd->bshd", h, self.q[...])
        k = jnp.einsum("bse,ehd->bshd", h, self.k[...])
        v = jnp.einsum("bse,ehd->bshd", h, self.v[...])
        if self.rope:
            q, k = rope(q), rope(k)
        # Query heads in groups, one group per K/V head (group g holds heads g·n … g·n+n-1), so the
        # scores come out (batch, heads, seq, seq) as with one K/V head per query head.
        b, _, heads, d = q.shape
        groups = q.reshape(b, seq, k.shape[2], heads // k.shape[2], d)
        scores = jnp.einsum("bskgd,btkd->bkgst", groups, k).reshape(b, heads, seq, seq) * d**-0.5
        causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
        scores = constrain(jnp.where(causal, scores, -1e9), "attn_scores")
        probs = jax.nn.softmax(scores, axis=-1).reshape(b, k.shape[2], heads // k.shape[2], seq, seq)
        attended = jnp.einsum("bkgst,btkd->bskgd", probs, v).reshape(b, seq, heads, d)
        attended = constrain(attended, "attn_out")
        x = constrain(x + jnp.einsum("bshd,hde->bse", attended, self.o[...]), "resid")
        h = constrain(rms_norm(x, self.mlp_norm[...]), "normed")
        if self.experts:
            out, stats, routed = moe_mlp(self, h)
            return (constrain(x + out, "resid"), stats) + ((routed,) if routing else ())
        up = jnp.einsum("bse,em->bsm", h, self.mlp_in[...])
        if self.gated:
            hidden = jax.nn.silu(jnp.einsum("bse,em->bsm", h, self.mlp_gate[...])) * up
        else:
            hidden = jax.nn.gelu(up)
        hidden = constrain(hidden, "mlp_hidden")
        return (constrain(x + jnp.einsum("bsm,me->bse", hidden, self.mlp_out[...]), "resid"), NO_STATS) + (
            (None,) if routing else ()
        )


# -- mixture of experts ------------------------------------------------------------------------------
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


def rematerialised_blocks(blocks, x):
    """The blocks applied in turn, each rematerialised, and their mixture-of-experts statistics
    summed (:meth:`Block.forward`): the backward pass keeps only each block's
    input and recomputes the rest. The blocks' weights are stacked and run as a ``lax.scan`` of
    one ``nnx.remat``-ed block: around unrolled blocks, XLA:CPU drops the optimization barriers
    remat places and its CSE folds the recomputation back into the forward pass (measured: the
    same temporaries with and without), while a recomputation inside a loop body stays."""
    graphdef, first = nnx.split(blocks[0])
    treedef = jax.tree.structure(first)
    # Leaves in the same order for every block (their metadata differs, so the trees are not equal).
    stacked = [jnp.stack(leaves) for leaves in zip(*(jax.tree.leaves(nnx.split(b)[1]) for b in blocks))]

    @nnx.remat
    def step(x, leaves):
        return nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves)).forward(x)

    x, stats = jax.lax.scan(step, x, stacked, unroll=unrolled_scan.factor())
    return x, jax.tree.map(jnp.sum, stats)


class unrolled_scan:  # noqa: N801  (a context manager, used like a function)
    """Inside ``with unrolled_scan():`` the rematerialised blocks' ``lax.scan`` is unrolled: the same
    blocks, each still an ``nnx.remat``, but with no loop in the program. ``unrolled_scan(2)`` unrolls it
    by 2 instead (a loop whose body runs two blocks). XLA's cost analysis counts a loop's body once,
    whatever its trip count, so the lab's cost of a scanned step is read from two compiles, by 1 and by 2
    (``compile_step`` in the cost package): their difference is one block's."""

    _depth: list = []

    def __init__(self, factor: int | bool = True):
        self._factor = factor

    @classmethod
    def active(cls) -> bool:
        return bool(cls._depth)

    @classmethod
    def factor(cls) -> int | bool:
        """``lax.scan``'s ``unroll``: 1 (a loop of one block) outside any ``unrolled_scan``."""
        return cls._depth[-1] if cls._depth else 1

    def __enter__(self):
        unrolled_scan._depth.append(self._factor)

    def __exit__(self, *exc):
        unrolled_scan._depth.pop()


class Transformer(nnx.Module):
    """Token (+ learned position) embeddings, ``layers`` blocks, a final norm and the unembedding
    (the token embedding itself when tied)."""

    def __init__(self, spec, shard, rngs: nnx.Rngs):
        e, v = spec.embed_dim, spec.vocab
        self.tied = spec.embeddings == "tied"
        # Tied, the table is also the unembedding, and logits h·Eᵀ should start small: entries of
        # N(0, 1/embed), as for any kernel (GPT-2 draws them from N(0, 0.02²)); untied, N(0, 1).
        self.embedding = param(
            kernel(rngs.params(), (v, e), e if self.tied else 1), shard, "embedding", "vocab", "embed"
        )
        self.learned_positions = spec.positions == "learned"
        if self.learned_positions:
            self.pos = param(kernel(rngs.params(), (spec.seq, e), 1), shard, "pos", "seq", "embed")
        self.blocks = nnx.List([Block(spec, shard, rngs) for _ in range(spec.layers)])
        self.final_norm = param(jnp.ones((e,)), shard, "norm", "embed")
        if not self.tied:
            self.unembed = param(kernel(rngs.params(), (e, v), e), shard, "unembed", "embed", "vocab")
        # Full rematerialisation: the backward pass recomputes each block from its input instead of
        # keeping its activations. Never while activations are being recorded: a value made inside
        # a checkpoint cannot leave it (the forward pass and its layouts are the same either way).
        self.remat = spec.remat == "full"
        self.experts = spec.experts

    def __call__(self, tokens):
        return self.forward(tokens)[0]

    def forward(self, tokens):
        """The logits, and the blocks' mixture-of-experts statistics: (load-balancing loss summed
        over the blocks, token choices dropped for want of capacity) — zeros for dense MLPs."""
        # The lookup as a one-hot matmul: with the table split on vocab (Megatron's vocab-parallel
        # embedding) each device sums the rows it holds and one all-reduce adds the pieces.
        one_hot = jax.nn.one_hot(tokens, self.embedding[...].shape[0])
        x = jnp.einsum("bsv,ve->bse", one_hot, self.embedding[...])
        x = constrain(x + self.pos[...] if self.learned_positions else x, "resid")
        if self.remat and not recording_activations():
            x, stats = rematerialised_blocks(self.blocks, x)
        else:
            stats = NO_STATS
            for block in self.blocks:
                x, block_stats = block.forward(x)
                stats = jax.tree.map(jnp.add, stats, block_stats) if self.experts else stats
        h = constrain(rms_norm(x, self.final_norm[...]), "normed")
        if self.tied:
            logits = jnp.einsum("bse,ve->bsv", h, self.embedding[...])
        else:
            logits = jnp.einsum("bse,ev->bsv", h, self.unembed[...])
        return constrain(logits, "logits"), stats

    def routing(self, tokens) -> list[Routing]:
        """What each block's router chose for ``tokens`` (one :class:`Routing` per block; the
        mixture of experts only): the forward pass, block by block, keeping the choices."""
        x = jnp.einsum("bsv,ve->bse", jax.nn.one_hot(tokens, self.embedding[...].shape[0]), self.embedding[...])
        x = x + self.pos[...] if self.learned_positions else x
        found = []
        for block in self.blocks:
            x, _, routed = block.forward(x, routing=True)
            found.append(routed)
        return found

    # Pipeline parallelism (the lab's pipeline package) runs __call__ in three parts on different stages:
    # embed on the first, the blocks stage by stage, head on the last. These two repeat __call__'s
    # first and last lines; tests/core/test_pipeline.py checks that the three parts make __call__.
    def embed(self, tokens):
        """The residual stream entering the first block (__call__'s first lines)."""
        one_hot = jax.nn.one_hot(tokens, self.embedding[...].shape[0])
        return jnp.einsum("bsv,ve->bse", one_hot, self.embedding[...]) + self.pos[...]

    def head(self, x):
        """The logits from the last block's output (__call__'s last lines)."""
        return jnp.einsum("bse,ev->bsv", rms_norm(x, self.final_norm[...]), self.unembed[...])


def make_dataset(spec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(X, Y) int32 of shape (N, seq): rows ``a, reversed(a)``; Y is the next token on the second
    half (positions h-1 … seq-2) and -1 (no target) elsewhere. N = 4096 at seq 32, fewer for long
    sequences (at most 131,072 tokens)."""
    rng = np.random.default_rng(seed)
    n, half = max(64, min(4096, 131072 // spec.seq)), spec.seq // 2
    a = rng.integers(0, spec.vocab, size=(n, half))
    x = np.concatenate([a, a[:, ::-1]], axis=1).astype(np.int32)
    y = np.full_like(x, -1)
    y[:, half - 1 : -1] = x[:, half:]
    return x, y


def cross_entropy_loss(model, x, y):
    """Mean cross-entropy over the positions with a target (y ≥ 0); one_hot(-1) is all zeros. With a
    mixture of experts, plus the load-balancing loss (mean over the blocks) × AUX_LOSS_COEFFICIENT."""
    logits, (aux, _) = model.forward(x)
    picked = jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), axis=-1)
    loss = -jnp.sum(picked) / jnp.maximum(jnp.sum(y >= 0), 1)
    return loss + AUX_LOSS_COEFFICIENT * aux / len(model.blocks) if model.experts else loss


def target_count(y):
    """How many positions of a batch have a target: the loss's denominator."""
    return jnp.maximum(jnp.sum(y >= 0), 1)


def partial_loss(logits, y, count):
    """One microbatch's share of :func:`cross_entropy_loss`: its summed cross-entropy over the whole
    batch's ``count``, so the shares of the microbatches add up to the batch's loss."""
    picked = jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), axis=-1)
    return -jnp.sum(picked) / count


# Weights split along one dimension over `data` (FSDP). Per-parameter overrides, because the
# activations share the weights' logical names (embed, heads, mlp) and the batch already takes
# `data`: a rule embed → data would split the residual stream over `data` twice. A preset names
# every array the family can have; those a size lacks (pos under rope, unembed when tied, mlp_gate
# without SwiGLU) are dropped when it is bound (config.preset_rules).
_FSDP = (
    ("embedding", (None, "data")),
    ("pos", (None, "data")),
    ("norm", ("data",)),
    ("q", ("data", None, None)),
    ("k", ("data", None, None)),
    ("v", ("data", None, None)),
    ("o", (None, None, "data")),
    ("mlp_gate", ("data", None)),
    ("mlp_in", ("data", None)),
    ("mlp_out", (None, "data")),
    ("unembed", ("data", None)),
    ("router", ("data", None)),
    ("expert_gate", (None, "data", None)),
    ("expert_in", (None, "data", None)),
    ("expert_out", (None, None, "data")),
)
# FSDP + Megatron: the tensor-parallel dimension on `model`, the other big one on `data`.
_FSDP_TP = (
    ("embedding", ("model", "data")),
    ("pos", (None, "data")),
    ("norm", ("data",)),
    ("q", ("data", "model", None)),
    ("k", ("data", "model", None)),
    ("v", ("data", "model", None)),
    ("o", ("model", None, "data")),
    ("mlp_gate", ("data", "model")),
    ("mlp_in", ("data", "model")),
    ("mlp_out", ("model", "data")),
    ("unembed", ("data", "model")),
    ("router", ("data", None)),
    ("expert_gate", (None, "data", "model")),
    ("expert_in", (None, "data", "model")),
    ("expert_out", (None, "model", "data")),
)
# K/V heads go where the query heads go: each device then holds the K/V heads its query heads read.
# When model does not divide kv_heads (llama3-8b's 8 on 16 ways) the plan warns and JAX replicates them.
_MEGATRON = {"heads": "model", "kv_heads": "model", "mlp": "model", "vocab": "model"}
# Expert parallelism (GShard; MaxText's activation_batch includes its expert axis): the experts split on
# expert, and the batch on data *and* expert — outside the experts the expert axis is one more data axis,
# so each device routes its own tokens and the dispatch sends them to their experts' devices
# (all-to-all). Once dispatched, the groups of tokens stay split over data only (`groups`).
_EXPERTS = {"expert": "expert", "batch": ("data", "expert"), "groups": "data"}

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "replicated",
            "Replicated",
            "Every device holds every weight and the whole batch, and computes the same step.",
            {},
            textbook=REPLICATED_TEXTBOOK,
        ),
        Preset(
            "dp",
            "Data parallel",
            "The batch's rows are split on data; every device keeps all the weights, and the "
            "gradients are summed across data after the backward pass.",
            {"batch": "data", "groups": "data"},
            textbook=DP_TEXTBOOK,
        ),
        Preset(
            "fsdp",
            "FSDP (fully sharded)",
            "The batch and every weight are split on data (weights by per-parameter overrides), so "
            "each device stores 1/data of the weights and optimizer state; the compiler must bring "
            "the pieces together for each matmul.",
            {"batch": "data", "groups": "data"},
            _FSDP,
            textbook=FSDP_TEXTBOOK,
        ),
        Preset(
            "tp",
            "Tensor parallel (Megatron)",
            "Heads, MLP units and vocab split on model: q/k/v and mlp_in by their output (heads, mlp), "
            "o and mlp_out by their input — so each sublayer needs one all-reduce of activations.",
            dict(_MEGATRON),
            textbook=MEGATRON_TEXTBOOK,
        ),
        Preset(
            "sp",
            "Megatron + sequence parallel",
            "As tp, and the residual stream between sublayers split along its sequence on model: "
            "each sublayer's all-reduce can become a reduce-scatter plus an all-gather, and norms run "
            "on 1/model of the tokens.",
            {**_MEGATRON, "seq": "model"},
            textbook=SEQUENCE_TEXTBOOK,
        ),
        Preset(
            "fsdp_tp",
            "FSDP + tensor parallel (2-D)",
            "Megatron on model, the batch on data, and every weight's other big dimension split on "
            "data too: each device stores 1/(data×model) of the weights.",
            {**_MEGATRON, "batch": "data", "groups": "data"},
            _FSDP_TP,
            needs_two_axes=True,
            textbook=FSDP_TEXTBOOK + MEGATRON_TEXTBOOK,
        ),
        Preset(
            "pp",
            "Pipeline parallel (+ data)",
            "The blocks split into stages on stage, the batch into microbatches that flow through them "
            "(GPipe or 1F1B); each stage sends activations to the next and their gradients back. The "
            "batch on data.",
            {"layers": "stage", "batch": "data"},
            needs_two_axes=True,
            textbook=PIPELINE_TEXTBOOK,
        ),
        Preset(
            "pp_tp",
            "Pipeline + tensor parallel (3-D)",
            "As pp on stage and data, and within each stage Megatron on model: heads, MLP units and vocab "
            "split, one all-reduce of activations per sublayer (needs three axes).",
            {"layers": "stage", "batch": "data", **_MEGATRON},
            needs_two_axes=True,
            textbook=PIPELINE_TEXTBOOK + MEGATRON_TEXTBOOK,
        ),
        Preset(
            "ep",
            "Expert parallel (+ data)",
            "Each block's experts split on expert (needs Experts > 0), the batch on data and expert: each "
            "device routes its own tokens, sends each to its expert's device and gets the outputs back — an "
            "all-to-all there and one back. The router and every other weight replicated.",
            dict(_EXPERTS),
            needs_two_axes=True,
            textbook=EXPERT_TEXTBOOK,
        ),
        Preset(
            "ep_dp",
            "Experts split, batch on data only",
            "The experts split on expert as in ep, but the batch only on data, as dp splits it: every device "
            "along expert holds the same tokens and runs its own experts on them, so no token travels — the "
            "experts' outputs are summed across expert instead (and attention runs expert times over).",
            {"expert": "expert", "batch": "data", "groups": "data"},
            needs_two_axes=True,
            textbook=DP_TEXTBOOK,
        ),
        Preset(
            "ep_tp",
            "Expert + tensor parallel (3-D)",
            "As ep on data and expert, and Megatron on model: heads, vocab and each expert's hidden units "
            "split (needs three axes).",
            {**_MEGATRON, **_EXPERTS},
            needs_two_axes=True,
            textbook=EXPERT_TEXTBOOK + MEGATRON_TEXTBOOK,
        ),
    ]
}


@register
class TransformerFamily(ModelFamily):
    name = "transformer"
    title = "Transformer (decoder blocks)"
    Spec = TransformerSpec
    Model = Transformer
    logical_axes = {
        "batch": "sequences in a batch (rows of tokens, targets, activations)",
        "seq": "positions of the residual stream, tokens and targets (sequence parallelism splits this)",
        "inner_seq": "positions inside attention and the MLP (their input, scores, MLP hidden, logits)",
        "embed": "model width: embedding vectors, norms, the residual stream",
        "heads": "attention (query) heads (q output, o input, the scores)",
        "kv_heads": "key/value heads (k and v output; fewer than heads under grouped-query attention)",
        "head_dim": "features within one head",
        "mlp": "MLP hidden units (mlp_gate and mlp_in output, mlp_out input)",
        "vocab": "token ids (embedding rows, unembedding columns, logits)",
        "layers": "the blocks: mapped to a mesh axis, their weights are stacked and split into pipeline stages",
        "expert": "a mixture of experts' experts (each expert's weights, the tokens dispatched to them)",
        "groups": "the batch's sequences once dispatched to the experts (the batch's split, without the expert axis)",
    }
    presets = PRESETS
    default_preset = "tp"
    export_objects = (Transformer, make_dataset, cross_entropy_loss)
    export_helpers = (
        kv_heads_of,
        rms_norm,
        kernel,
        rope,
        Block,
        Routing,
        expert_capacity,
        top_k_experts,
        route,
        moe_mlp,
        unrolled_scan,
        rematerialised_blocks,
    )
    # The module's constants the copied source reads, written out with their values.
    export_preamble = (
        "import dataclasses\nimport math\n\n"
        f"NO_STATS = {NO_STATS!r}  # a dense block's (load-balancing loss, dropped token choices)\n"
        f"AUX_LOSS_COEFFICIENT = {AUX_LOSS_COEFFICIENT!r}  # the load-balancing loss's weight\n"
        f"DISPATCH_SCOPE, EXPERTS_SCOPE, COMBINE_SCOPE = "
        f"{(DISPATCH_SCOPE, EXPERTS_SCOPE, COMBINE_SCOPE)!r}\n\n\n"
    )
    probe_rows = 64
    # The seed's momentum SGD at lr 0.01 barely moves a transformer in a few hundred steps; Adam does.
    train_defaults = {"optimizer": "adamw", "lr": 0.003, "steps": 300}
    size_fields = {
        "layers": SizeField("Layers", *LIMITS["layers"], "--layers", "decoder blocks"),
        "embed_dim": SizeField("Embed", *LIMITS["embed_dim"], "--embed", "model width"),
        "heads": SizeField("Heads", *LIMITS["heads"], "--heads", "query heads"),
        "kv_heads": SizeField(
            "KV heads",
            *LIMITS["kv_heads"],
            "--kv-heads",
            "key/value heads; 0: one per query head. Fewer: grouped-query attention (heads must be a multiple)",
        ),
        "head_dim": SizeField("Head dim", *LIMITS["head_dim"], "--head-dim"),
        "mlp_dim": SizeField("MLP dim", *LIMITS["mlp_dim"], "--mlp-dim", "MLP hidden units"),
        "vocab": SizeField("Vocab", *LIMITS["vocab"], "--vocab", "token ids"),
        "seq": SizeField("Seq", *LIMITS["seq"], "--seq", "sequence length (even)"),
        "mlp_type": ChoiceField(
            "MLP",
            CHOICES["mlp_type"],
            "--mlp-type",
            "gelu: up, GELU, down (GPT-2); swiglu: silu(gate)·up, down (Llama)",
        ),
        "embeddings": ChoiceField(
            "Embeddings",
            CHOICES["embeddings"],
            "--embeddings",
            "tied: the unembedding is the token embedding (GPT-2); untied: its own",
        ),
        "positions": ChoiceField(
            "Positions",
            CHOICES["positions"],
            "--positions",
            "learned: a (seq, embed) table (GPT-2); rope: rotary, no parameters (Llama)",
        ),
        "remat": ChoiceField(
            "Remat",
            CHOICES["remat"],
            "--remat",
            "full: keep only each block's input, recompute the rest in the backward pass",
        ),
        "experts": SizeField(
            "Experts",
            *LIMITS["experts"],
            "--experts",
            "0: a dense MLP; more: each block's MLP is a mixture of this many experts (presets ep…)",
        ),
        "top_k": SizeField("Top-k", *LIMITS["top_k"], "--top-k", "experts each token is sent to (at most Experts)"),
        "capacity_factor": ChoiceField(
            "Capacity factor",
            CHOICES["capacity_factor"],
            "--capacity-factor",
            "each expert takes at most this × its fair share of a sequence's tokens "
            "(tokens × top-k / experts); choices past it are dropped",
        ),
    }
    # Public model cards' shapes. Norms are RMSNorm and nothing has a bias, as in Llama; GPT-2's
    # LayerNorm and biases (about 0.1 M parameters) are left out, so its count is 0.1% under the card's.
    named_sizes = {
        "default": NamedSize("Default (trains in seconds)", {}),
        "gpt2-small": NamedSize(
            "GPT-2 small (124M)",
            dict(
                layers=12,
                embed_dim=768,
                heads=12,
                kv_heads=0,
                head_dim=64,
                mlp_dim=3072,
                vocab=50257,
                seq=1024,
                mlp_type="gelu",
                embeddings="tied",
                positions="learned",
            ),
            124e6,
            "https://huggingface.co/openai-community/gpt2 (config.json: n_layer 12, n_embd 768, "
            "n_head 12, n_positions 1024, vocab_size 50257; card: 124M parameters)",
        ),
        "llama3-8b": NamedSize(
            "Llama 3 8B",
            dict(
                layers=32,
                embed_dim=4096,
                heads=32,
                kv_heads=8,
                head_dim=128,
                mlp_dim=14336,
                vocab=128256,
                seq=8192,
                mlp_type="swiglu",
                embeddings="untied",
                positions="rope",
            ),
            8.03e9,
            "https://huggingface.co/meta-llama/Meta-Llama-3-8B (config.json: num_hidden_layers 32, "
            "hidden_size 4096, intermediate_size 14336, num_attention_heads 32, num_key_value_heads 8, "
            "vocab_size 128256, max_position_embeddings 8192, tie_word_embeddings false; 8.03B params)",
        ),
        "llama3-70b": NamedSize(
            "Llama 3 70B",
            dict(
                layers=80,
                embed_dim=8192,
                heads=64,
                kv_heads=8,
                head_dim=128,
                mlp_dim=28672,
                vocab=128256,
                seq=8192,
                mlp_type="swiglu",
                embeddings="untied",
                positions="rope",
            ),
            70.6e9,
            "https://huggingface.co/meta-llama/Meta-Llama-3-70B (config.json: num_hidden_layers 80, "
            "hidden_size 8192, intermediate_size 28672, num_attention_heads 64, num_key_value_heads 8, "
            "vocab_size 128256, tie_word_embeddings false; 70.6B params)",
        ),
    }
    explicit_refusal = (
        "the transformer needs Auto axes: under Explicit axes every einsum of attention "
        "and the MLP must state its output sharding, which this model does not yet do — "
        "choose Axis type Auto"
    )

    def batch(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        return {
            "x": ArraySpec((batch_size, spec.seq), ("batch", "seq"), "x", "int32"),
            "y": ArraySpec((batch_size, spec.seq), ("batch", "seq"), "y", "int32"),
        }

    def activations(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        b, s = batch_size, spec.seq
        return {
            "resid": ArraySpec((b, s, spec.embed_dim), ("batch", "seq", "embed"), "resid"),
            "normed": ArraySpec((b, s, spec.embed_dim), ("batch", "inner_seq", "embed"), "normed"),
            "attn_scores": ArraySpec((b, spec.heads, s, s), ("batch", "heads", "inner_seq", None), "attn_scores"),
            "attn_out": ArraySpec(
                (b, s, spec.heads, spec.head_dim), ("batch", "inner_seq", "heads", "head_dim"), "attn_out"
            ),
            **(
                {}
                if spec.experts
                else {"mlp_hidden": ArraySpec((b, s, spec.mlp_dim), ("batch", "inner_seq", "mlp"), "mlp_hidden")}
            ),
            "logits": ArraySpec((b, s, spec.vocab), ("batch", "inner_seq", "vocab"), "logits"),
            **(self.expert_activations(spec, batch_size) if spec.experts else {}),
        }

    def expert_activations(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        """The mixture of experts' constrained arrays (:func:`moe_mlp`): the router's logits, and the
        (expert, group, slot, ·) tensors before, inside and after the experts; the MLP's hidden
        units are the experts' (``mlp_hidden`` is the dense MLP's)."""
        b, s, e, n = batch_size, spec.seq, spec.embed_dim, spec.experts
        c = expert_capacity(spec, s)
        return {
            "router_logits": ArraySpec((b, s, n), ("batch", "inner_seq", None), "router_logits"),
            "routed": ArraySpec((n, b, c, e), (None, "batch", None, "embed"), "routed"),
            "dispatched": ArraySpec((n, b, c, e), ("expert", "groups", None, "embed"), "dispatched"),
            "expert_hidden": ArraySpec((n, b, c, spec.mlp_dim), ("expert", "groups", None, "mlp"), "expert_hidden"),
            "expert_outputs": ArraySpec((n, b, c, e), ("expert", "groups", None, "embed"), "expert_outputs"),
            "returned": ArraySpec((n, b, c, e), (None, "batch", None, "embed"), "returned"),
        }

    def activation_bytes(self, spec, batch_size: int) -> int:
        """Float32 bytes the backward pass keeps, per step, summed over the batch: per block the
        block input, two norm outputs, q and the attention output (by heads), k and v (by kv_heads),
        scores and probabilities, the residual after attention, the MLP's pre- and post-activation
        (and the gate's under SwiGLU); then the embedding's one-hot, the final norm and the logits
        with their softmax. With full remat a block keeps only its input, and one block's worth is
        recomputed at a time in the backward pass."""
        b, s, e, h, d, m, v = (
            batch_size,
            spec.seq,
            spec.embed_dim,
            spec.heads,
            spec.head_dim,
            spec.mlp_dim,
            spec.vocab,
        )
        mlp = 3 if spec.mlp_type == "swiglu" else 2
        if spec.experts:  # router logits and probabilities, the dispatch and combine tensors, each expert's
            # slots before, inside (pre- and post-activation) and after it, and the returned outputs
            n, c = spec.experts, expert_capacity(spec, s)
            mlp_bytes = 2 * b * s * n + 2 * b * s * n * c + 3 * n * b * c * e + mlp * n * b * c * m
        else:
            mlp_bytes = mlp * b * s * m
        per_block = 4 * b * s * e + 2 * b * s * (h + kv_heads_of(spec)) * d + 2 * b * h * s * s + mlp_bytes
        blocks = spec.layers * b * s * e + per_block if spec.remat == "full" else spec.layers * per_block
        return 4 * (blocks + b * s * v + 2 * b * s * e + 2 * b * s * v)

    def make_dataset(self, spec, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return make_dataset(spec, seed)

    def loss(self, model, x: jax.Array, y: jax.Array) -> jax.Array:
        return cross_entropy_loss(model, x, y)

    def probe(self, model, x: jax.Array) -> jax.Array:
        """The predicted token at every position (argmax of the logits)."""
        return jnp.argmax(model(x), axis=-1).astype(jnp.int32)

    # -- pipeline parallelism (the lab's pipeline package): the loss in one share per microbatch --------
    def target_count(self, y: jax.Array) -> jax.Array:
        return target_count(y)

    def partial_loss(self, model, h: jax.Array, y: jax.Array, count: jax.Array) -> jax.Array:
        """The loss share of one microbatch whose last block output is ``h``."""
        return partial_loss(model.head(h), y, count)
