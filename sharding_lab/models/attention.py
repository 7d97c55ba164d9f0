"""Attention as the transformer runs it: XLA's own (the scores materialised) or the Pallas splash kernel.

``xla`` computes softmax(QKᵀ/√d)·V with einsums, the (batch, heads, seq, seq) scores and probabilities
materialised in HBM: what the compiler makes of the model as written (and what the lab always did).
``splash`` is the TPU kernel real runs use (``jax.experimental.pallas.ops.tpu.splash_attention``;
MaxText's default attention on TPU): a flash-attention kernel that streams K and V through the chip's
on-chip memory in blocks, keeps only a running maximum and sum per query, skips the blocks the causal
mask hides, and never writes the scores. It is a Mosaic custom call: it compiles for TPU targets only
(without the chips, as every target does here), and XLA's ``cost_analysis()`` does not see inside it —
its FLOPs and streamed bytes come from the kernel's own formula (:func:`kernel_figures`), counted from
the compiled program's calls of it, added to the compiler's figures and said so.

Sharded, the kernel runs under ``shard_map`` over the batch's and the heads' mesh axes (each device
attends its own sequences and heads, as MaxText does); the layout is the plan's own ``attn_out``
(:func:`sharding_lab.models.activation_layout`). Block sizes: MaxText's defaults (``sa_block_q`` …
``sa_block_kv_dq`` = 512 in base.yml), at most the sequence. Measured on a real v5e (issue 32): JAX's
own default blocks (128) ran a 4,096-token causal attention forward+backward in 81 ms, the materialised
one in 60 ms.
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp

from . import activation_layout, constrain

ATTENTIONS = ("xla", "splash")
SPLASH_BLOCK = 512  # MaxText's sa_block_* defaults
SPLASH_LANES = 128  # the kernel's K/V blocks are whole multiples of the TPU's 128 lanes
# The kernel's matrix products per (q block, kv block) pair it visits: forward QKᵀ and PV; dq recomputes
# QKᵀ, then dP = dO·Vᵀ and dQ = dS·K; dkv recomputes QKᵀ, then dV = Pᵀ·dO, dP, dK = dSᵀ·Q.
SPLASH_MATMULS = {"fwd": 2, "dq": 3, "dkv": 4}


def xla_attention(q, k, v):
    """Causal attention as einsums: ``q`` (batch, seq, heads, head_dim), ``k``/``v`` (batch, seq, kv_heads,
    head_dim); query heads in groups, one group per K/V head (group g holds heads g·n … g·n+n-1), so the
    scores come out (batch, heads, seq, seq) as with one K/V head per query head."""
    b, seq, heads, d = q.shape
    groups = q.reshape(b, seq, k.shape[2], heads // k.shape[2], d)
    scores = jnp.einsum("bskgd,btkd->bkgst", groups, k).reshape(b, heads, seq, seq) * d**-0.5
    causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    scores = constrain(jnp.where(causal, scores, -1e9), "attn_scores")
    probs = jax.nn.softmax(scores, axis=-1).reshape(b, k.shape[2], heads // k.shape[2], seq, seq)
    return jnp.einsum("bkgst,btkd->bskgd", probs, v).reshape(b, seq, heads, d)


def splash_block(seq: int) -> int:
    """The kernel's block along both sequences: MaxText's 512, or the whole sequence when shorter."""
    return min(SPLASH_BLOCK, seq)


def splash_refusal(seq: int, platform: str, pipelined: bool) -> str | None:
    """Why splash attention cannot run here (None when it can): a TPU kernel, K/V blocks of 128 lanes."""
    if platform != "tpu":
        return (
            "attention splash is the Pallas TPU kernel (Mosaic): it compiles for TPU targets (v5e-8, v5p-16, …) "
            f"and runs on TPU chips, not on {platform} devices — choose attention xla here"
        )
    if seq % SPLASH_LANES:
        return (
            f"attention splash streams K and V in blocks of whole multiples of {SPLASH_LANES} positions; seq "
            f"{seq} is not one — try seq {max(SPLASH_LANES, seq - seq % SPLASH_LANES)} or attention xla"
        )
    if pipelined:
        return (
            "attention splash inside pipeline stages is not wired (the stages run under their own shard_map): "
            "choose attention xla with a pipeline preset"
        )
    return None


def splash_attention(q, k, v):
    """Causal attention by the splash kernel, same shapes in and out as :func:`xla_attention`; under a plan,
    in ``shard_map`` over the batch's and heads' mesh axes of its ``attn_out`` layout."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    seq, d = q.shape[1], q.shape[3]
    block = splash_block(seq)
    sizes = splash.BlockSizes(*(block,) * 8)

    def attend(q, k, v):  # the kernel takes one sequence (heads, seq, head_dim): mapped over the batch
        mask = splash.MultiHeadMask([splash.CausalMask((seq, seq)) for _ in range(q.shape[2])])
        kernel = splash.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1)
        qt, kt, vt = (x.transpose(0, 2, 1, 3) for x in (q * d**-0.5, k, v))
        return jax.vmap(kernel)(qt, kt, vt).transpose(0, 2, 1, 3)

    layout = activation_layout("attn_out")
    if layout is None:
        return attend(q, k, v)
    mesh, spec = layout
    batch_axes, _, heads_axes, _ = (tuple(spec) + (None,) * 4)[:4]  # a spec drops its trailing Nones
    names = () if heads_axes is None else (heads_axes,) if isinstance(heads_axes, str) else tuple(heads_axes)
    if k.shape[2] % math.prod(mesh.shape[a] for a in names):
        # Fewer K/V heads than the heads' ways (llama3-8b's 8 on 16): each query head gets its K/V head's
        # copy, so that every device's query heads find theirs (the plan replicates K/V here anyway).
        k, v = (jnp.repeat(x, q.shape[2] // k.shape[2], axis=2) for x in (k, v))
    split = jax.sharding.PartitionSpec(batch_axes, None, heads_axes, None)
    return jax.shard_map(attend, mesh=mesh, in_specs=(split,) * 3, out_specs=split, check_vma=False)(q, k, v)


def causal_blocks(seq: int, block_q: int, block_kv: int) -> int:
    """How many (q block, kv block) pairs a causal mask leaves a row of the kernel to visit: those with any
    position at or below the diagonal (the kernel skips the rest, and computes the visited ones whole)."""
    return sum(min(seq // block_kv, ((i + 1) * block_q - 1) // block_kv + 1) for i in range(seq // block_q))


_CALL = re.compile(r"^\s*(?:ROOT\s+)?%?splash_m[hq]a_(fwd|dq|dkv)\S*\s*=\s*(.*?)\scustom-call\(")
_ARRAY = re.compile(r"(?:bf16|f32|f16)\[(\d+(?:,\d+){2,3})\]")  # (batch,) heads, seq, head_dim


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(","))


def kernel_figures(hlo_text: str, itemsize: int) -> dict:
    """FLOPs and HBM bytes of the splash kernel's calls in a compiled program, from the kernel's formula (XLA
    counts none of its FLOPs). Each call's (batch, heads, seq, head_dim) is read from its query-shaped result
    (forward: the output; dq: dQ) — a dkv call's from the program's forward calls; per visited block pair,
    ``SPLASH_MATMULS`` products of 2·block·block·head_dim FLOPs. Bytes: what the kernel streams beyond one read
    of each operand (which XLA counts): K and V read again for every visited block of a query row (forward,
    dq), Q and dO for every visited block of a K/V column (dkv). Returns {"flops", "hbm_bytes", "calls"}."""
    calls, shapes = [], []
    for line in hlo_text.splitlines():
        match = _CALL.match(line)
        if not match:
            continue
        kind = match.group(1)
        # A batch of one sequence per device loses its batch dimension: (heads, seq, head_dim).
        arrays = [(1,) * (4 - len(dims)) + dims for a in _ARRAY.findall(match.group(2)) if (dims := _dims(a))]
        calls.append((kind, arrays))
        if kind in ("fwd", "dq") and arrays:
            shapes.append(max(arrays, key=math.prod))
    if not calls or not shapes:
        return {"flops": 0.0, "hbm_bytes": 0.0, "calls": {}}
    b, h, seq, d = max(shapes, key=math.prod)
    block = splash_block(seq)
    visited = causal_blocks(seq, block, block)
    flops = bytes_ = 0.0
    counted: dict[str, int] = {}
    for kind, _ in calls:
        counted[kind] = counted.get(kind, 0) + 1
        flops += SPLASH_MATMULS[kind] * 2.0 * block * block * d * visited * b * h
        bytes_ += 2.0 * b * h * d * (visited * block - seq) * itemsize
    return {"flops": flops, "hbm_bytes": bytes_, "calls": counted}
