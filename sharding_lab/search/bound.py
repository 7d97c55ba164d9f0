"""A lower bound on a candidate's step from a compiled twin: what the search need not compile because it cannot win.

A step with XLA's attention and its splash twin (same layout, same remat; :func:`~sharding_lab.search.candidates.
splash_twin`) are the same program but for the attention. So XLA's compiled FLOPs are the twin's, less the kernel's
(which the twin's compute term counts by the kernel's formula, :func:`sharding_lab.models.attention.
kernel_figures`), plus XLA's own attention — and XLA's einsums compute every one of the S×S scores: per chip
``E`` = its (batch, heads, query, key) elements (the plan's ``act/attn_scores`` layout), 2·head_dim FLOPs each
per product, 2 products forward (QKᵀ, PV) and 4 backward (dP, dV, dS·K, dSᵀ·Q). The kernel visits only the blocks
at or below the diagonal (:func:`~sharding_lab.models.attention.causal_blocks`, a fraction ``f`` of them) and
computes 2 products forward, 3 for dQ and 4 for dK and dV (``SPLASH_MATMULS``: it recomputes the scores in each).
Counting one forward pass for both (a remat policy that recomputes the forward adds 2 to XLA's products and
f·2 < 2 to the kernel's: it only raises XLA's side), XLA's compute time is at least

    twin's compute + (6 − 9·f) · 2·head_dim · E · layers ÷ peak

and a step is never shorter than its compute time (the roofline's step is the largest of its terms). Where that
bound is already no less than the step of a compiled candidate that fits, the XLA step cannot be faster, cannot be
the best, and is not compiled (:func:`bounded`). llama3-8b at 4,096 tokens (blocks of 512: f = 36/64): each
chip's XLA attention costs 0.94 units more than the kernel, 21 ms a step on 256-way FSDP — the bound
1.297 s + 21 ms = 1.318 s against the compiled XLA step's compute 1.341 s. At 1,024 tokens (f = 3/4) the kernel
computes more than XLA's einsums (6.75 against 6 units), the bound falls below the twin's own compute, and
nothing is pruned: the rule only skips what the count proves.

Not used: the HBM term (XLA's extra traffic depends on how its fusions split the softmax: no count bounds it
tightly) and the network term (the two programs' collectives differ: seen 0.97 s against 1.02 s)."""

from __future__ import annotations

import math

from ..training.config import LabConfig
from .candidates import SKIP_BOUND, Candidate, Result, label, screen, splash_twin

FORWARD, BACKWARD = 2, 4  # XLA's attention products: QKᵀ and PV forward; dP, dV, dQ and dK backward


def xla_attention_excess(config: LabConfig, dtype: str) -> float | None:
    """Seconds of compute per chip that ``config``'s step with XLA's attention does at least beyond its splash
    twin's, by the count above (negative where the kernel's formula counts more); None where there is no
    attention to count (no scores layout, or no peak)."""
    from ..hardware import targets
    from ..hardware.chips import chip as get_chip
    from ..models.attention import SPLASH_MATMULS, causal_blocks, splash_block
    from ..training.config import plan as make_plan

    layouts = make_plan(config).layouts()
    scores, out = layouts.get("act/attn_scores"), layouts.get("act/attn_out")
    peak, _ = get_chip(targets.parse(config.target).chip).flops(dtype)
    if scores is None or out is None or not peak:
        return None
    spec = config.model
    seq, head_dim, layers = spec.seq, spec.head_dim, getattr(spec, "layers", 1)
    xla = math.prod(scores.shard_shape)  # every score, masked or not, on this chip
    batch, _, heads, _ = out.shard_shape  # the kernel: this chip's sequences and heads, each whole (S × S)
    block = splash_block(seq)
    visited = causal_blocks(seq, block, block) / (seq // block) ** 2
    kernel = batch * heads * seq * seq * visited
    products = 2.0 * head_dim * layers
    excess = products * (xla * (FORWARD + BACKWARD) - kernel * sum(SPLASH_MATMULS.values()))
    return excess / peak


def bounded(candidate: Candidate, base: LabConfig, dtype: str, done: dict) -> Result | None:
    """``candidate`` (XLA's attention) skipped, said why, when its splash twin was compiled and fits and the twin's
    compute time plus :func:`xla_attention_excess` is no less than the step of a compiled candidate that fits;
    None when it may still be the best (or has no such twin)."""
    twin = done.get(splash_twin(candidate)) if splash_twin(candidate) else None
    if twin is None or not twin.fits or not twin.terms:
        return None
    best = min((r for r in done.values() if r.fits and r.step_s is not None), key=lambda r: r.step_s)
    result = screen(candidate, base, dtype)
    if result.skipped is not None:
        return result
    excess = xla_attention_excess(candidate.config(base), dtype)
    if excess is None or twin.terms["compute_s"] + excess < best.step_s:
        return None
    from ..cost.roofline import format_seconds

    bound = twin.terms["compute_s"] + excess
    result.skipped = SKIP_BOUND
    result.detail = (
        f"its splash twin computes for {format_seconds(twin.terms['compute_s'])}; XLA's einsums add at least "
        f"{format_seconds(excess)} (every S×S score, not only the kernel's causal blocks): at least "
        f"{format_seconds(bound)}, not below {label(best.candidate)}'s step of {format_seconds(best.step_s)}"
    )
    return result


__all__ = ["bounded", "xla_attention_excess"]
