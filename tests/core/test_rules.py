"""Rules: presets bound to a mesh's own axis names, and how Rules.spec resolves a PartitionSpec."""

import pytest
from jax.sharding import PartitionSpec as P

from sharding_lab import MeshSpec, Rules, bind_preset

W = ("embed", "mlp")  # logical axes of w1 and w2


def test_bind_by_role_on_unnamed_axes():
    rules = bind_preset("seed", MeshSpec((2, 4), ("x", "y")))
    assert (rules.data, rules.mlp, rules.embed) == ("x", "y", None)


def test_bind_by_name_on_data_model():
    rules = bind_preset("seed", MeshSpec((2, 4), ("data", "model")))
    assert (rules.data, rules.mlp) == ("data", "model")


def test_bind_by_name_not_position_on_model_data():
    mesh = MeshSpec((4, 2), ("model", "data"))
    seed = bind_preset("seed", mesh)
    assert (seed.data, seed.mlp) == ("data", "model")
    both = bind_preset("fsdp_tp", mesh)
    assert both.mlp == ("model", "data")
    assert both.overrides == (("w2", (("model", "data"), None)),)


def test_tp_and_fsdp_override_w2_rows():
    mesh = MeshSpec((2, 4), ("x", "y"))
    assert bind_preset("tp", mesh).spec("w2", W) == P("y")
    assert bind_preset("fsdp", mesh).spec("w2", W) == P("x")


@pytest.mark.parametrize(
    "axes,data,model",
    [
        pytest.param(("x", "y"), "x", "y", id="x,y"),
        pytest.param(("x", "data"), "data", "x", id="x,data"),
        pytest.param(("model", "x"), "x", "model", id="model,x"),
    ],
)
def test_two_distinct_axes_get_two_distinct_roles(axes, data, model):
    mesh = MeshSpec((2, 4), axes)
    assert bind_preset("seed", mesh).data == data
    assert bind_preset("fsdp_tp", mesh).mlp == (model, data)


def test_override_wins_over_logical_rules():
    rules = Rules(mlp="model", overrides=(("w2", ("model", None)),))
    assert rules.spec("w2", W) == P("model")
    assert rules.spec("w1", W) == P(None, "model")
    assert rules.spec("b1", ("mlp",)) == P("model")


def test_tuple_targets_split_one_dimension_over_two_axes():
    rules = Rules(mlp=("model", "data"), data="data")
    assert rules.spec("w1", W) == P(None, ("model", "data"))
    assert rules.spec("x", ("data", None)) == P("data")


@pytest.mark.parametrize(
    "target,normalised",
    [
        (["model", "data"], ("model", "data")),
        (("model",), "model"),
        ((), None),
        ("none", None),
        (("model", None), "model"),
    ],
)
def test_targets_are_normalised(target, normalised):
    assert Rules(mlp=target).mlp == normalised


def test_trailing_replicated_dimensions_are_dropped():
    assert Rules(embed="data").spec("w1", W) == P("data")
    assert Rules().spec("w1", W) == P()


def test_with_override_replaces_and_removes():
    rules = Rules(mlp="model").with_override("w2", ("model", None))
    rules = rules.with_override("w2", (None, "data"))
    assert rules.overrides == (("w2", (None, "data")),)
    assert rules.with_override("w2", None).overrides == ()
    assert hash(rules) == hash(Rules(mlp="model", overrides=(("w2", (None, "data")),)))
