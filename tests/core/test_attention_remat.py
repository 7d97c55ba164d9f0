"""Attention as it runs (xla | splash) and rematerialisation policies; each kind of named size × every preset
compiles as the search would (abstract, one layer) or is refused with a sentence — never a traceback."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import sharding_lab as sl
from sharding_lab.models import family
from sharding_lab.models.attention import causal_blocks
from sharding_lab.models.transformer import Transformer, TransformerSpec
from sharding_lab.sharding.mesh import MeshSpec
from sharding_lab.training.step import lower_train_step

FAMILY = family("transformer")
# A llama-shaped block small enough to compile in seconds: GQA, SwiGLU, RoPE, 1,024 tokens of 128-wide heads. Its
# MLP and vocabulary are as small as keeps attention's masked half under 5% of the step's FLOPs (3.9%; the TPU
# compiler's time grows with them: the two compiles took 42 s with mlp_dim and vocab 1,024, 26 s now).
BLOCK = TransformerSpec(
    layers=1, embed_dim=512, heads=4, kv_heads=2, head_dim=128, mlp_dim=512, vocab=256, seq=1024,
    mlp_type="swiglu", positions="rope",
)  # fmt: skip


def config(model, target="v5e-8", mesh=((4, 2), ("data", "model")), preset="fsdp_tp", batch=8):
    return sl.LabConfig(
        mesh=MeshSpec(*mesh), preset=preset, model=model, optimizer="adamw", lr=1e-3, batch_size=batch, steps=1,
        chunk=1, target=target,
    )  # fmt: skip


def test_splash_on_the_simulated_host_is_refused_with_a_sentence():
    with pytest.raises(sl.ConfigError, match="Pallas TPU kernel.*choose attention xla"):
        sl.plan(config(dataclasses.replace(BLOCK, attention="splash"), target="cpu", mesh=((8,), ("data",)),
                       preset="dp"))  # fmt: skip
    with pytest.raises(sl.ConfigError, match="multiples of 128"):
        sl.plan(config(dataclasses.replace(BLOCK, attention="splash", seq=1000)))


def test_the_causal_block_count_by_hand():
    # 4,096 tokens in blocks of 512: row i visits i + 1 blocks, 36 of 64; one block: 1 of 1
    assert causal_blocks(4096, 512, 512) == 36 and causal_blocks(512, 512, 512) == 1


def test_splash_compiles_for_v5e_8_flops_by_its_formula_and_less_hbm_than_xla():
    from sharding_lab import cost

    xla = cost.predict(sl.plan(config(BLOCK)), None, "mixed")
    splash = cost.predict(sl.plan(config(dataclasses.replace(BLOCK, attention="splash"))), None, "mixed")
    note = next(n for n in splash.notes if "splash kernel" in n)
    assert "1 dkv, 1 dq, 1 fwd" in note
    # The kernel's formula by hand, per chip: batch 8 over data 4, heads 4 over model 2 → 2 × 2; 1,024 tokens in
    # one block-row of 2 visited (512) blocks... 3 of 4 pairs; 9 products of 2·512·512·128 FLOPs each.
    kernel = 9 * 2 * 512 * 512 * 128 * causal_blocks(1024, 512, 512) * 2 * 2
    assert f"{kernel:.3g}" in note
    # The same step but for attention's masked half, which XLA computes and splash skips: within 5%.
    assert abs(splash.flops - xla.flops) / xla.flops < 0.05
    assert splash.hbm_needed < xla.hbm_needed


@pytest.mark.parametrize("remat", ["save_qkv_proj", "minimal", "save_dots"])
def test_a_selective_remat_computes_the_same_gradients(remat):
    small = TransformerSpec(layers=2, remat="none")
    x = jnp.asarray(np.random.default_rng(0).integers(0, small.vocab, (4, small.seq)), jnp.int32)

    def grads(spec):
        model = FAMILY.build(spec, lambda *a: None, nnx.Rngs(0))
        return nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)

    plain, kept = grads(small), grads(dataclasses.replace(small, remat=remat))
    a, b = jax.tree.leaves(nnx.state(plain)), jax.tree.leaves(nnx.state(kept))
    assert len(a) == len(b) and all(np.allclose(p, q, atol=1e-5) for p, q in zip(a, b))


def test_embed_and_head_are_forward_with_rope_and_tied_embeddings():
    spec = TransformerSpec(positions="rope", embeddings="tied")
    model = Transformer(spec, lambda *a: None, nnx.Rngs(0))
    x = jnp.zeros((2, spec.seq), jnp.int32)
    h = model.embed(x)
    for block in model.blocks:
        h = block(h)
    np.testing.assert_allclose(model.head(h), model(x), atol=1e-6)


MESHES = {1: ((8,), ("data",)), 2: ((4, 2), ("data", "model"))}


def _one_size_per_kind() -> list[str]:
    """The named sizes, one of each kind of decoder (MLP, embeddings, positions, biases, experts): sizes of one
    kind differ only in their numbers, and each lowering costs seconds."""
    kinds = {}
    for name in FAMILY.named_sizes:
        spec = FAMILY.named_spec(name)
        kinds.setdefault((spec.mlp_type, spec.embeddings, spec.positions, spec.qkv_bias, spec.experts > 0), name)
    return sorted(set(kinds.values()) - {"default"}) + ["default"]


@pytest.mark.parametrize("size", _one_size_per_kind())
def test_each_kind_of_named_size_and_every_preset_lowers_or_is_refused_with_a_sentence(size):
    """As the search would compile it (abstract, for a TPU slice) but only lowered, one layer: each preset once,
    the remat and attention options taking turns; a refusal must be a ConfigError, never another exception."""
    spec = dataclasses.replace(FAMILY.named_spec(size), layers=1, seq=256)
    options = itertools.cycle(itertools.product(("none", "full", "save_qkv_proj", "minimal"), ("xla", "splash")))
    for name, preset in FAMILY.presets.items():
        remat, attention = next(options)
        experts = 4 if name.startswith("ep") else 0
        model = dataclasses.replace(spec, remat=remat, attention=attention, experts=experts, top_k=min(2, 4))
        # Each preset on a mesh that has its roles; a pipeline's stages (2) each get a layer of their own.
        mesh = {
            "pp": ((2, 4), ("stage", "data")),
            "pp_tp": ((2, 2, 2), ("stage", "data", "model")),
            "ep": ((4, 2), ("data", "expert")),
            "ep_dp": ((4, 2), ("data", "expert")),
            "ep_tp": ((2, 2, 2), ("data", "expert", "model")),
        }.get(name, ((4, 2), ("data", "model")) if preset.needs_two_axes or name in ("tp", "sp") else MESHES[1])
        model = dataclasses.replace(model, layers=2 if name.startswith("pp") else 1)
        try:
            lower_train_step(sl.plan(config(model, mesh=mesh, preset=name, batch=8)), "mixed")
        except sl.ConfigError as refused:
            assert str(refused).strip(), (size, name, remat, attention)
