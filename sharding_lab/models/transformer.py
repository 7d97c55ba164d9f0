"""The transformer family: a decoder-only transformer (token + position embeddings, L pre-norm
blocks of causal multi-head attention and an MLP, a final norm, an unembedding) on a task that
needs attention — reversing a sequence.

Every parameter names its dimensions by meaning: q/k/v kernels are ``(embed, heads, head_dim)``,
the output kernel ``(heads, head_dim, embed)``, the MLP ``(embed, mlp)`` and ``(mlp, embed)``, the
embedding ``(vocab, embed)`` and the unembedding ``(embed, vocab)``. Rule names are shared by every
layer (``q``, ``o``, ``mlp_in``, ...), so one override applies to all blocks.

Activations are arrays too: the forward pass constrains the residual stream (``resid``), each
norm's output as it enters a sublayer (``normed``), the attention scores, the attention output before its projection, the MLP's hidden units and the
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
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..errors import ConfigError
from . import (DP_TEXTBOOK, FSDP_TEXTBOOK, MEGATRON_TEXTBOOK, REPLICATED_TEXTBOOK, SEQUENCE_TEXTBOOK, ArraySpec,
               ModelFamily, Preset, SizeField, constrain, param, register)
from . import PIPELINE_TEXTBOOK  # noqa: E402  (the pp preset)

# Limits that allow a realistic block to be *planned* (embed 4096, 32 × 128 heads, mlp 16384,
# vocab 32000, seq 2048); training it is refused by the memory check, not by these.
LIMITS = {"layers": (1, 64), "embed_dim": (1, 16384), "heads": (1, 128), "head_dim": (1, 1024),
          "mlp_dim": (1, 65536), "vocab": (2, 262144), "seq": (4, 32768)}


@dataclasses.dataclass(frozen=True)
class TransformerSpec:
    """The transformer's sizes; defaults train in seconds on two CPU cores."""

    family: ClassVar[str] = "transformer"
    layers: int = 2
    embed_dim: int = 64  # not "embed": Streamlit reserves the ?embed= query parameter of a share link
    heads: int = 4
    head_dim: int = 16
    mlp_dim: int = 256
    vocab: int = 32
    seq: int = 32

    def validate(self) -> None:
        for name, (low, high) in LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ConfigError(f"transformer size {name} must be a whole number from {low} to {high:,}, "
                                  f"got {value!r}", "model")
        if self.seq % 2:
            raise ConfigError(f"transformer seq must be even (a sequence and its reverse), got {self.seq}: "
                              f"try {self.seq + 1}", "model")


def rms_norm(x, scale):
    """RMSNorm over the last (embed) dimension, with a learned scale."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def kernel(key, shape, fan_in):
    """A weight drawn from N(0, 1/fan_in): activations keep their scale through the layer."""
    return jax.random.normal(key, shape) * fan_in ** -0.5


class Block(nnx.Module):
    """One pre-norm decoder block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, spec, shard, rngs: nnx.Rngs):
        e, h, d, m = spec.embed_dim, spec.heads, spec.head_dim, spec.mlp_dim
        self.attn_norm = param(jnp.ones((e,)), shard, "norm", "embed")
        self.q = param(kernel(rngs.params(), (e, h, d), e), shard, "q", "embed", "heads", "head_dim")
        self.k = param(kernel(rngs.params(), (e, h, d), e), shard, "k", "embed", "heads", "head_dim")
        self.v = param(kernel(rngs.params(), (e, h, d), e), shard, "v", "embed", "heads", "head_dim")
        self.o = param(kernel(rngs.params(), (h, d, e), h * d), shard, "o", "heads", "head_dim", "embed")
        self.mlp_norm = param(jnp.ones((e,)), shard, "norm", "embed")
        self.mlp_in = param(kernel(rngs.params(), (e, m), e), shard, "mlp_in", "embed", "mlp")
        self.mlp_out = param(kernel(rngs.params(), (m, e), m), shard, "mlp_out", "mlp", "embed")

    def __call__(self, x):
        seq = x.shape[1]
        # The sublayer's input: under sequence parallelism the norm ran on this device's positions,
        # and here the whole sequence is gathered (Megatron-SP's all-gather) before the q/k/v matmuls.
        h = constrain(rms_norm(x, self.attn_norm[...]), "normed")
        q = jnp.einsum("bse,ehd->bshd", h, self.q[...])
        k = jnp.einsum("bse,ehd->bshd", h, self.k[...])
        v = jnp.einsum("bse,ehd->bshd", h, self.v[...])
        scores = jnp.einsum("bshd,bthd->bhst", q, k) * q.shape[-1] ** -0.5
        causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
        scores = constrain(jnp.where(causal, scores, -1e9), "attn_scores")
        attended = constrain(jnp.einsum("bhst,bthd->bshd", jax.nn.softmax(scores, axis=-1), v), "attn_out")
        x = constrain(x + jnp.einsum("bshd,hde->bse", attended, self.o[...]), "resid")
        h = constrain(rms_norm(x, self.mlp_norm[...]), "normed")
        hidden = constrain(jax.nn.gelu(jnp.einsum("bse,em->bsm", h, self.mlp_in[...])), "mlp_hidden")
        return constrain(x + jnp.einsum("bsm,me->bse", hidden, self.mlp_out[...]), "resid")


