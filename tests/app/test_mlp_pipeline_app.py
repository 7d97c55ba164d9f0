"""The MLP's pipeline in the app, as the transformer's: the pp preset on a stage axis, the schedule's bubble and
timeline on the Train page."""

from __future__ import annotations

from sharding_lab.app.state import config_state
from tests.support import app_test


def test_the_mlp_s_pp_preset_shows_the_schedule_and_its_bubble():
    at = app_test(300)
    at.run()
    at.switch_page("app_pages/train.py").run()
    at.text_input(key="name_0").input("stage").run()
    at.text_input(key="name_1").input("data").run()
    at.number_input(key=config_state.size_key("hidden_layers")).set_value(4).run()
    at.selectbox(key="preset").select("pp").run()
    assert not at.exception and not at.error
    assert "preset pp" in at.caption[0].value and "2×4 (stage, data)" in at.caption[0].value
    # 2 stages, 4 microbatches by default here: 1/5 idle, counted from the table and by the textbook's formula
    assert [m.value for m in at.metric][0] == "20.0%"
    assert any("(p−1)/(m+p−1) = 1/5 = 20.0%" in c.value for c in at.caption)
    assert at.selectbox(key="schedule").value == "gpipe"
