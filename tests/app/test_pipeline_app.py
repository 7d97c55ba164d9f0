"""Pipeline parallelism through the real Streamlit script (AppTest): the pp preset in the sidebar, its
clear error, the Train page's timeline drawn from the schedule the step runs, and the share link."""

import json

from streamlit.testing.v1 import AppTest

from sharding_lab.app.state import config_state, links
from sharding_lab.pipeline.schedule import build
from tests.support import app_test


def timeline(at: AppTest) -> dict:
    chart = next(c for c in at.get("plotly_chart") if c.proto.id.endswith("-pipeline_timeline"))
    return json.loads(chart.proto.spec)["data"][0]


def test_train_page_draws_the_schedule_the_step_runs():
    at = app_test(180)
    at.switch_page("app_pages/train.py").run()
    at.selectbox(key="model").select("transformer").run()
    at.selectbox(key="preset").select("pp").run()  # 2×4 (data, model): the stages on `model`, 4 of them
    assert not at.exception
    assert any(
        "4 pipeline stages (mesh axis 'model') cannot share 2 layers" in e.value.replace("\\", "") for e in at.error
    )  # shown escaped: the message is plain text
    at.button(key="apply_fix").click().run()  # the fix offered: 4 layers, one per stage
    assert at.session_state["layers"] == 4 and at.session_state["preset"] == "pp"
    at.number_input(key="microbatches").set_value(8).run()
    assert not at.exception and not at.error
    for schedule in ("gpipe", "1f1b"):
        at.selectbox(key="schedule").select(schedule).run()
        table = build(schedule, 4, 8)
        drawn = timeline(at)
        assert drawn["text"] == [
            ["" if row[s] is None else f"{row[s].kind}{row[s].microbatch}" for row in table.grid] for s in range(4)
        ]
        assert at.metric[0].value == "27.3%"  # 3/11 of the stage-ticks idle, counted in the table
    held = at.dataframe[0].value
    assert list(held["held, gpipe"]) == [8, 8, 8, 8] and list(held["held, 1f1b"]) == table.peak_held()


def test_a_pipeline_of_one_stage_says_it_sends_nothing():
    at = app_test(180)
    # 8 heads: split 8 ways over model on every JAX (the default 4 on 8 ways: JAX 0.12.1 splits partway, refused)
    at.query_params.update(model="transformer", mesh="1x1x8", preset="pp_tp", heads="8")
    at.switch_page("app_pages/train.py").run()
    assert not at.exception and not at.error
    assert json.loads(next(c for c in at.get("plotly_chart") if c.proto.id.endswith("-pipeline_timeline")).proto.spec)[
        "layout"
    ]["title"]["text"].startswith("GPipe: 1 stage × 4 microbatches")
    assert any(
        i.value.startswith("**One stage:** the mesh axis `y`") and "no stage sends to another" in i.value
        for i in at.info
    )


def test_share_link_carries_microbatches_and_schedule_only_for_a_pipeline():
    state = {
        **config_state.defaults(),
        "model": "transformer",
        "preset": "pp",
        "layers": 4,
        "microbatches": 8,
        "schedule": "1f1b",
    }
    query = links.to_query(state)
    assert query["mb"] == "8" and query["schedule"] == "1f1b"
    updates, problems = links.from_query(query)
    assert problems == [] and updates["microbatches"] == 8 and updates["schedule"] == "1f1b"
    assert "mb" not in links.to_query({**state, "preset": "tp"})
    config = config_state.config_from_state({**state, "preset": "tp"})
    assert config.microbatches == 1  # a layout without stages runs the whole batch at once
    _, problems = links.from_query({**query, "mb": "0", "schedule": "zigzag"})
    assert len(problems) == 2


def test_lesson_says_where_the_pipeline_is_shown():
    at = app_test(180)
    at.switch_page("app_pages/lesson.py").run()
    at.selectbox(key="model").select("transformer").run()
    at.selectbox(key="preset").select("pp").run()
    at.number_input(key="layers").set_value(4).run()
    assert not at.exception and not at.error
    assert "does not run" in at.info[0].value and "Train page" in at.info[0].value


def test_train_page_trains_a_pipeline_live():
    at = app_test(180)
    at.switch_page("app_pages/train.py").run()
    at.selectbox(key="model").select("transformer").run()
    at.selectbox(key="preset").select("pp").run()
    at.number_input(key="layers").set_value(4).run()
    at.number_input(key="microbatches").set_value(2).run()
    at.number_input(key="steps").set_value(20).run()
    at.button(key="train").click().run()
    snap = at.session_state["job_slot"].job.wait(240)
    assert snap.state == "finished", snap.message
    assert snap.layout_problems == [] and len(snap.losses) == 20
    at.run()
    assert not at.exception and not at.error
    assert any("layout verified" in s.value for s in at.success)
