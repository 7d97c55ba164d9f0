"""The trainer runs the seed's math: a plain-nnx reference loop (no sharding, no trainer) fed the
same batches from the same initial weights produces the same losses step by step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from sharding_lab import Lab, LabConfig, Trainer

STEPS = 300


class SeedMLP(nnx.Module):
    """The seed's model: relu(x @ w1 + b1) @ w2, lecun-normal weights, zero bias."""

    def __init__(self, rngs):
        init = nnx.initializers.lecun_normal()
        self.w1 = nnx.Param(init(rngs.params(), (1, 32)))
        self.b1 = nnx.Param(jnp.zeros((32,)))
        self.w2 = nnx.Param(init(rngs.params(), (32, 1)))

    def __call__(self, x):
        return nnx.relu(x @ self.w1[...] + self.b1[...]) @ self.w2[...]


def reference_losses(batches, lr=0.01, decay=0.9):
    """The seed's loop: MSE, grads, m = decay·m + (1−decay)·g, p −= lr·m."""
    model = SeedMLP(nnx.Rngs(0))
    momentum = jax.tree.map(jnp.zeros_like, nnx.state(model, nnx.Param))

    @nnx.jit
    def step(model, momentum, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((y - m(x)) ** 2))(model)
        momentum = jax.tree.map(lambda m, g: decay * m + (1 - decay) * g, momentum, grads)
        nnx.update(model, jax.tree.map(lambda p, m: p - lr * m, nnx.state(model, nnx.Param), momentum))
        return loss, momentum

    losses = []
    for x, y in batches:
        loss, momentum = step(model, momentum, x, y)
        losses.append(float(loss))
    return np.array(losses)


@pytest.fixture(scope="module")
def lab():
    return Lab(LabConfig(steps=STEPS))


def test_dataset_is_the_seeds_toy_regression(lab):
    x, y = np.asarray(lab.x_all), np.asarray(lab.y_all)
    noise = np.random.default_rng(0).normal(0, 0.1, size=(100, 1))
    np.testing.assert_allclose(x[:, 0], np.linspace(-2, 2, 100), rtol=1e-6)
    np.testing.assert_allclose(y, 0.8 * x**2 + 0.1 + noise, atol=1e-5)


def test_batches_are_rows_of_the_dataset(lab):
    x_all, y_all = np.asarray(lab.x_all)[:, 0], np.asarray(lab.y_all)[:, 0]
    x, y = (np.asarray(a)[:, 0] for a in lab.sample_batch(5))
    assert x.shape == (32,)
    rows = np.searchsorted(x_all, x)
    np.testing.assert_array_equal(x_all[rows], x)
    np.testing.assert_array_equal(y_all[rows], y)


def test_trainer_losses_equal_the_reference_loop(lab):
    batches = [tuple(jnp.asarray(np.asarray(a)) for a in lab.sample_batch(i)) for i in range(STEPS)]
    expected = reference_losses(batches)
    result = Trainer(lab).run()
    assert len(result.losses) == STEPS
    np.testing.assert_allclose(result.losses, expected, rtol=1e-4)
    assert expected[-100:].mean() < 0.2 * expected[:10].mean()  # it did learn something
