"""The transformer's task and its loss: reversing a sequence, and the cross-entropy of the next token.

Each row is ``a_1 … a_h a_h … a_1`` (h = seq/2 random tokens, then the same reversed); the model predicts
the next token, and only the second half is predictable, so the loss is the mean cross-entropy over
those h positions (targets -1 elsewhere). The loss reads the logits once, in two reductions over the
vocabulary (:func:`token_losses`), so no float32 copy of the logits is kept beside them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .moe import AUX_LOSS_COEFFICIENT


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
    with jax.named_scope("loss"):
        loss = jnp.sum(token_losses(logits, y)) / jnp.maximum(jnp.sum(y >= 0), 1)
    return loss + AUX_LOSS_COEFFICIENT * aux / len(model.blocks) if model.experts else loss


def token_losses(logits, y):
    """Each position's cross-entropy, logsumexp(logits) − logits[y] (0 where y < 0: one_hot(-1) is all
    zeros), in float32 whatever the logits' dtype. Written as two reductions over the vocabulary, so the
    compiler fuses the float32 upcast and the one-hot into them: no (batch, seq, vocab) log-softmax or
    one-hot is kept — the logits are the only such array — and a vocab-split logits stays split."""
    wide = logits.astype(jnp.float32)
    picked = jnp.sum(wide * jax.nn.one_hot(y, logits.shape[-1], dtype=jnp.float32), axis=-1)
    return jnp.where(y >= 0, jax.nn.logsumexp(wide, axis=-1) - picked, 0.0)


def target_count(y):
    """How many positions of a batch have a target: the loss's denominator."""
    return jnp.maximum(jnp.sum(y >= 0), 1)


def partial_loss(logits, y, count):
    """One microbatch's share of :func:`cross_entropy_loss`: its summed cross-entropy over the whole
    batch's ``count``, so the shares of the microbatches add up to the batch's loss."""
    with jax.named_scope("loss"):
        return jnp.sum(token_losses(logits, y)) / count
