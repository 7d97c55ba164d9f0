"""Today's API: each call the Lesson, the exported script and the chapters show, as of the newest stack, and what
differs on the stack the TPU machine runs (:mod:`sharding_lab.stacks`).

Read from JAX's and Flax's changelogs (JAX 0.10.2 → 0.12.1, Flax 0.12.8 → 0.12.12) and from the two installed stacks
themselves; ``tests/core/test_today.py`` checks every "differs" claim on whichever stack it runs on (CI runs it on
both), and ``docs/blog.md`` carries the same table (:func:`markdown`).
"""

from __future__ import annotations

from ..stacks import NEWEST, OLDEST

SAME = "the same"
UNCHANGED = "runs as written"

# (the call, as of the newest stack, on the oldest stack)
ROWS: tuple[tuple[str, str, str], ...] = (
    (
        "jax.make_mesh(sizes, names, axis_types=…, devices=…)",
        "Explicit axes by default; the sizes' parameter is named axis_sizes",
        "Explicit by default too; the parameter is named axis_shapes: pass the sizes by position (the lab does) and "
        "the line runs on both",
    ),
    ("jax.sharding.AxisType.Auto / Explicit / Manual", UNCHANGED, SAME),
    ("with jax.set_mesh(mesh):", "runs as written (also a global setter: jax.set_mesh(mesh))", SAME),
    (
        "jax.sharding.get_abstract_mesh()",
        "also at the top level: jax.get_abstract_mesh(), jax.get_mesh(), jax.use_abstract_mesh()",
        "only under jax.sharding (the lab's code uses jax.sharding.get_abstract_mesh, on both)",
    ),
    ("jax.P, NamedSharding(mesh, P(...)), jax.typeof(x).sharding", UNCHANGED, SAME),
    ("jax.sharding.reshard(x, spec)", "new keyword reduction_order= (the lab does not pass it)", "no reduction_order"),
    (
        "jnp.matmul / jnp.einsum / jnp.dot(..., out_sharding=spec)",
        "new keyword reduction_order= (the lab does not pass it)",
        "no reduction_order",
    ),
    (
        "jax.lax.with_sharding_constraint(x, sharding)",
        "under Explicit axes an assert: 'acts as an assert … use jax.sharding.reshard'",
        SAME,
    ),
    (
        "jax.shard_map(f, mesh=, in_specs=, out_specs=, axis_names=, check_vma=True)",
        "check_vma on by default: a per-device value under out_specs P() is refused",
        SAME,
    ),
    ("jax.lax.all_gather / psum_scatter / psum (…, tiled=True)", UNCHANGED, SAME),
    ("jax.jit(f, out_shardings=..., donate_argnums=...)", UNCHANGED, SAME),
    (
        "jax.sharding.SingleDeviceSharding",
        "not in the lab; deprecated (DeprecationWarning): make_single_device_sharding / is_single_device_sharding",
        "no warning; is_single_device_sharding does not exist",
    ),
    (
        "nnx.Param(value, out_sharding=spec)",
        "created under jax.set_mesh; the blog's sharding= still accepted, with a DeprecationWarning",
        SAME,
    ),
    ("variable[...]", "variable.value still works, with a DeprecationWarning", SAME),
    (
        "nnx.Pytree, nnx.data(...)",
        "runs as written (the blog's nnx.Object remains: a Pytree subclass that is not a JAX pytree)",
        SAME,
    ),
    (
        "nnx.Optimizer(model, tx, wrt=nnx.Param); optimizer.update(model, grads)",
        "wrt is required (TypeError naming nnx.ModelAndOptimizer otherwise)",
        SAME,
    ),
    ("nnx.jit, nnx.split / nnx.merge / nnx.state, nnx.to_flat_state", UNCHANGED, SAME),
    (
        "with nnx.logical_axis_rules(rules): nnx.Param(..., out_sharding=('embed', 'mlp'))",
        "logical names through the rules",
        SAME,
    ),
    ("optax.sgd(lr, momentum=…), optax.adamw(lr)", f"optax {NEWEST.optax}", f"optax {OLDEST.optax}"),
)

COLUMNS = ("the call, as the lab writes it", f"on {NEWEST.label()}", f"on {OLDEST.label()}")


def markdown() -> str:
    """The table as docs/blog.md carries it."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "| --- | --- | --- |"]
    lines += [f"| `{call}` | {newest} | {oldest} |" for call, newest, oldest in ROWS]
    return "\n".join(lines) + "\n"
