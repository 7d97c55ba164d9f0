"""Operations that work under both axis types.

With Auto axes (the seed's way) the compiler picks every intermediate sharding, and these are plain
``h @ w`` and ``b``. With Explicit axes shardings are part of the types and JAX refuses to guess, so
we say what the compiler would otherwise infer: a weight split over an axis the batch also uses is
gathered first (that *is* FSDP), and the output keeps the batch's rows and the weight's columns.
"""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P


def explicit_axes() -> bool:
    """True inside ``jax.set_mesh`` of a mesh with Explicit axes."""
    return AxisType.Explicit in jax.sharding.get_abstract_mesh().axis_types


def spec_of(x: jax.Array) -> tuple:
    """``x``'s PartitionSpec as a tuple with one entry per dimension."""
    spec = tuple(jax.typeof(x).sharding.spec)
    return spec + (None,) * (x.ndim - len(spec))


def mesh_axes_of(target) -> tuple[str, ...]:
    """None → (), 'model' → ('model',), ('data', 'model') as is."""
    return () if target is None else (target,) if isinstance(target, str) else tuple(target)


def matmul(h: jax.Array, w: jax.Array) -> jax.Array:
    """``h @ w`` for a 2-D weight; under Explicit axes, with the gather and ``out_sharding`` said."""
    if not explicit_axes():
        return h @ w
    rows = spec_of(h)[0]
    w_spec = tuple(None if set(mesh_axes_of(t)) & set(mesh_axes_of(rows)) else t for t in spec_of(w))
    if w_spec != spec_of(w):
        w = jax.sharding.reshard(w, P(*w_spec))
    cols = None if set(mesh_axes_of(w_spec[1])) & set(mesh_axes_of(rows)) else w_spec[1]
    return jnp.matmul(h, w, out_sharding=P(rows, cols))


def like_columns(b: jax.Array, h: jax.Array) -> jax.Array:
    """The bias laid out like ``h``'s columns, so ``h + b`` is well typed under Explicit axes."""
    if not explicit_axes() or spec_of(b)[0] == spec_of(h)[1]:
        return b
    return jax.sharding.reshard(b, P(spec_of(h)[1]))
