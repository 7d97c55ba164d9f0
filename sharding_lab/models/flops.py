"""Model FLOPs: what one training step must compute by the model's own arithmetic, whatever the compiler did.

MFU (model FLOPs utilisation, PaLM: Chowdhery et al. 2022, appendix B; the scaling book's training.md)
divides these by the step time and the chips' peak; HFU (hardware FLOPs utilisation) divides the compiled
program's FLOPs instead, which also count rematerialisation's recompute, the optimizer, the norms and the
softmax. The two answer different questions (how well the model's work is done; how busy the chips are),
so the lab reports both under those names.

PaLM's count per token of a training step: **6·N** for the weights (2·N forward, 4·N backward: the gradients
of the activations and of the weights) plus, for attention, the scores Q·Kᵀ and their product with V: 2·2·H·Q
a token, a layer and a position it attends to forward, × 3 with the backward — L layers, H query heads of Q
features. **Causal attention as the kernel computes it**: a token attends to the positions up to its own, T/2
of a T-token context on average, so attention is **6·L·H·Q·T** a token. PaLM's appendix B counts the whole
T (12·L·H·Q·T, as if every token saw every position); MaxText counts causal attention as half since 2025
(its ``calculate_tflops_training_per_device``: the attention term halved for causal masks) — the lab does as
MaxText does, so that MFU never exceeds HFU on a step whose kernel skips the masked blocks. N counts the
parameters a token multiplies by:

- a lookup table is no matmul (an untied input embedding, a learned position table): left out, as
  MaxText's FLOP count and Kaplan et al. (2020) leave embeddings out; a tied embedding is also the
  unembedding matmul, so it counts;
- a mixture of experts' expert weights count top_k / experts of their total (the *active* parameters);
- vectors (norm scales, biases) count nothing: they are no matmul.

The MLP's count is exact rather than 6·N: no gradient flows into the input, so its first layer's
backward skips the activation gradient (2·din·dmid a row less).
"""

from __future__ import annotations

import dataclasses
import math

LOOKUP_TABLES = ("embedding", "pos")  # rule names of the transformer's lookup tables


@dataclasses.dataclass(frozen=True)
class ModelFlops:
    """One step's model FLOPs over the whole batch (all devices together)."""

    weights: float  # 6·N per token (the MLP: its exact matmul count)
    attention: float  # 6·L·H·Q·T per token, causal (0 without attention)
    tokens: int  # tokens (or rows) in the step's batch
    matmul_parameters: float  # N: the active parameters a token multiplies by
    formula: str

    @property
    def total(self) -> float:
        return self.weights + self.attention

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"total": self.total}


def matmul_parameters(family, spec) -> float:
    """N: the parameters a token multiplies by (module docstring): matrices, lookups left out, experts at
    top_k / experts."""
    tied = getattr(spec, "embeddings", "untied") == "tied"
    experts, top_k = getattr(spec, "experts", 0) or 0, getattr(spec, "top_k", 0) or 0
    total = 0.0
    for array in family.parameters(spec).values():
        if len(array.shape) < 2:
            continue
        if array.rule_name in LOOKUP_TABLES and not (tied and array.rule_name == "embedding"):
            continue
        size = float(math.prod(array.shape))
        if experts and "expert" in array.logical_axes:
            size *= top_k / experts
        total += size
    return total


def transformer_flops(family, spec, batch_size: int) -> ModelFlops:
    """PaLM's 6·N per token plus causal attention, 6·L·H·Q·T (half of PaLM's 12·L·H·Q·T), × the batch's tokens."""
    tokens = batch_size * spec.seq
    n = matmul_parameters(family, spec)
    attention = 6 * spec.layers * spec.heads * spec.head_dim * spec.seq
    return ModelFlops(
        6 * n * tokens,
        float(attention) * tokens,
        tokens,
        n,
        "6·N·tokens + 6·L·H·Q·T·tokens (PaLM's appendix B, causal attention as half: MaxText's count): "
        f"N = {n:,.0f} matmul parameters "
        f"(lookup tables left out{', experts at top_k/experts' if getattr(spec, 'experts', 0) else ''}), "
        f"L·H·Q·T = {spec.layers}·{spec.heads}·{spec.head_dim}·{spec.seq}",
    )


def mlp_flops(spec, batch_size: int) -> ModelFlops:
    """The MLP's matmuls exactly: 2·N forward, 2·N weight gradients, 2·(N − din·dmid) input gradients a row."""
    widths = [spec.din] + [spec.dmid] * (1 + spec.hidden_layers) + [spec.dout]
    n = float(sum(a * b for a, b in zip(widths, widths[1:])))
    per_row = 6 * n - 2 * spec.din * spec.dmid
    return ModelFlops(
        per_row * batch_size,
        0.0,
        batch_size,
        n,
        f"6·N − 2·din·dmid per row (N = {n:,.0f} weights; the input needs no gradient)",
    )


def model_flops(family, spec, batch_size: int) -> ModelFlops | None:
    """The family's count (:class:`ModelFamily.model_flops <sharding_lab.models.ModelFamily>`); None for a
    family this module does not know (a plug-in family gives its own by overriding that method)."""
    if family.name == "transformer":
        return transformer_flops(family, spec, batch_size)
    if family.name == "mlp":
        return mlp_flops(spec, batch_size)
    return None
