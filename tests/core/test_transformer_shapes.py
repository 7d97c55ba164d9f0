"""Real decoder shapes in the transformer family: grouped-query attention, SwiGLU, tied embeddings,
rotary positions, full rematerialisation, and the named sizes of public models — their parameter
counts held against the model cards and against a count written out from the cards' config files,
all from abstract shapes (an 8B model is never allocated)."""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import sharding_lab as sl
from sharding_lab.cli import main as cli
from sharding_lab.models.transformer import Transformer, TransformerSpec
from sharding_lab.program.communication import analyze
from sharding_lab.sharding.mesh import MeshSpec
from sharding_lab.training import options
from tests.support import ROOT

FAMILY = sl.family("transformer")
SMALL = TransformerSpec(
    layers=2,
    embed_dim=32,
    heads=4,
    kv_heads=2,
    head_dim=8,
    mlp_dim=64,
    vocab=16,
    seq=16,
    mlp_type="swiglu",
    embeddings="tied",
    positions="rope",
)


def decoder_count(layers, d_model, d_ff, heads, kv_heads, head_dim, vocab, tied, gated, positions=0):
    """Parameters of a bias-free pre-RMSNorm decoder, written out from a config file's numbers (not
    from the family's code): per layer q, k, v, o, the MLP's two or three matrices and two norm
    scales; then the embedding, the unembedding unless tied, learned positions, the final norm."""
    attention = d_model * heads * head_dim * 2 + d_model * kv_heads * head_dim * 2
    mlp = (3 if gated else 2) * d_model * d_ff
    per_layer = attention + mlp + 2 * d_model
    return layers * per_layer + vocab * d_model * (1 if tied else 2) + positions * d_model + d_model


def test_named_sizes_have_the_cards_parameter_counts():
    cards = {  # the config.json figures each NamedSize cites
        "llama3-8b": decoder_count(32, 4096, 14336, 32, 8, 128, 128256, tied=False, gated=True),
        "llama3-70b": decoder_count(80, 8192, 28672, 64, 8, 128, 128256, tied=False, gated=True),
        "gpt2-small": decoder_count(12, 768, 3072, 12, 12, 64, 50257, tied=True, gated=False, positions=1024),
    }
    for name, expected in cards.items():
        size = FAMILY.named_sizes[name]
        count = FAMILY.parameter_count(FAMILY.named_spec(name))
        assert count == expected, name
        assert abs(count / size.card_parameters - 1) < 0.01, (name, count)
        assert size.source.startswith("https://huggingface.co/"), name
    assert FAMILY.parameter_count(FAMILY.named_spec("llama3-8b")) == 8_030_261_248
    # GPT-2's exact count (Hugging Face: 124,439,808) less what this family leaves out: the biases of
    # c_attn, c_proj, c_fc, mlp c_proj, and LayerNorm's biases (RMSNorm has a scale only).
    gpt2_biases = 12 * (3 * 768 + 768 + 3072 + 768 + 2 * 768) + 768
    assert FAMILY.parameter_count(FAMILY.named_spec("gpt2-small")) == 124_439_808 - gpt2_biases
    assert FAMILY.named_spec("default") == TransformerSpec()  # today's model is a named size too


def test_every_named_size_with_a_card_counts_its_parameters_within_half_a_percent():
    for name, size in FAMILY.named_sizes.items():
        if size.card_parameters:
            count = FAMILY.parameter_count(FAMILY.named_spec(name))
            assert abs(count / size.card_parameters - 1) < 0.005, (name, count)
    # Exact counts written out from the configs (Qwen 2.5 7B's q/k/v biases: 28 × (3,584 + 2 × 512)).
    qwen = decoder_count(28, 3584, 18944, 28, 4, 128, 152064, tied=False, gated=True) + 28 * (3584 + 2 * 512)
    assert FAMILY.parameter_count(FAMILY.named_spec("qwen2.5-7b")) == qwen == 7_615_616_512
    experts = 32 * (7 * 4096 * 14336 * 3 + 4096 * 8)  # Mixtral: 8 experts where Mistral has one MLP, and a router
    mistral = decoder_count(32, 4096, 14336, 32, 8, 128, 32000, tied=False, gated=True)
    assert FAMILY.parameter_count(FAMILY.named_spec("mixtral-8x7b")) == mistral + experts == 46_702_792_704


