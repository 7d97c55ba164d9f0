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

Its parts apart: the sizes and options (:mod:`.transformer_spec`), the named sizes
(:mod:`.transformer_sizes`), the layouts (:mod:`.transformer_presets`), the mixture of experts' routing
(:mod:`.moe`) and the rematerialised loop over blocks (:mod:`.remat`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from . import ArraySpec, ChoiceField, ModelFamily, SizeField, constrain, param, recording_activations, register
from .attention import splash_attention, splash_refusal, xla_attention
from .moe import (
    AUX_LOSS_COEFFICIENT,
    COMBINE_SCOPE,
    DISPATCH_SCOPE,
    EXPERTS_SCOPE,
    NO_STATS,
    Routing,
    expert_capacity,
    moe_mlp,
    route,
    top_k_experts,
)
from .remat import remat_policy, rematerialised_blocks, stacked_as_stored, unrolled_scan
from .transformer_presets import PRESETS
from .transformer_scopes import BUFFER_SCOPES
from .transformer_sizes import NAMED_SIZES, block_extrapolated_count
from .transformer_spec import CHOICES, LIMITS, TransformerSpec, kv_heads_of
from .transformer_task import cross_entropy_loss, make_dataset, partial_loss, target_count, token_losses


def rms_norm(x, scale):
    """RMSNorm over the last (embed) dimension, with a learned scale: the statistics in float32 (as
    MaxText's RMSNorm), the result in ``x``'s dtype — a bf16 residual stream stays bf16."""
    wide = x.astype(jnp.float32)
    normed = wide * jax.lax.rsqrt(jnp.mean(wide * wide, axis=-1, keepdims=True) + 1e-6)
    return normed.astype(x.dtype) * scale.astype(x.dtype)


def kernel(key, shape, fan_in):
    """A weight drawn from N(0, 1/fan_in): activations keep their scale through the layer."""
    return jax.random.normal(key, shape) * fan_in**-0.5


def rope(x, theta=10_000.0):
    """Rotary positions (Su et al. 2021) on ``x`` (batch, seq, heads, head_dim): feature pair i of
    position p turned by the angle p·θ^(-2i/head_dim), so q·k depends on their distance. θ is
    RoFormer's 10,000; Llama 3 uses 500,000 (a frequency, not a parameter: the counts agree)."""
    half = x.shape[-1] // 2
    angles = jnp.arange(x.shape[1])[:, None] * theta ** (-jnp.arange(half) / half)[None, :]
    # In x's dtype: float32 angles would promote a bf16 q and k (and everything after them) to float32.
    cos, sin = (f(angles)[None, :, None, :].astype(x.dtype) for f in (jnp.cos, jnp.sin))
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class Block(nnx.Module):
    """One pre-norm decoder block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, spec, shard, rngs: nnx.Rngs):
        e, h, kv, d, m = spec.embed_dim, spec.heads, kv_heads_of(spec), spec.head_dim, spec.mlp_dim
        self.rope = spec.positions == "rope"
        self.attention = spec.attention
        self.attn_norm = param(jnp.ones((e,)), shard, "norm", "embed")
        self.q = param(kernel(rngs.params(), (e, h, d), e), shard, "q", "embed", "heads", "head_dim")
        # K and V are sized by kv_heads (grouped-query attention): their own logical axis, so a
        # rule can place them apart from the query heads (tp puts both on model).
        self.k = param(kernel(rngs.params(), (e, kv, d), e), shard, "k", "embed", "kv_heads", "head_dim")
        self.v = param(kernel(rngs.params(), (e, kv, d), e), shard, "v", "embed", "kv_heads", "head_dim")
        if spec.qkv_bias == "qkv":  # Qwen 2's biases on q, k and v (laid out as their outputs)
            self.q_bias = param(jnp.zeros((h, d)), shard, "q_bias", "heads", "head_dim")
            self.k_bias = param(jnp.zeros((kv, d)), shard, "k_bias", "kv_heads", "head_dim")
            self.v_bias = param(jnp.zeros((kv, d)), shard, "v_bias", "kv_heads", "head_dim")
        self.o = param(kernel(rngs.params(), (h, d, e), h * d), shard, "o", "heads", "head_dim", "embed")
        self.mlp_norm = param(jnp.ones((e,)), shard, "norm", "embed")
        self.gated, self.gelu_gate = spec.mlp_type in ("swiglu", "geglu"), spec.mlp_type == "geglu"
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
        # The sublayer's input: under sequence parallelism the norm ran on this device's positions,
        # and here the whole sequence is gathered (Megatron-SP's all-gather) before the q/k/v matmuls.
        # Each projection is named (checkpoint_name, MaxText's names) for the selective remat policies, and
        # each part runs under a named scope (BUFFER_SCOPES) that the compiled program's metadata keeps.
        with jax.named_scope("attention_norm"):
            h = constrain(rms_norm(x, self.attn_norm[...]), "normed")
        with jax.named_scope("query"):
            q = checkpoint_name(jnp.einsum("bse,ehd->bshd", h, self.q[...]), "query_proj")
        with jax.named_scope("key"):
            k = checkpoint_name(jnp.einsum("bse,ehd->bshd", h, self.k[...]), "key_proj")
        with jax.named_scope("value"):
            v = checkpoint_name(jnp.einsum("bse,ehd->bshd", h, self.v[...]), "value_proj")
        if hasattr(self, "q_bias"):
            q, k, v = q + self.q_bias[...], k + self.k_bias[...], v + self.v_bias[...]
        if self.rope:
            with jax.named_scope("rotary"):
                q, k = rope(q), rope(k)
        attend = splash_attention if self.attention == "splash" else xla_attention
        with jax.named_scope("attention"):
            attended = constrain(checkpoint_name(attend(q, k, v), "context"), "attn_out")
        with jax.named_scope("attention_output"):
            # Laid out as the residual stream before it is named: what a remat policy saves is that layout.
            out = checkpoint_name(constrain(jnp.einsum("bshd,hde->bse", attended, self.o[...]), "resid"), "out_proj")
            x = constrain(x + out, "resid")
        with jax.named_scope("mlp_norm"):
            h = constrain(rms_norm(x, self.mlp_norm[...]), "normed")
        if self.experts:
            out, stats, routed = moe_mlp(self, h)
            return (constrain(x + out, "resid"), stats) + ((routed,) if routing else ())
        with jax.named_scope("mlp_up"):
            up = checkpoint_name(jnp.einsum("bse,em->bsm", h, self.mlp_in[...]), "mlpwi_1")
        with jax.named_scope("mlp_activation"):
            if self.gated:
                with jax.named_scope("mlp_gate"):
                    gate = checkpoint_name(jnp.einsum("bse,em->bsm", h, self.mlp_gate[...]), "mlpwi_0")
                hidden = (jax.nn.gelu(gate) if self.gelu_gate else jax.nn.silu(gate)) * up
            else:
                hidden = jax.nn.gelu(up)
            hidden = constrain(hidden, "mlp_hidden")
        with jax.named_scope("mlp_down"):
            out = checkpoint_name(constrain(jnp.einsum("bsm,me->bse", hidden, self.mlp_out[...]), "resid"), "mlpwo")
        return (constrain(x + out, "resid"), NO_STATS) + ((None,) if routing else ())


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
        # Rematerialisation: the backward pass recomputes each block from its input (and what the policy
        # keeps) instead of keeping its activations. Never while activations are being recorded: a value
        # made inside a checkpoint cannot leave it (the forward pass and its layouts are the same either way).
        self.remat = spec.remat
        self.experts = spec.experts

    def __call__(self, tokens):
        return self.forward(tokens)[0]

    def forward(self, tokens):
        """The logits, and the blocks' mixture-of-experts statistics: (load-balancing loss summed
        over the blocks, token choices dropped for want of capacity) — zeros for dense MLPs. The same
        three parts pipeline parallelism runs on different stages: :meth:`embed`, the blocks, :meth:`head`."""
        x = self.embed(tokens)
        if self.remat != "none" and not recording_activations():
            x, stats = rematerialised_blocks(self.blocks, x, self.remat)
        else:
            stats = NO_STATS
            for i, block in enumerate(self.blocks):
                with jax.named_scope(f"layer_{i}"):
                    x, block_stats = block.forward(x)
                stats = jax.tree.map(jnp.add, stats, block_stats) if self.experts else stats
        return self.head(x), stats

    def routing(self, tokens) -> list[Routing]:
        """What each block's router chose for ``tokens`` (one :class:`Routing` per block; the
        mixture of experts only): the forward pass, block by block, keeping the choices."""
        x = self.embed(tokens)
        found = []
        for block in self.blocks:
            x, _, routed = block.forward(x, routing=True)
            found.append(routed)
        return found

    def embed(self, tokens):
        """The residual stream entering the first block: the token embedding (+ the learned positions).
        The lookup is a gather of the tokens' rows (``jnp.take``), in the table's dtype, as MaxText's
        ``Embed`` does: a one-hot product would make a (batch, seq, vocab) float32 one-hot — and a
        float32 residual stream under bf16 weights. With the table split on vocab (Megatron's
        vocab-parallel embedding) XLA's partitioner gathers the rows each device holds, masks the
        rest and adds the pieces with one all-reduce."""
        with jax.named_scope("embed"):
            x = jnp.take(self.embedding[...], tokens, axis=0)
            return constrain(x + self.pos[...] if self.learned_positions else x, "resid")

    def head(self, x):
        """The logits from the last block's output: the final norm, then the unembedding (the token
        embedding itself when tied)."""
        with jax.named_scope("final_norm"):
            h = constrain(rms_norm(x, self.final_norm[...]), "normed")
        with jax.named_scope("unembed"):
            if self.tied:
                return constrain(jnp.einsum("bse,ve->bsv", h, self.embedding[...]), "logits")
            return constrain(jnp.einsum("bse,ev->bsv", h, self.unembed[...]), "logits")


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
        token_losses,
        Block,
        Routing,
        expert_capacity,
        top_k_experts,
        route,
        moe_mlp,
        unrolled_scan,
        remat_policy,
        rematerialised_blocks,
        stacked_as_stored,
        xla_attention,  # splash never runs in the script: it targets the simulated host (plan refuses it there)
    )
    # The module's constants the copied source reads, written out with their values.
    export_preamble = (
        "import contextvars\nimport dataclasses\nimport math\n\nfrom jax.ad_checkpoint import checkpoint_name\n\n"
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
            "gelu: up, GELU, down (GPT-2); swiglu: silu(gate)·up, down (Llama); geglu: gelu(gate)·up, down (Gemma)",
        ),
        "qkv_bias": ChoiceField(
            "QKV bias", CHOICES["qkv_bias"], "--qkv-bias", "qkv: biases on the q, k and v projections (Qwen 2); none"
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
            "full: keep only each block's input, recompute the rest in the backward pass; save_qkv_proj, "
            "minimal, save_dots: keep some matmul outputs too (MaxText's policies)",
        ),
        "attention": ChoiceField(
            "Attention",
            CHOICES["attention"],
            "--attention",
            "xla: softmax(QKᵀ)V as einsums, the scores in HBM; splash: the Pallas flash kernel (TPU targets)",
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
    named_sizes = NAMED_SIZES
    # The named scopes of the forward pass (Block.forward, Transformer.embed/head, the loss) in words: how
    # sharding_lab.program.buffers names the compiled step's largest buffers.
    buffer_scopes = BUFFER_SCOPES
    step_only_fields = ("remat", "attention")  # the same parameters under every remat policy and attention kind
    explicit_refusal = (
        "the transformer needs Auto axes: under Explicit axes every einsum of attention "
        "and the MLP must state its output sharding, which this model does not yet do — "
        "choose Axis type Auto"
    )

    def parameter_count(self, spec) -> int:
        return block_extrapolated_count(self, spec)

    def refusal(self, spec, platform: str, pipelined: bool) -> str | None:
        return splash_refusal(spec.seq, platform, pipelined) if spec.attention == "splash" else None

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
            # The splash kernel never writes the scores: there is no such array to lay out.
            **(
                {}
                if spec.attention == "splash"
                else {
                    "attn_scores": ArraySpec(
                        (b, spec.heads, s, s), ("batch", "heads", "inner_seq", None), "attn_scores"
                    )
                }
            ),
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
        (and the gate's under SwiGLU); then the embedding's output, the final norm and the
        logits with their softmax (the lookup is a gather: no one-hot). With full remat a block keeps only
        its input, and one block's worth is
        recomputed at a time in the backward pass; a selective policy keeps its saved projections too
        (:func:`~sharding_lab.models.remat.remat_policy`). Splash attention keeps no scores, only its output
        and a log-sum-exp per query."""
        b, s, e, h, d, m, v = (
            batch_size,
            spec.seq,
            spec.embed_dim,
            spec.heads,
            spec.head_dim,
            spec.mlp_dim,
            spec.vocab,
        )
        mlp = 3 if spec.mlp_type in ("swiglu", "geglu") else 2
        if spec.experts:  # router logits and probabilities, the dispatch and combine tensors, each expert's
            # slots before, inside (pre- and post-activation) and after it, and the returned outputs
            n, c = spec.experts, expert_capacity(spec, s)
            mlp_bytes = 2 * b * s * n + 2 * b * s * n * c + 3 * n * b * c * e + mlp * n * b * c * m
        else:
            mlp_bytes = mlp * b * s * m
        scores = b * h * s if spec.attention == "splash" else 2 * b * h * s * s
        qkv = b * s * (h + 2 * kv_heads_of(spec)) * d
        per_block = 4 * b * s * e + 2 * b * s * (h + kv_heads_of(spec)) * d + scores + mlp_bytes
        saved = {  # what a selective policy keeps of a block besides its input
            "full": 0,
            "save_qkv_proj": qkv,
            "minimal": qkv + b * s * e + (mlp - 1) * b * s * m + b * s * e,
            "save_dots": qkv + b * s * e + (mlp - 1) * b * s * m + b * s * e,
        }
        if spec.remat == "none":
            blocks = spec.layers * per_block
        else:
            blocks = spec.layers * (b * s * e + saved[spec.remat]) + per_block
        return 4 * (blocks + 2 * b * s * e + 2 * b * s * v)

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