class Transformer(nnx.Module):
    """Token + position embeddings, ``layers`` blocks, a final norm and the unembedding."""

    def __init__(self, spec, shard, rngs: nnx.Rngs):
        e, v = spec.embed_dim, spec.vocab
        self.embedding = param(kernel(rngs.params(), (v, e), 1), shard, "embedding", "vocab", "embed")
        self.pos = param(kernel(rngs.params(), (spec.seq, e), 1), shard, "pos", "seq", "embed")
        self.blocks = nnx.List([Block(spec, shard, rngs) for _ in range(spec.layers)])
        self.final_norm = param(jnp.ones((e,)), shard, "norm", "embed")
        self.unembed = param(kernel(rngs.params(), (e, v), e), shard, "unembed", "embed", "vocab")

    def __call__(self, tokens):
        # The lookup as a one-hot matmul: with the table split on vocab (Megatron's vocab-parallel
        # embedding) each device sums the rows it holds and one all-reduce adds the pieces.
        one_hot = jax.nn.one_hot(tokens, self.embedding[...].shape[0])
        x = constrain(jnp.einsum("bsv,ve->bse", one_hot, self.embedding[...]) + self.pos[...], "resid")
        for block in self.blocks:
            x = block(x)
        h = constrain(rms_norm(x, self.final_norm[...]), "normed")
        logits = jnp.einsum("bse,ev->bsv", h, self.unembed[...])
        return constrain(logits, "logits")

    # Pipeline parallelism (sharding_lab.pipeline) runs __call__ in three parts on different stages:
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
    y[:, half - 1:-1] = x[:, half:]
    return x, y


def cross_entropy_loss(model, x, y):
    """Mean cross-entropy over the positions with a target (y ≥ 0); one_hot(-1) is all zeros."""
    logits = model(x)
    picked = jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), axis=-1)
    return -jnp.sum(picked) / jnp.maximum(jnp.sum(y >= 0), 1)


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
# `data`: a rule embed → data would split the residual stream over `data` twice.
_FSDP = (("embedding", (None, "data")), ("pos", (None, "data")), ("norm", ("data",)),
         ("q", ("data", None, None)), ("k", ("data", None, None)), ("v", ("data", None, None)),
         ("o", (None, None, "data")), ("mlp_in", ("data", None)), ("mlp_out", (None, "data")),
         ("unembed", ("data", None)))
# FSDP + Megatron: the tensor-parallel dimension on `model`, the other big one on `data`.
_FSDP_TP = (("embedding", ("model", "data")), ("pos", (None, "data")), ("norm", ("data",)),
            ("q", ("data", "model", None)), ("k", ("data", "model", None)), ("v", ("data", "model", None)),
            ("o", ("model", None, "data")), ("mlp_in", ("data", "model")), ("mlp_out", ("model", "data")),
            ("unembed", ("data", "model")))
_MEGATRON = {"heads": "model", "mlp": "model", "vocab": "model"}

PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset("replicated", "Replicated",
           "Every device holds every weight and the whole batch, and computes the same step.", {},
           textbook=REPLICATED_TEXTBOOK),
    Preset("dp", "Data parallel",
           "The batch's rows are split on data; every device keeps all the weights, and the "
           "gradients are summed across data after the backward pass.", {"batch": "data"}, textbook=DP_TEXTBOOK),
    Preset("fsdp", "FSDP (fully sharded)",
           "The batch and every weight are split on data (weights by per-parameter overrides), so "
           "each device stores 1/data of the weights and optimizer state; the compiler must bring "
           "the pieces together for each matmul.", {"batch": "data"}, _FSDP, textbook=FSDP_TEXTBOOK),
    Preset("tp", "Tensor parallel (Megatron)",
           "Heads, MLP units and vocab split on model: q/k/v and mlp_in by their output (heads, mlp), "
           "o and mlp_out by their input — so each sublayer needs one all-reduce of activations.",
           dict(_MEGATRON), textbook=MEGATRON_TEXTBOOK),
    Preset("sp", "Megatron + sequence parallel",
           "As tp, and the residual stream between sublayers split along its sequence on model: "
           "each sublayer's all-reduce can become a reduce-scatter plus an all-gather, and norms run "
           "on 1/model of the tokens.", {**_MEGATRON, "seq": "model"}, textbook=SEQUENCE_TEXTBOOK),
    Preset("fsdp_tp", "FSDP + tensor parallel (2-D)",
           "Megatron on model, the batch on data, and every weight's other big dimension split on "
           "data too: each device stores 1/(data×model) of the weights.",
           {**_MEGATRON, "batch": "data"}, _FSDP_TP, needs_two_axes=True,
           textbook=FSDP_TEXTBOOK + MEGATRON_TEXTBOOK),
    Preset("pp", "Pipeline parallel (+ data)",
           "The blocks split into stages on stage, the batch into microbatches that flow through them "
           "(GPipe or 1F1B); each stage sends activations to the next and their gradients back. The "
           "batch on data.", {"layers": "stage", "batch": "data"}, needs_two_axes=True, textbook=PIPELINE_TEXTBOOK),
    Preset("pp_tp", "Pipeline + tensor parallel (3-D)",
           "As pp on stage and data, and within each stage Megatron on model: heads, MLP units and vocab "
           "split, one all-reduce of activations per sublayer (needs three axes).",
           {"layers": "stage", "batch": "data", **_MEGATRON}, needs_two_axes=True,
           textbook=PIPELINE_TEXTBOOK + MEGATRON_TEXTBOOK),
]}


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
        "heads": "attention heads (q/k/v output, o input, the scores)",
        "head_dim": "features within one head",
        "mlp": "MLP hidden units (mlp_in output, mlp_out input)",
        "vocab": "token ids (embedding rows, unembedding columns, logits)",
        "layers": "the blocks: mapped to a mesh axis, their weights are stacked and split into pipeline stages",
    }
    presets = PRESETS
    default_preset = "tp"
    export_objects = (Transformer, make_dataset, cross_entropy_loss)
    export_helpers = (rms_norm, kernel, Block)
    probe_rows = 64
    # The seed's momentum SGD at lr 0.01 barely moves a transformer in a few hundred steps; Adam does.
    train_defaults = {"optimizer": "adamw", "lr": 0.003, "steps": 300}
    size_fields = {
        "layers": SizeField("Layers", *LIMITS["layers"], "--layers", "decoder blocks"),
        "embed_dim": SizeField("Embed", *LIMITS["embed_dim"], "--embed", "model width"),
        "heads": SizeField("Heads", *LIMITS["heads"], "--heads"),
        "head_dim": SizeField("Head dim", *LIMITS["head_dim"], "--head-dim"),
        "mlp_dim": SizeField("MLP dim", *LIMITS["mlp_dim"], "--mlp-dim", "MLP hidden units"),
        "vocab": SizeField("Vocab", *LIMITS["vocab"], "--vocab", "token ids"),
        "seq": SizeField("Seq", *LIMITS["seq"], "--seq", "sequence length (even)"),
    }
    explicit_refusal = ("the transformer needs Auto axes: under Explicit axes every einsum of attention "
                        "and the MLP must state its output sharding, which this model does not yet do — "
                        "choose Axis type Auto")

    def batch(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        return {"x": ArraySpec((batch_size, spec.seq), ("batch", "seq"), "x", "int32"),
                "y": ArraySpec((batch_size, spec.seq), ("batch", "seq"), "y", "int32")}

    def activations(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        b, s = batch_size, spec.seq
        return {"resid": ArraySpec((b, s, spec.embed_dim), ("batch", "seq", "embed"), "resid"),
                "normed": ArraySpec((b, s, spec.embed_dim), ("batch", "inner_seq", "embed"), "normed"),
                "attn_scores": ArraySpec((b, spec.heads, s, s), ("batch", "heads", "inner_seq", None),
                                         "attn_scores"),
                "attn_out": ArraySpec((b, s, spec.heads, spec.head_dim),
                                      ("batch", "inner_seq", "heads", "head_dim"), "attn_out"),
                "mlp_hidden": ArraySpec((b, s, spec.mlp_dim), ("batch", "inner_seq", "mlp"), "mlp_hidden"),
                "logits": ArraySpec((b, s, spec.vocab), ("batch", "inner_seq", "vocab"), "logits")}

    def activation_bytes(self, spec, batch_size: int) -> int:
        """Float32 bytes the backward pass keeps, per step, summed over the batch: per block the
        block input, two norm outputs, q/k/v, scores and probabilities, the attention output, the
        residual after attention, MLP pre- and post-activation; then the embedding's one-hot, the
        final norm and the logits with their softmax."""
        b, s, e, h, d, m, v = (batch_size, spec.seq, spec.embed_dim, spec.heads, spec.head_dim, spec.mlp_dim,
                               spec.vocab)
        per_block = 4 * b * s * e + 4 * b * s * h * d + 2 * b * h * s * s + 2 * b * s * m
        return 4 * (spec.layers * per_block + b * s * v + 2 * b * s * e + 2 * b * s * v)

    def make_dataset(self, spec, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return make_dataset(spec, seed)

    def loss(self, model, x: jax.Array, y: jax.Array) -> jax.Array:
        return cross_entropy_loss(model, x, y)

    def probe(self, model, x: jax.Array) -> jax.Array:
        """The predicted token at every position (argmax of the logits)."""
        return jnp.argmax(model(x), axis=-1).astype(jnp.int32)

    # -- pipeline parallelism (sharding_lab.pipeline): the loss in one share per microbatch --------
    def target_count(self, y: jax.Array) -> jax.Array:
        return target_count(y)

    def partial_loss(self, model, h: jax.Array, y: jax.Array, count: jax.Array) -> jax.Array:
        """The loss share of one microbatch whose last block output is ``h``."""
        return partial_loss(model.head(h), y, count)
