"""Explore by clicking (AppTest half; the clicks themselves are in tests/e2e/test_explore_browser.py):
focus a device from a link or the control, what it holds, what a change moved, going back."""

from streamlit.testing.v1 import AppTest
from test_app import TIMEOUT, chart_spec

import sharding_lab as sl
from sharding_lab.sharding.layout import describe_change, holdings
from tests.support import app_test


def open_with(**query) -> AppTest:
    at = app_test(TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def holdings_table(at):
    return next(df.value for df in at.dataframe if "same block on" in df.value.columns)


def test_a_link_with_focus_opens_that_device_and_what_it_holds():
    at = open_with(focus="5")
    assert not at.exception
    assert "What device 5 holds" in [s.value for s in at.subheader]
    table = holdings_table(at)
    assert len(table) >= 8  # 3 params + 3 momentum buffers + 2 batch arrays
    row = table.set_index("array").loc["params/w1"]
    assert row["slice"] == "[0:1, 8:16]"  # device 5 = mesh (1, 1): columns 8:16 of w1, split 4 ways over model
    assert row["same block on"] == "1"  # device 1 = (0, 1) holds the same columns
    mesh = chart_spec(at, "mesh_picture")
    bright = {
        t["meta"]["device"]
        for t in mesh["data"]
        if t.get("meta", {}).get("device") is not None and t.get("opacity", 1) > 0.5
    }
    assert bright == {5}
    assert "focus=5" in "&".join(f"{k}={v}" for k, v in at.query_params.items())  # the link keeps it


def test_the_focus_control_does_the_same():
    at = open_with()
    at.selectbox(key="focus").select(2).run()
    assert "What device 2 holds" in [s.value for s in at.subheader]
    w1 = chart_spec(at, "map_params/w1")
    dimmed = {t["meta"]["device"] for t in w1["data"] if "device" in (t.get("meta") or {}) and t["opacity"] < 0.5}
    assert dimmed == set(range(8)) - {2}


def test_an_invalid_focus_is_reported_not_crashed_on():
    at = open_with(focus="12", mesh="2x2")
    assert not at.exception
    assert any("focus=12 ignored" in w.value for w in at.warning)
    at = open_with(focus="five")
    assert not at.exception
    assert any("focus='five' ignored" in w.value for w in at.sidebar.warning)
    at = open_with(focus="99")  # a number, but not a device of this 2×4 mesh: say which ones are
    assert not at.exception
    assert any("focus=99 ignored" in w.value and "0–7" in w.value for w in at.warning)


def test_a_preset_change_says_what_moved_and_can_go_back():
    at = open_with()
    at.selectbox(key="preset").select("fsdp").run()
    moved = next(m.value for m in at.markdown if "What the last change moved" in m.value)
    assert "w2: rows now split 2 ways over `data`, was whole" in moved
    assert "changed" in chart_spec(at, "map_params/w2")["layout"]["title"]["text"]
    at.button(key="go_back").click().run()
    assert at.selectbox(key="preset").value == "seed"
    assert not at.exception


def test_holdings_and_changes_from_the_backend():
    plan = sl.plan(sl.LabConfig())
    rows = {r["array"]: r for r in holdings(plan.layouts(), 0)}
    assert rows["batch/x"]["same block on"] == "1, 2, 3"  # rows 0:16 live on data=0: devices 0–3
    assert rows["params/w2"]["bytes"] == 32 * 4
    other = sl.plan(sl.LabConfig(preset="tp")).layouts()
    assert (
        describe_change(plan.layouts()["batch/x"], other["batch/x"], {"data": 2, "model": 4}, {"data": 2, "model": 4})
        == "batch/x: rows now whole, was split 2 ways over `data`"
    )
    assert describe_change(plan.layouts()["params/w1"], other["params/w1"], {}, {}) is None
