"""The sidebar's Size select (public models' shapes, their parameter count beside the card's), the
transformer's word options in a share link, and a model family the server's owner added with
SHARDING_LAB_FAMILIES appearing in the model picker — through the real Streamlit script (AppTest)."""

import sys

import pytest

import sharding_lab as sl
from sharding_lab.app.state import config_state, links
from sharding_lab.models import plugins
from sharding_lab.training.setting_groups import named_size_values
from tests.support import ROOT, app_test


def test_size_select_sets_the_sizes_and_shows_the_count_beside_the_card():
    at = app_test(300)
    at.run()
    at.selectbox(key="model").select("transformer").run()
    assert at.session_state["named_size"] == "default"  # today's transformer is the default size
    at.selectbox(key="named_size").select("llama3-8b").run()
    assert not at.exception and not at.error
    assert (
        at.session_state["layers"],
        at.session_state["kv_heads"],
        at.session_state["mlp_type"],
        at.session_state["positions"],
    ) == (32, 8, "swiglu", "rope")
    captions = [c.value for c in at.sidebar.caption]
    assert "8,030,261,248 parameters (the model card: 8.03 billion, +0.0%)" in captions
    assert at.query_params["size"] == "llama3-8b"
    # Editing a size makes it custom; the count follows the shapes.
    at.number_input(key="layers").set_value(2).run()
    assert at.session_state["named_size"] == "custom"
    assert any(
        c.startswith(
            f"{sl.family('transformer').parameter_count(config_state.model_spec(at.session_state)):,} parameters"
        )
        for c in (c.value for c in at.sidebar.caption)
    )
    assert "size" not in at.query_params


def test_links_carry_the_size_and_the_word_options_and_report_bad_ones():
    state = {
        **config_state.defaults(),
        "model": "transformer",
        "preset": "tp",
        **named_size_values(sl.family("transformer"), "gpt2-small"),
        "remat": "full",
    }
    query = links.to_query(state)
    assert query["size"] == "gpt2-small" and query["embeddings"] == "tied" and query["remat"] == "full"
    updates, problems = links.from_query(query)
    assert problems == [] and updates["vocab"] == 50257 and updates["remat"] == "full"
    updates, problems = links.from_query({"model": "transformer", "size": "llama9", "mlp_type": "relu"})
    assert "size" not in updates and "mlp_type" not in updates
    assert problems == [
        f"size='llama9' ignored: one of {', '.join(sl.family('transformer').named_sizes)}",
        "mlp_type='relu' ignored: one of gelu, swiglu, geglu",
    ]
    updates, problems = links.from_query({"model": "transformer", "size": "llama3-70b"})
    assert problems == [] and updates["layers"] == 80 and updates["embed_dim"] == 8192


@pytest.fixture
def sine_from_the_environment(monkeypatch):
    """SHARDING_LAB_FAMILIES=sine_family, as a server's owner would set it; the registry restored after."""
    before = dict(sl.FAMILIES)
    monkeypatch.setenv("SHARDING_LAB_FAMILIES", "sine_family")
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "families"))
    yield
    sl.FAMILIES.clear()
    sl.FAMILIES.update(before)
    plugins._loaded_modules.discard("sine_family")
    sys.modules.pop("sine_family", None)


def test_a_family_from_the_environment_is_in_the_model_picker(sine_from_the_environment):
    at = app_test(300)
    at.run()
    assert "Residual MLP on a sine (example plug-in)" in at.selectbox(key="model").options
    at.selectbox(key="model").select("sine").run()
    assert not at.exception and not at.error
    assert at.session_state["preset"] == "dp" and at.session_state["features"] == 32
    assert at.query_params["model"] == "sine"