def test_maxtexts_parameter_scales_are_base_yml_scaled_as_pyconfig_does():
    """Written out by hand from pyconfig.get_individual_scales: log2(scale) = 3b + r; heads and MLP doubled b + (r > 0)
    times, the embedding b + (r > 1), the layers b, from base_emb_dim 2048, 16 heads, base_mlp_dim 7168, 16 layers."""
    expected = {
        16: (4096, 64, 28672, 32),
        32: (8192, 64, 28672, 32),
        64: (8192, 64, 28672, 64),
        128: (8192, 128, 57344, 64),
    }
    for scale, (embed, heads, mlp, layers) in expected.items():
        spec = FAMILY.named_spec(f"maxtext-{scale}b")
        assert (spec.embed_dim, spec.heads, spec.kv_heads, spec.mlp_dim, spec.layers) == (
            embed,
            heads,
            heads,
            mlp,
            layers,
        )
        count = FAMILY.parameter_count(spec)
        assert count == decoder_count(layers, embed, mlp, heads, heads, 128, 32000, tied=False, gated=True)
        assert 0.97 < count / (scale * 1e9) < 1.0, (scale, count)  # MaxText's name is the nominal size


def test_llama3_8b_plans_abstractly_and_training_is_refused_before_allocating():
    config = sl.LabConfig(
        mesh=MeshSpec((2, 4)), preset="fsdp_tp", model=FAMILY.named_spec("llama3-8b"), optimizer="adamw", batch_size=8
    )
    plan = sl.plan(config)
    q, k = plan.layouts()["params/blocks/31/q"], plan.layouts()["params/blocks/31/k"]
    assert q.shape == (4096, 32, 128) and q.shard_shape == (2048, 8, 128)
    assert k.shape == (4096, 8, 128) and k.shard_shape == (2048, 2, 128)  # kv heads on model, 8 / 4
    assert "params/pos" not in plan.arrays and "params/unembed" in plan.arrays  # rope, untied
    with pytest.raises(sl.ConfigError, match=r"needs about [\d.]+ [GT]B across 8 devices"):
        sl.training.config.check_memory(plan)


def test_cli_layout_of_llama3_8b_is_quick_and_train_exits_2_with_one_line():
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sharding_lab",
            "layout",
            "--model",
            "transformer",
            "--size",
            "llama3-8b",
            "--mesh",
            "2x4",
            "--preset",
            "fsdp_tp",
            "--json",
        ],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["config"]["model"]["kv_heads"] == 8 and out["config"]["model"]["mlp_type"] == "swiglu"
    assert out["layout"]["params/blocks/0/mlp_gate"]["shape"] == [4096, 14336]
    assert elapsed < 60, elapsed  # about 3 s on an idle 2-core machine: nothing is allocated or compiled
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "sharding_lab",
            "train",
            "--model",
            "transformer",
            "--size",
            "llama3-8b",
            "--mesh",
            "2x4",
            "--preset",
            "fsdp_tp",
        ],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: this run needs about") and refused.stderr.count("\n") == 1


def test_bad_sizes_and_options_get_one_sentence(capsys):
    for argv, said in (
        (["--kv-heads", "3"], "must be a multiple of kv_heads (3)"),
        (["--size", "llama4"], "unknown size 'llama4' for the transformer model: choose one of"),
        (["--positions", "rope", "--head-dim", "15"], "head_dim must be even"),
    ):
        assert cli.main(["layout", "--model", "transformer", *argv]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err


def test_size_options_round_trip_through_argv():
    parser = argparse.ArgumentParser()
    options.add_config_options(parser)
    for model in (
        FAMILY.named_spec("llama3-8b"),
        dataclasses.replace(FAMILY.named_spec("gpt2-small"), remat="full"),
        SMALL,
        TransformerSpec(),
    ):
        config = sl.LabConfig(mesh=MeshSpec((2, 4)), preset="tp", model=model, optimizer="adamw")
        args = options.config_to_args(config)
        assert options.config_from_args(parser.parse_args(args)) == config
    args = options.config_to_args(
        sl.LabConfig(preset="tp", model=dataclasses.replace(FAMILY.named_spec("gpt2-small"), remat="full"))
    )
    assert args[args.index("--size") + 1] == "gpt2-small" and args[args.index("--remat") + 1] == "full"
    assert "--layers" not in args  # the name says it
    # A size option given with --size changes it.
    parsed = parser.parse_args(["--model", "transformer", "--size", "llama3-8b", "--layers", "2"])
    assert options.config_from_args(parsed).model == dataclasses.replace(FAMILY.named_spec("llama3-8b"), layers=2)


def _abstract_free(spec):
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):
        return Transformer(spec, lambda *a: None, nnx.Rngs(0))


