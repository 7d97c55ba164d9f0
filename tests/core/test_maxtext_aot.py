"""A program MaxText compiled, read by the lab's rule (issue 54, item 2): tools/maxtext_aot.py sets MaxText's own
ahead-of-time compile of a layout beside the lab's, both programs read by
:func:`sharding_lab.cost.compiled.read_flops` — so that rule must count a program the lab did not write as a hand
count does.

``tests/data/maxtext/tiny-v5e-8.hlo.gz`` is MaxText 0.2.5's ``train_compile`` of a 2-layer Llama-shaped model (embed
512, 4 heads of 128, MLP 1,024 SwiGLU, vocabulary 32,000, 512 tokens, one sequence a chip) with FSDP over a v5e-8,
remat full (MaxText's default), splash attention, AdamW in mixed precision — compiled by
``python -m tools.maxtext_compile`` (JAX 0.12.1, libtpu 0.0.52) with the arguments its JSON keeps. Compiling it again
takes MaxText's process about 70 s of CPU and the lab's as much (2-core machine), so the suite reads the kept program
and the big comparisons are a tool (docs/plan-physics.md, "MaxText compiles the same step")."""

from __future__ import annotations

import gzip
import json

import pytest

from sharding_lab.cost.compiled import read_flops
from tests.support import ROOT
from tools import maxtext_aot

KEPT = ROOT / "tests" / "data" / "maxtext"
TOKENS, EMBED, HEADS, MLP, VOCAB, LAYERS = 512, 512, 4 * 128, 1024, 32000, 2


@pytest.fixture(scope="module")
def program():
    figures = json.loads((KEPT / "tiny-v5e-8.json").read_text())
    return figures, gzip.decompress((KEPT / "tiny-v5e-8.hlo.gz").read_bytes()).decode()


def flops(m, k, n):
    return 2.0 * m * k * n


def test_the_lab_reads_maxtext_s_loop_over_layers_as_a_hand_count(program):
    _, text = program
    found = maxtext_aot.products_by_shape(text)
    # Remat full: each layer's forward, its recompute for the backward pass, then two products backward (dX, dW).
    # The four attention projections (q, k, v, o: 512 → 4 heads × 128) run all four passes;
    assert found[(TOKENS, EMBED, HEADS)] == LAYERS * 4 * 4 * flops(TOKENS, EMBED, HEADS)
    # of the MLP's three (gate, up, down), the recompute skips the down projection: its output is the layer's
    # output, which the backward pass does not need again (3 forward + 2 recomputed + 6 backward);
    assert found[(TOKENS, EMBED, MLP)] == LAYERS * 11 * flops(TOKENS, EMBED, MLP)
    # the unembedding runs once forward and twice backward, outside the loop; the embedding is a gather (no product).
    assert found[(TOKENS, EMBED, VOCAB)] == 3 * flops(TOKENS, EMBED, VOCAB)
    # The splash kernel: forward in each layer and again in its recompute, one dq and one dkv backward.
    assert (found["kernel splash_mha_fwd"], found["kernel splash_mha_dq"], found["kernel splash_mha_dkv"]) == (4, 2, 2)


def test_the_step_s_flops_are_the_products_the_kernel_and_xla_s_other_ops(program):
    figures, text = program
    read = read_flops(text, figures["cost"]["flops"])
    products = LAYERS * (16 * flops(TOKENS, EMBED, HEADS) + 11 * flops(TOKENS, EMBED, MLP))
    products += 3 * flops(TOKENS, EMBED, VOCAB)
    # Splash: 1 sequence × 4 heads, one 512 × 512 block pair (causal: it is visited), head dim 128; 2 products in a
    # forward call, 3 in dq, 4 in dkv (the kernel's formula, sharding_lab.models.attention).
    kernel = LAYERS * (2 * 2 + 3 + 4) * flops(512, 512, 128) * 4
    assert read.products == products + kernel
    # XLA counts the loop's body once: its own total is below the step's, and what is left beyond the products
    # (norms, softmax statistics, AdamW) is a small part of the step.
    assert figures["cost"]["flops"] < read.flops
    assert 0 < read.flops - read.products < 0.02 * read.flops
