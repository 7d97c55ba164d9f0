"""Data: the seed's toy regression, y = 0.8·x² + 0.1 + N(0, 0.1) on 100 points in [-2, 2].

The seed draws each batch with ``np.random.choice`` and ``device_put``\\ s it split along ``data``.
Here the 100 points live on the devices once, and each step samples its batch *on device* (same
distribution: uniform indices with replacement) and constrains it to the batch sharding, so many
steps can run inside one compiled program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType

NUM_POINTS = 100
DEFAULT_BATCH = 32


def make_dataset(seed: int = 0, din: int = 1, dout: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(X, Y) as numpy arrays of shape (100, din) and (100, dout); extra columns repeat x and y."""
    rng = np.random.default_rng(seed)
    x = np.linspace(-2, 2, NUM_POINTS, dtype=np.float32)[:, None]
    y = (0.8 * x**2 + 0.1 + rng.normal(0, 0.1, size=x.shape)).astype(np.float32)
    return np.repeat(x, din, axis=1), np.repeat(y, dout, axis=1)


def sample_batch(key: jax.Array, x_all: jax.Array, y_all: jax.Array, batch_size: int,
                 sharding) -> tuple[jax.Array, jax.Array]:
    """One batch drawn with replacement, laid out with ``sharding`` (split along the data axis)."""
    idx = jax.random.randint(key, (batch_size,), 0, x_all.shape[0])
    return place(x_all[idx], sharding), place(y_all[idx], sharding)


def place(x: jax.Array, sharding) -> jax.Array:
    """Lay ``x`` out as ``sharding`` inside jit: a constraint for Auto axes (the compiler decides
    how), ``reshard`` for Explicit axes (where a constraint may only assert what already is)."""
    if AxisType.Explicit in sharding.mesh.axis_types:
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)
