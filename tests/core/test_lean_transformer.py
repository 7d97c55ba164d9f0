"""The transformer as lean as the reference implementation: the loss and the embedding compute what they
did (a one-hot product and a log-softmax, written out here), and under mixed precision every matrix product
of the step runs in bf16 (the one-hot lookup once made the whole residual stream float32)."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import sharding_lab as sl
from sharding_lab.hardware import targets
from sharding_lab.models.transformer import Transformer, TransformerSpec, cross_entropy_loss, make_dataset
from sharding_lab.sharding.mesh import MeshSpec
from sharding_lab.training.step import compile_lowered, lower_train_step

TPU = targets.availability(targets.parse("v5e-8"))

SPEC = TransformerSpec(layers=2, embed_dim=32, heads=4, kv_heads=2, head_dim=8, mlp_dim=64, vocab=16, seq=16)


def _model(spec):
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):
        return Transformer(spec, lambda *a: None, nnx.Rngs(0))


def _written_out(model, x, y):
    """The loss as the model computed it before: a one-hot product for the lookup, the log-softmax of the
    whole logits times a one-hot of the targets."""
    h = jax.nn.one_hot(x, model.embedding[...].shape[0]) @ model.embedding[...]
    h = h + model.pos[...] if model.learned_positions else h
    for block in model.blocks:
        h = block(h)
    logits = model.head(h)
    picked = jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), axis=-1)
    return -jnp.sum(picked) / jnp.maximum(jnp.sum(y >= 0), 1)


def test_the_loss_and_its_gradients_are_the_written_out_cross_entropy():
    tied = TransformerSpec(layers=1, embed_dim=16, heads=2, head_dim=8, mlp_dim=32, vocab=16, seq=16)
    tied = dataclasses.replace(tied, mlp_type="swiglu", embeddings="tied", positions="rope")
    for spec in (SPEC, tied):
        model = _model(spec)
        x, y = (jnp.asarray(a[:8]) for a in make_dataset(spec, 0))
        loss, grads = nnx.jit(nnx.value_and_grad(cross_entropy_loss))(model, x, y)
        expected, expected_grads = nnx.jit(nnx.value_and_grad(_written_out))(model, x, y)
        assert float(loss) > 1.0  # a loss at step 0, not a degenerate zero
        np.testing.assert_allclose(loss, expected, rtol=1e-6)
        for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(expected_grads)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


_DOT = re.compile(r"stablehlo\.dot_general.*?:\s*\(tensor<[^>]*x(\w+)>,\s*tensor<[^>]*x(\w+)>\)")


def test_mixed_precision_multiplies_in_bf16_everywhere():
    """Every dot of the mixed step (forward, recomputed, backward) takes bf16 operands: the lookup is a
    gather of bf16 rows and the rotary angles and norms hand back their input's dtype."""
    for remat in ("none", "full"):
        spec = TransformerSpec(layers=2, mlp_type="swiglu", positions="rope", remat=remat)
        plan = sl.plan(sl.LabConfig(mesh=MeshSpec((2, 4)), preset="fsdp_tp", model=spec, optimizer="adamw"))
        text = lower_train_step(plan, "mixed").as_text()
        operands = _DOT.findall(text)
        assert len(operands) >= 10 * spec.layers
        assert {dtype for pair in operands for dtype in pair} == {"bf16"}, remat


@pytest.mark.skipif(not TPU[0], reason=TPU[1])
def test_the_loop_over_layers_gathers_each_layer_s_weights_not_every_layer_s_before_it():
    """Under fsdp_tp (2×4: data 2, model 4) q, k and v are stored (embed/2 on data, heads/4 on model, head_dim);
    stacked for the loop without a layout, the TPU compiler's partitioner laid the stacks out as the body's
    products liked them — every layer's weights gathered over data with embed on model and all heads,
    bf16[4,16,4,16] here, 3 × 1 GiB a chip on MaxText's v5p-128 32B recipe — before the loop. Laid out as stored,
    the program holds the stacks as stored and gathers one layer's weights at a time inside the loop."""
    spec = TransformerSpec(
        layers=4, embed_dim=64, heads=4, head_dim=16, mlp_dim=256, mlp_type="swiglu", remat="minimal"
    )
    config = sl.LabConfig(mesh=MeshSpec((2, 4)), preset="fsdp_tp", model=spec, optimizer="adamw", target="v5e-8")
    text = compile_lowered(lower_train_step(sl.plan(config), "mixed"), "v5e-8").as_text()
    assert "bf16[4,32,1,16]" in text  # the stacks of q, k and v as stored
    assert "bf16[4,16,4,16]" not in text  # … and no copy of every layer's gathered over data
