"""Every claim of the Lesson's table of today's API (sharding_lab/lessons/today.py), checked on the stack this runs
on — CI runs the core suite on both, so each column is checked where it is true — and the docs carry the table."""

import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from sharding_lab.lessons import today
from sharding_lab.stacks import NEWEST, OLDEST, STACKS
from tests.support import ROOT

STACK = next((s for s in STACKS if s.jax == jax.__version__), None)
NEW = STACK is NEWEST


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:8])


def test_this_is_one_of_the_two_stacks():
    assert STACK is not None, f"jax {jax.__version__} is neither stack of sharding_lab.stacks"
    assert optax.__version__ == STACK.optax


def test_make_mesh_defaults_to_explicit_and_names_its_sizes_by_stack():
    assert jax.make_mesh((2, 4), ("a", "b"), devices=jax.devices()[:8]).axis_types == (AxisType.Explicit,) * 2
    names = list(inspect.signature(jax.make_mesh).parameters)
    assert names[0] == ("axis_sizes" if NEW else "axis_shapes")


def test_top_level_mesh_getters_only_on_the_newest_stack():
    assert all(hasattr(jax, name) == NEW for name in ("get_abstract_mesh", "get_mesh", "use_abstract_mesh"))
    assert callable(jax.sharding.get_abstract_mesh)  # what the lab calls, on both


def test_reduction_order_only_on_the_newest_stack():
    for fn in (jax.sharding.reshard, jnp.matmul, jnp.einsum, jnp.dot):
        assert ("reduction_order" in inspect.signature(fn).parameters) == NEW, fn.__name__
    assert "out_sharding" in inspect.signature(jnp.matmul).parameters


def test_with_sharding_constraint_asserts_under_explicit_axes(mesh):
    with jax.set_mesh(mesh):
        x = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P()))
        with pytest.raises(AssertionError, match="acts as an assert"):
            jax.jit(lambda v: jax.lax.with_sharding_constraint(v, P("data")))(x)


def test_shard_map_checks_a_replicated_output_by_default():
    assert inspect.signature(jax.shard_map).parameters["check_vma"].default is True
    flat = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:8])
    per_device = jax.shard_map(jnp.sum, mesh=flat, in_specs=P("data"), out_specs=P())
    with pytest.raises(ValueError, match="out_specs"):
        jax.jit(per_device)(jnp.ones(16))
    summed = jax.shard_map(lambda x: jax.lax.psum(jnp.sum(x), "data"), mesh=flat, in_specs=P("data"), out_specs=P())
    assert float(jax.jit(summed)(jnp.ones(16))) == 16


def test_single_device_sharding_is_deprecated_only_on_the_newest_stack():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.sharding.SingleDeviceSharding  # noqa: B018 (the access is what warns)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught) == NEW
    assert hasattr(jax.sharding, "is_single_device_sharding") == NEW


def test_the_blogs_names_warn_on_both(mesh):
    with jax.set_mesh(mesh), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        param = nnx.Param(jnp.ones((4, 8)), sharding=("data", "model"))
        _ = param.value
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any("'sharding' is deprecated, use 'out_sharding'" in m for m in messages)
    assert any("'.value' access is now deprecated" in m for m in messages)
    assert param[...].sharding.spec == P("data", "model")
    assert issubclass(nnx.Object, nnx.Pytree) and nnx.Object is not nnx.Pytree


def test_optimizer_needs_wrt_and_updates_with_the_model():
    class Model(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones((2,)))

    model = Model()
    with pytest.raises(TypeError, match="ModelAndOptimizer"):
        nnx.Optimizer(model, optax.sgd(0.1))
    optimizer = nnx.Optimizer(model, optax.sgd(0.5), wrt=nnx.Param)
    optimizer.update(model, nnx.grad(lambda m: (m.w[...] ** 2).sum())(model))
    assert np.allclose(model.w[...], 0.0)  # 1 - 0.5 · 2


def test_logical_axis_rules_name_mesh_axes():
    auto = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:8])

    @nnx.jit
    def create():
        return nnx.Param(jnp.ones((4, 8)), out_sharding=("embed", "mlp"))

    with jax.set_mesh(auto), nnx.logical_axis_rules((("embed", None), ("mlp", "model"))):
        assert create()[...].sharding.spec == P(None, "model")


def test_the_docs_carry_the_lessons_table():
    assert today.markdown() in (ROOT / "docs" / "blog.md").read_text()
    assert today.COLUMNS[1].endswith(NEWEST.label()) and today.COLUMNS[2].endswith(OLDEST.label())


def test_each_stack_is_what_its_constraints_file_pins():
    """The versions the Lesson and the exported script name are those the suite installs (and passed with)."""
    for stack in STACKS:
        pins = dict(line.split("==", 1) for line in (ROOT / stack.constraints).read_text().splitlines() if "==" in line)
        pins = {name.lower(): version.strip() for name, version in pins.items()}
        assert (pins["jax"], pins["jaxlib"], pins["flax"], pins["optax"]) == (
            stack.jax,
            stack.jax,
            stack.flax,
            stack.optax,
        ), stack.constraints
