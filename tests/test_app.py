"""The real Streamlit script, driven by streamlit.testing.v1.AppTest (no browser)."""

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import ui

TIMEOUT = 120
ROOT = Path(__file__).resolve().parent.parent


def chart_spec(at: AppTest, key: str) -> dict:
    for chart in at.get("plotly_chart"):
        if chart.proto.id.endswith(f"-{key}"):
            return json.loads(chart.proto.spec)
    raise AssertionError(f"no chart with key {key!r}")


def device_blocks(spec: dict) -> dict[int, list]:
    """device → the index ranges its stripe in a shard map says it holds."""
    return {trace["meta"]["device"]: trace["meta"]["ranges"] for trace in spec["data"]}


@pytest.fixture
def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()


@pytest.fixture
def train_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    # AppTest (1.67) ignores defaults that the entry script puts in session_state when it starts
    # on a non-default page; a browser does not. Seed them as a returning session would have them.
    for key, value in ui.DEFAULTS.items():
        at.session_state[key] = value
    at.switch_page("pages/train.py")
    return at.run()


def test_layout_page_renders_the_seed_layout(app):
    assert not app.exception
    assert not app.error
    assert any("params/w2" in w.value for w in app.warning)  # the seed's w2 cannot split 4 ways
    w1 = device_blocks(chart_spec(app, "map_params/w1"))
    assert w1 == {d: [[0, 1], [8 * (d % 4), 8 * (d % 4) + 8]] for d in range(8)}


def test_mesh_1x8_with_fsdp_changes_the_maps(app):
    app.number_input(key="size_0").set_value(1)
    app.number_input(key="size_1").set_value(8)
    app.selectbox(key="preset").select("fsdp").run()
    assert not app.exception and not app.error
    # data has size 1 on 1×8: FSDP splits over `data`, so every device holds the whole w1...
    w1 = device_blocks(chart_spec(app, "map_params/w1"))
    assert all(ranges == [[0, 1], [0, 32]] for ranges in w1.values()) and len(w1) == 8
    assert any("size 1" in i.value for i in app.info)
    # ... while on 8×1 the same preset gives each device its own 4 columns.
    app.number_input(key="size_0").set_value(8)
    app.number_input(key="size_1").set_value(1).run()
    w1 = device_blocks(chart_spec(app, "map_params/w1"))
    assert w1 == {d: [[0, 1], [4 * d, 4 * d + 4]] for d in range(8)}
    mesh = chart_spec(app, "mesh_picture")
    assert sorted(t["meta"]["device"] for t in mesh["data"]) == list(range(8))


def test_bad_mesh_shows_an_error_not_a_traceback(app):
    app.number_input(key="size_0").set_value(3)
    app.number_input(key="size_1").set_value(3).run()
    assert not app.exception
    assert any("needs 9 devices" in e.value and "8 are available" in e.value for e in app.error)


def test_duplicate_axis_name_is_explained(app):
    app.text_input(key="name_1").input("data").run()
    assert not app.exception
    assert any("used twice" in e.value for e in app.error)


def test_editing_a_rule_switches_to_custom(app):
    app.selectbox(key="rule_embed").select("data").run()
    assert not app.exception
    assert app.selectbox(key="preset").value == "custom"
    w1 = device_blocks(chart_spec(app, "map_params/w1"))
    assert w1[0] == [[0, 1], [0, 8]]  # din=1 cannot split 2 ways over data: JAX keeps it whole
    assert any("params/w1" in w.value for w in app.warning)


def test_same_axis_twice_in_one_array(app):
    app.selectbox(key="rule_embed").select("model").run()
    assert any("twice" in e.value for e in app.error)
    assert not app.exception


def test_three_axis_mesh(app):
    app.radio(key="n_axes").set_value(3).run()
    assert not app.exception and not app.error
    assert [n.value for n in app.number_input][:3] == [2, 2, 2]


def test_train_page_trains_the_seed_config(train_page):
    app = train_page
    assert not app.exception
    app.button(key="train").click().run()
    seen = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        app.run()
        loss = chart_spec(app, "loss")
        seen.append(len(loss["data"][0]["x"]["bdata"]) if isinstance(loss["data"][0]["x"], dict)
                    else len(loss["data"][0]["x"]))
        if any("layout verified on 8 devices" in s.value for s in app.success):
            break
        time.sleep(0.3)
    assert not app.exception
    assert any("layout verified on 8 devices" in s.value for s in app.success)
    final = [m for m in app.metric if m.label.startswith("Final loss")][0]
    assert float(final.value) < 0.05
    assert seen[-1] > seen[0]


def test_train_page_reports_divergence(train_page):
    app = train_page
    app.number_input(key="lr").set_value(100.0).run()
    app.button(key="train").click().run()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and not app.error:
        time.sleep(0.3)
        app.run()
    assert not app.exception
    assert any("diverged" in e.value and "learning rate" in e.value for e in app.error)
