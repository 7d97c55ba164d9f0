"""The transformer's sizes and options (:class:`TransformerSpec`), their limits and choices, and how a spec
that cannot be built is refused (a :class:`~sharding_lab.errors.ConfigError` that says what to change)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..errors import ConfigError

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
    "mlp_type": ("gelu", "swiglu", "geglu"),
    # Biases on the q, k and v projections (Qwen 2's); none elsewhere.
    "qkv_bias": ("none", "qkv"),
    "embeddings": ("untied", "tied"),
    "positions": ("learned", "rope"),
    # Rematerialisation (sharding_lab.models.remat): none, every block recomputed from its input, or a
    # selective policy that keeps some matmul outputs (MaxText's remat_policy names).
    "remat": ("none", "full", "save_qkv_proj", "minimal", "save_dots"),
    # Attention (sharding_lab.models.attention): XLA's, scores materialised, or the Pallas splash kernel (TPU).
    "attention": ("xla", "splash"),
    # A mixture of experts' capacity factor, as a choice among the values papers use (Switch
    # Transformer: 1.0 and 1.25; GShard: 2.0), so that every form and link handles it as a word.
    "capacity_factor": ("1.25", "1.0", "1.5", "2.0"),
}


@dataclasses.dataclass(frozen=True)
class TransformerSpec:
    """The transformer's sizes and options; the defaults are small enough to train on the simulated host.

    ``kv_heads`` 0 means as many K/V heads as query heads (multi-head attention); fewer is
    grouped-query attention, each K/V head shared by ``heads // kv_heads`` query heads.
    ``mlp_type``: ``gelu`` (two matrices, GPT-2's), ``swiglu`` (gate, up, down: Llama's) or ``geglu`` (the same
    three matrices with a GELU gate: Gemma's). ``qkv_bias``: ``qkv`` adds a bias to the q, k and v projections
    (Qwen 2's), ``none`` has none.
    ``embeddings``: ``tied`` reuses the token embedding as the unembedding (GPT-2), ``untied`` has
    its own (Llama 3). ``positions``: a ``learned`` table (GPT-2) or ``rope``, rotary, no parameters
    (Llama). ``remat``: ``full`` recomputes each block in the backward pass, keeping only its input;
    ``save_qkv_proj``, ``minimal`` and ``save_dots`` keep some matmul outputs too (:mod:`.remat`).
    ``attention``: ``xla`` (the scores materialised) or ``splash``, the Pallas TPU kernel (:mod:`.attention`).
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
    attention: str = "xla"
    qkv_bias: str = "none"

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
