"""Data: batches drawn on device from a model family's dataset (the MLP's: the seed's toy regression).

The seed draws each batch with ``np.random.choice`` and ``device_put``\\ s it split along ``data``.
Here the 100 points live on the devices once, and each step samples its batch *on device* (same
distribution: uniform indices with replacement) and constrains it to the batch sharding, so many
steps can run inside one compiled program.
"""

from __future__ import annotations

import jax
from jax.sharding import AxisType


def sample_batch(
    key: jax.Array, x_all: jax.Array, y_all: jax.Array, batch_size: int, shardings
) -> tuple[jax.Array, jax.Array]:
    """One batch of rows drawn with replacement, x and y laid out with ``shardings`` (split along
    the batch's axis)."""
    idx = jax.random.randint(key, (batch_size,), 0, x_all.shape[0])
    return place(x_all[idx], shardings[0]), place(y_all[idx], shardings[1])


def place(x: jax.Array, sharding) -> jax.Array:
    """Lay ``x`` out as ``sharding`` inside jit: a constraint for Auto axes (the compiler decides
    how), ``reshard`` for Explicit axes (where a constraint may only assert what already is)."""
    if AxisType.Explicit in sharding.mesh.axis_types:
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)
