"""Mixture of experts through the real Streamlit script (AppTest): the ep preset's clear error for a dense
model, then the Train page's routing picture and the compiled step's all-to-alls."""

import json
import re

import numpy as np

from tests.support import app_test


def test_train_page_shows_where_the_tokens_went():
    at = app_test(180)
    at.switch_page("app_pages/train.py").run()
    at.selectbox(key="model").select("transformer").run()
    at.selectbox(key="preset").select("ep").run()  # 2×4 (data, model): the experts on `model`
    assert not at.exception
    assert any("dense (experts 0): set Experts" in e.value.replace("\\", "") for e in at.error), [
        e.value for e in at.error
    ]
    at.button(key="apply_fix").click().run()  # issue 36: the pipeline's error had a fix button, this one none
    assert at.session_state["experts"] == 8 and at.session_state["preset"] == "ep" and not at.error
    for key, value in (("layers", 1), ("seq", 16), ("experts", 4)):
        at.number_input(key=key).set_value(value)
    at.run()  # one rerun with the three sizes (one each compiled the routing of two models on the way)
    assert not at.exception and not at.error
    chart = next(c for c in at.get("plotly_chart") if c.proto.id.endswith("-experts_routing"))
    counts = np.array(json.loads(chart.proto.spec)["data"][0]["z"])
    assert counts.shape == (8, 4) and counts.sum() == 32 * 16 * 2  # every device's 4 rows × 16 tokens × top-2
    assert at.metric[0].label == "Token choices dropped" and at.metric[1].label == "Load-balancing loss"
    # a level, not a change: no delta badge (its "↑ 9.4%" read as a rise), the share said in the figure
    assert not at.metric[0].delta and re.fullmatch(r"[\d,]+ of [\d,]+ \(\d+\.\d%\)", at.metric[0].value)
    moved = at.dataframe[-1].value
    assert set(moved["pass"]) == {"forward", "backward"} and set(moved["over"]) == {"over model"}
    assert any("(dispatch)" in c for c in moved["carries"]) and any("(combine)" in c for c in moved["carries"])
