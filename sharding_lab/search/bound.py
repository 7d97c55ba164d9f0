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

**Work repeated along an axis.** A mesh axis that splits no array (:meth:`~sharding_lab.training.config.Plan.
unused_axes`: every parameter, the batch and every activation the step constrains are replicated along it — 128x2
``fsdp`` puts the batch and the weights on ``data`` only) holds the same arrays on each of its devices, and the
partitioned program, derived from those layouts alone, has each of them compute the same: each chip multiplies its
data shard's every token by every weight, 2 FLOPs forward and 4 backward per weight (the model's own count without
attention: :meth:`ModelFamily.model_flops <sharding_lab.models.ModelFamily>`' ``weights``, lookup tables left
out). Its compute time is at least those FLOPs × the repeated ways ÷ (chips × peak): llama3-8b on 128x2 ``fsdp``,
4.72e16 × 2 ÷ (256 × 197 TFLOP/s) = 1.87 s, where the compiler's count is 2.66 s. (Not for experts: a token
multiplies only the experts it is routed to, and a full expert drops tokens.) Such a layout is searched after
every other (:func:`defer`), so that a compiled best is there to hold it against.

Not used: the HBM term (XLA's extra traffic depends on how its fusions split the softmax: no count bounds it
tightly) and the network term (the two programs' collectives differ: seen 0.97 s against 1.02 s)."""

from __future__ import annotations

import functools
import math

from ..errors import ConfigError
from ..training.config import LabConfig
from .candidates import SKIP_BOUND, Candidate, Result, label, screen, splash_twin

FORWARD, BACKWARD = 2, 4  # XLA's attention products: QKᵀ and PV forward; dP, dV, dQ and dK backward


def xla_attention_excess(config: LabConfig, dtype: str) -> float | None:
    """Seconds of compute per chip that ``config``'s step with XLA's attention does at least beyond its splash
    twin's, by the count above (negative where the kernel's formula counts more); None where there is no
    attention to count (no scores layout, or no peak)."""
    from ..hardware.chips import chip as get_chip
    from ..models.attention import SPLASH_MATMULS, causal_blocks, splash_block
    from ..training.config import plan as make_plan

    layouts = make_plan(config).layouts()
    scores, out = layouts.get("act/attn_scores"), layouts.get("act/attn_out")
    peak, _ = get_chip(config.on.chip).flops(dtype)
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


@functools.lru_cache(maxsize=2048)
def repeated_ways(config: LabConfig) -> int:
    """How many devices repeat each one's work in ``config``'s layout: the product of the sizes of the mesh axes
    that split no array (1 where every axis splits one, or where the plan refuses the layout)."""
    from ..training.config import plan as make_plan

    try:
        plan = make_plan(config)
    except ConfigError:
        return 1
    sizes = config.mesh.axis_sizes
    return math.prod(sizes[a] for a in plan.unused_axes())


def repeated_work_bound(config: LabConfig, dtype: str) -> float | None:
    """Seconds of compute per chip at least, where devices repeat each other's work (module docstring): the
    model's weight FLOPs × the repeated ways ÷ (chips × peak); None where no axis repeats, or for experts."""
    from ..hardware.chips import chip as get_chip

    ways = repeated_ways(config)
    if ways <= 1 or getattr(config.model, "experts", 0):
        return None
    counted = config.family.model_flops(config.model, config.batch_size)
    on = config.on
    peak, _ = get_chip(on.chip).flops(dtype)
    if counted is None or not peak:
        return None
    return counted.weights * ways / (on.devices * peak)


def defer(candidate: Candidate, base: LabConfig, dtype: str, searched) -> int:
    """When a candidate is compiled: 0 first; 1 — a layout whose devices repeat each other's work — after those;
    2 — XLA's attention with its splash twin in ``searched`` — last: each then meets the compiled candidates its
    bound is held against (:func:`bounded`). Only an order: a deferred candidate that cannot be bounded out is
    compiled all the same."""
    if screen(candidate, base, dtype).skipped is not None:
        return 0
    if splash_twin(candidate) in searched:
        return 2
    return 1 if repeated_ways(candidate.config(base)) > 1 else 0


def bounded(candidate: Candidate, base: LabConfig, dtype: str, done: dict) -> Result | None:
    """``candidate`` skipped, said why, when a lower bound on its compute time — its splash twin's compute (compiled,
    fitting) plus :func:`xla_attention_excess`, or :func:`repeated_work_bound` — is no less than the step of a
    compiled candidate that fits: it cannot be faster, so it cannot be the best. None when it may still be."""
    from ..units import format_seconds

    fitting = [r for r in done.values() if r.fits and r.step_s is not None]
    if not fitting:
        return None
    best = min(fitting, key=lambda r: r.step_s)
    config = candidate.config(base)
    bounds = []
    twin = done.get(splash_twin(candidate)) if splash_twin(candidate) else None
    if twin is not None and twin.fits and twin.terms:
        excess = xla_attention_excess(config, dtype)
        if excess is not None:
            bounds.append(
                (
                    twin.terms["compute_s"] + excess,
                    f"its splash twin computes for {format_seconds(twin.terms['compute_s'])}; XLA's einsums add at "
                    f"least {format_seconds(excess)} (every S×S score, not only the kernel's causal blocks)",
                )
            )
    repeated = repeated_work_bound(config, dtype)
    if repeated is not None:
        bounds.append(
            (
                repeated,
                f"{repeated_ways(config)} devices repeat each one's work (an axis that splits no array): the "
                f"model's weight FLOPs alone take {format_seconds(repeated)}",
            )
        )
    if not bounds or max(b for b, _ in bounds) < best.step_s:
        return None
    result = screen(candidate, base, dtype)
    if result.skipped is not None:
        return result
    bound, why = max(bounds, key=lambda b: b[0])
    result.skipped = SKIP_BOUND
    result.detail = (
        f"{why}: at least {format_seconds(bound)}, not below {label(best.candidate)}'s step of "
        f"{format_seconds(best.step_s)}"
    )
    return result


__all__ = ["bounded", "defer", "repeated_ways", "repeated_work_bound", "xla_attention_excess"]
