"""Shareable links: the configuration round-trips through the query string; garbage falls back."""

import pytest
from streamlit.testing.v1 import AppTest
from test_app import TIMEOUT, chart_spec, device_blocks

from sharding_lab.app.state import config_state
from sharding_lab.app.state import links as share
from tests.support import app_test


def test_round_trip_of_a_custom_configuration():
    state = dict(
        config_state.defaults(),
        preset="custom",
        n_axes=3,
        size_0=2,
        size_1=2,
        size_2=2,
        name_0="x",
        name_1="y",
        name_2="z",
        rule_embed="replicated",
        rule_mlp="z+x",
        rule_data="x",
        ovr_w2_0="z",
        ovr_w2_1="(rule)",
        axis_type="Explicit",
        lr=0.05,
        steps=1500,
    )
    updates, problems = share.from_query(share.to_query(state))
    assert problems == []
    for key in (
        "n_axes",
        "size_2",
        "name_2",
        "preset",
        "rule_mlp",
        "rule_data",
        "ovr_w2_0",
        "axis_type",
        "lr",
        "steps",
    ):
        assert updates[key] == state[key], key
    assert "ovr_w2_1" not in updates


@pytest.mark.parametrize(
    "query,ignored",
    [
        ({"mesh": "9x9x9x9"}, "mesh"),
        ({"mesh": "2x0"}, "mesh"),
        ({"mesh": "2x4", "axes": "a b,c"}, "axes"),
        ({"preset": "__import__('os').system('x')"}, "preset"),
        ({"lr": "nan"}, "lr"),
        ({"lr": "1e9"}, "lr"),
        ({"steps": "12.5"}, "steps"),
        ({"opt": "lion"}, "opt"),
        ({"type": "magic"}, "type"),
        ({"preset": "custom", "rules": "mlp:<b>"}, "rules"),
        ({"zzz": "1"}, "zzz"),
    ],
)
def test_bad_values_are_reported_and_skipped(query, ignored):
    updates, problems = share.from_query(query)
    assert any(ignored in p for p in problems)
    assert ignored not in updates


def run_with(query: dict) -> AppTest:
    at = app_test(TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def test_link_restores_mesh_preset_and_numbers():
    at = run_with({"mesh": "1x8", "preset": "fsdp", "batch": "64", "opt": "adamw"})
    assert not at.exception and not [w for w in at.warning if "link" in w.value]
    assert [at.number_input(key=k).value for k in ("size_0", "size_1", "batch")] == [1, 8, 64]
    assert at.selectbox(key="preset").value == "fsdp" and at.selectbox(key="optimizer").value == "adamw"
    at.radio(key="map_group").set_value("Optimizer state").run()  # adamw's buffers are drawn
    assert "opt/mu/w1" in {c.proto.id.split("-map_")[-1] for c in at.get("plotly_chart") if "-map_" in c.proto.id}
    assert at.query_params["mesh"] == ["1x8"] or at.query_params["mesh"] == "1x8"


def test_link_restores_custom_rules():
    at = run_with(
        {
            "mesh": "8x1",
            "preset": "custom",
            "rules": "embed:replicated,mlp:data,data:data",
            "ovr": "w2.0:data,w2.1:replicated",
        }
    )
    assert at.selectbox(key="preset").value == "custom"
    w2 = device_blocks(chart_spec(at, "map_params/w2"))
    assert w2 == {d: [[4 * d, 4 * d + 4], [0, 1]] for d in range(8)}


def test_garbage_link_shows_a_notice_and_the_defaults():
    at = run_with({"mesh": "banana", "preset": "<script>alert(1)</script>", "lr": "-1", "evil": "1"})
    assert not at.exception
    notice = [w.value for w in at.warning if "link" in w.value]
    assert notice and "mesh" in notice[0] and "preset" in notice[0] and "evil" in notice[0]
    assert "<script>" not in notice[0]  # shown literally (escaped), never as markup
    assert at.selectbox(key="preset").value == "seed"
    assert [at.number_input(key=k).value for k in ("size_0", "size_1")] == [2, 4]
    assert not at.error