def test_grouped_query_attention_is_attention_with_each_kv_head_repeated():
    """Checked against multi-head attention built by hand: the same model with kv_heads = heads,
    whose K/V kernels are the grouped model's, each K/V head repeated for its group of query heads."""
    gqa = _abstract_free(SMALL)
    mha = _abstract_free(dataclasses.replace(SMALL, kv_heads=0))
    group = SMALL.heads // SMALL.kv_heads
    for g_block, m_block in zip(gqa.blocks, mha.blocks):
        assert g_block.k[...].shape == (32, 2, 8) and m_block.k[...].shape == (32, 4, 8)
        for name in ("attn_norm", "q", "o", "mlp_norm", "mlp_gate", "mlp_in", "mlp_out"):
            getattr(m_block, name)[...] = getattr(g_block, name)[...]
        m_block.k[...] = jnp.repeat(g_block.k[...], group, axis=1)
        m_block.v[...] = jnp.repeat(g_block.v[...], group, axis=1)
    mha.embedding[...], mha.final_norm[...] = gqa.embedding[...], gqa.final_norm[...]
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 16, (3, 16)), jnp.int32)
    np.testing.assert_allclose(gqa(tokens), mha(tokens), rtol=1e-5, atol=1e-5)


def test_swiglu_tied_and_rope_are_what_they_say():
    model = _abstract_free(SMALL)
    params = FAMILY.parameters(SMALL)
    assert "unembed" not in params and "pos" not in params and "blocks/0/mlp_gate" in params
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 16, (2, 16)), jnp.int32)
    # Tied: the logits are the final hidden state against the embedding table itself.
    logits = model(tokens)
    x = jax.nn.one_hot(tokens, 16) @ model.embedding[...]
    for block in model.blocks:
        x = block(x)
    h = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * model.final_norm[...]
    np.testing.assert_allclose(logits, h @ model.embedding[...].T, rtol=1e-5, atol=1e-5)
    # SwiGLU, written out: down(silu(x·gate) * (x·up)).
    block, h = model.blocks[0], jax.random.normal(jax.random.key(2), (2, 16, 32))
    expected = jax.nn.silu(h @ block.mlp_gate[...]) * (h @ block.mlp_in[...]) @ block.mlp_out[...]
    got = jnp.einsum(
        "bsm,me->bse",
        jax.nn.silu(jnp.einsum("bse,em->bsm", h, block.mlp_gate[...]))
        * jnp.einsum("bse,em->bsm", h, block.mlp_in[...]),
        block.mlp_out[...],
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # Rotary positions: q·k after rotation depends only on the distance between the positions.
    from sharding_lab.models.transformer import rope

    q, k = jax.random.normal(jax.random.key(3), (1, 1, 1, 8)), jax.random.normal(jax.random.key(4), (1, 1, 1, 8))
    qs, ks = rope(jnp.tile(q, (1, 12, 1, 1))), rope(jnp.tile(k, (1, 12, 1, 1)))
    dots = jnp.einsum("bshd,bthd->st", qs, ks)
    np.testing.assert_allclose(dots[3, 1], dots[10, 8], rtol=1e-4)
    np.testing.assert_allclose(dots[0, 0], jnp.sum(q * k), rtol=1e-4)


def test_kv_heads_follow_the_query_heads_and_an_indivisible_split_is_explained():
    gqa = dataclasses.replace(SMALL, heads=8, kv_heads=4)
    tp = sl.plan(sl.LabConfig(mesh=MeshSpec((2, 4)), preset="tp", model=gqa, optimizer="adamw"))
    assert tp.arrays["params/blocks/0/k"].spec == jax.sharding.PartitionSpec(None, "model")
    assert tp.layouts()["params/blocks/0/k"].shard_shape == (32, 1, 8)  # one K/V head per device...
    assert tp.layouts()["params/blocks/0/q"].shard_shape == (32, 2, 8)  # ... and the two query heads it serves
    assert not tp.warnings
    # 2 K/V heads cannot be split 4 ways, and the plan says what JAX does with them, which differs by version
    two = sl.LabConfig(mesh=MeshSpec((2, 4)), preset="tp", model=SMALL, optimizer="adamw")
    what = "params/blocks/0/k (32, 2, 8): dimension 1 (size 2) cannot be split 4 ways over 'model'"
    if jax.__version_info__ < (0, 12):  # JAX 0.10.2 replicates them: a warning, and the step compiles
        warnings = sl.plan(two).warnings
        assert any(w.startswith(f"{what}, so JAX silently lays it out as P() (replicated)") for w in warnings)
        assert not any("/q " in w for w in warnings)
        return
    # JAX 0.12.1 splits the 2 heads into 2 blocks and keeps 2 copies of each: no PartitionSpec names that layout,
    # so the plan refuses it in a sentence, with the replicated K/V heads as its one-click fix
    with pytest.raises(sl.ConfigError) as refusal:
        sl.plan(two)
    assert str(refusal.value).startswith(f"{what}. JAX {jax.__version__} splits it into fewer blocks"), refusal.value
    assert refusal.value.fix is not None and refusal.value.fix_label.startswith("Replicate k's dimension 1")
    fixed = sl.plan(refusal.value.fix)
    assert fixed.arrays["params/blocks/0/k"].spec == jax.sharding.PartitionSpec()
    assert fixed.arrays["params/blocks/0/v"].spec == jax.sharding.PartitionSpec()
    assert fixed.arrays["params/blocks/0/q"].spec == jax.sharding.PartitionSpec(None, "model")  # still split


def test_comm_compiles_a_small_gqa_swiglu_remat_step(capsys):
    # a 2-way model axis splits the 2 K/V heads on every JAX (on a 4-way one JAX 0.12.1's layout has no spec: above)
    argv = [
        "comm",
        "--model",
        "transformer",
        "--mesh",
        "4x2",
        "--preset",
        "fsdp_tp",
        "--layers",
        "2",
        "--embed",
        "32",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--head-dim",
        "8",
        "--mlp-dim",
        "64",
        "--vocab",
        "16",
        "--seq",
        "16",
        "--mlp-type",
        "swiglu",
        "--positions",
        "rope",
        "--embeddings",
        "tied",
        "--remat",
        "full",
        "--json",
    ]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["collectives"] and out["memory"]["params"] > 0


REMAT = TransformerSpec(
    layers=4,
    embed_dim=32,
    heads=4,
    kv_heads=2,
    head_dim=8,
    mlp_dim=128,
    vocab=16,
    seq=64,
    mlp_type="swiglu",
    positions="rope",
)


def test_full_remat_shrinks_the_compiled_temporaries_and_keeps_the_loss():
    """XLA's own memory analysis of the trainer's step: with every block rematerialised the
    temporaries shrink (4 blocks, scores 8×4×64×64 each: 12.7 MB → 4.8 MB on one device), and
    training gives the same losses at the same seed."""
    configs = {
        remat: sl.LabConfig(
            mesh=MeshSpec((1, 1)),
            preset="replicated",
            optimizer="adamw",
            lr=0.01,
            model=dataclasses.replace(REMAT, remat=remat),
            batch_size=8,
            steps=5,
            chunk=5,
        )
        for remat in ("none", "full")
    }
    temp = {remat: analyze(sl.plan(config)).memory["temp"] for remat, config in configs.items()}
    assert temp["full"] < 0.5 * temp["none"], temp
    losses = {}
    for remat, config in configs.items():  # trained smaller: two blocks, sequences of 16
        lab, result = sl.train(dataclasses.replace(config, model=dataclasses.replace(config.model, layers=2, seq=16)))
        losses[remat] = np.asarray(result.losses)
    assert lab.verify_layout() == []  # remat's recorded forward pass runs unrematerialised: same layouts
    # The first step's loss is the same forward pass, bit for bit; after that the rematerialised
    # program sums gradients in another order (a scan, recomputation), so they agree to float32's
    # last digits (measured: at most 2.4e-7 apart over 10 steps).
    assert losses["full"][0] == losses["none"][0]
    np.testing.assert_allclose(losses["full"], losses["none"], rtol=1e-6)
    assert losses["full"][-1] < losses["full"][0]


def test_exported_script_of_the_new_options_runs_standalone(tmp_path):
    # a 2-way model axis splits the 2 K/V heads on every JAX (a 4-way one JAX 0.12.1 refuses: above)
    config = sl.LabConfig(
        mesh=MeshSpec((4, 2)),
        preset="fsdp_tp",
        model=dataclasses.replace(SMALL, remat="full"),
        optimizer="adamw",
        lr=0.01,
        batch_size=16,
        steps=30,
    )
    from sharding_lab.export.script import export_script

    script = tmp_path / "exported.py"
    script.write_text(export_script(config))
    assert "sharding_lab" not in script.read_text().split('"""', 2)[2]
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": os.environ["XLA_FLAGS"]},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("final_loss=") and float(last.split("=")[1]) < np.log(16)
