"""The real Streamlit script, driven by streamlit.testing.v1.AppTest (no browser)."""

import dataclasses
import json
import time

import pytest
from streamlit.testing.v1 import AppTest

import sharding_lab as sl
from sharding_lab import cost
from tests.support import app_test

TIMEOUT = 120


def chart_spec(at: AppTest, key: str) -> dict:
    for chart in at.get("plotly_chart"):
        if chart.proto.id.endswith(f"-{key}"):
            return json.loads(chart.proto.spec)
    raise AssertionError(f"no chart with key {key!r}")


def device_blocks(spec: dict) -> dict[int, list]:
    """device → the index ranges its stripe in a shard map says it holds."""
    return {trace["meta"]["device"]: trace["meta"]["ranges"] for trace in device_traces(spec)}


def device_traces(spec: dict) -> list[dict]:
    """The traces that draw a device (not the invisible click targets)."""
    return [t for t in spec["data"] if "device" in (t.get("meta") or {})]


def page(path: str) -> AppTest:
    """Open ``path`` directly, as a shared link to that page would."""
    at = app_test(TIMEOUT)
    at.switch_page(path)
    return at.run()


@pytest.fixture
def app() -> AppTest:
    return app_test(TIMEOUT).run()


@pytest.fixture
def train_page() -> AppTest:
    return page("app_pages/train.py")


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
    assert sorted(t["meta"]["device"] for t in device_traces(mesh)) == list(range(8))


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
    # Issue 23: the presets bind data (first axis) and model (last): the middle one was silently unused
    (unused,) = [w.value for w in app.sidebar.warning if "splits no array" in w.value]
    assert unused.startswith("Mesh axis `y` (2) splits no array")
    assert sl.plan(sl.LabConfig(mesh=sl.MeshSpec((2, 2, 2), ("x", "y", "z")))).unused_axes() == ("y",)
    app.selectbox(key="rule_embed").select("y").run()  # a rule names it: nothing to say
    assert not app.exception and not [w for w in app.sidebar.warning if "splits no array" in w.value]


def test_train_page_trains_the_seed_config(train_page):
    app = train_page
    assert not app.exception
    app.button(key="train").click().run()
    seen = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        app.run()
        try:
            loss = chart_spec(app, "loss")
        except AssertionError:  # no chart until the first losses (queued or compiling)
            seen.append(0)
        else:
            seen.append(
                len(loss["data"][0]["x"]["bdata"])
                if isinstance(loss["data"][0]["x"], dict)
                else len(loss["data"][0]["x"])
            )
        if any("layout verified on 8 devices" in s.value for s in app.success):
            break
        time.sleep(0.3)
    assert not app.exception
    assert any("layout verified on 8 devices" in s.value for s in app.success)
    final = [m for m in app.metric if m.label.startswith("Final loss")][0]
    assert float(final.value) < 0.05
    assert seen[-1] > seen[0]


def test_a_compiled_layouts_first_loss_and_a_short_runs_end_are_drawn_by_the_run_that_follows_the_click(train_page):
    """The full run after a click on Train starts the page's polling, whose first poll comes an interval later (3 s
    with a class training); a layout compiled on this server has its first 100 steps within a second or two, and
    that run waits for them and draws them. A layout that must compile is drawn by a poll, as before."""
    app = train_page
    # Long enough to be running still when the page is read: the default layout's 20,000 steps take ~5 s once
    # compiled (that race failed test_class_browser in CI); 4,096 rows a step take over 20 s.
    app.number_input(key="batch").set_value(4096).run()
    app.number_input(key="steps").set_value(20_000).run()
    app.number_input(key="lr").set_value(0.0123).run()  # a layout no other test compiled
    last_loss = lambda: [m for m in app.metric if m.label == "Last loss"][0].value  # noqa: E731
    app.button(key="train").click().run()
    assert not app.exception and last_loss() == "—"  # compiling: nothing to draw yet, and the run did not wait
    job = app.session_state["job_slot"].job
    assert not job.compiled
    job.wait_for_first_loss(120)
    job.stop()
    assert job.wait(60).state == "stopped"
    app.run()
    app.button(key="train").click().run()  # the same layout again: compiled now
    second = app.session_state["job_slot"].job
    try:
        assert second is not job and second.compiled
        assert not app.exception and last_loss() != "—" and second.snapshot().running
        assert chart_spec(app, "loss")  # the loss chart too, before any poll
    finally:
        second.stop()
        second.wait(60)
    # A compiled run that ends within the next poll's interval (at least 0.5 s) is waited for, and drawn once,
    # finished: its verdict and all its losses in the run after the click. 200 steps of 32 rows: one chunk left
    # after the first, ~0.05 s (a chunk of 4,096-row steps takes 0.1-0.3 s, too near that bound to test).
    app.run()
    app.number_input(key="batch").set_value(32).run()
    app.number_input(key="steps").set_value(200).run()
    app.button(key="train").click().run()  # compiles this layout if no test did
    app.session_state["job_slot"].job.wait(120)
    app.run()
    app.button(key="train").click().run()
    third = app.session_state["job_slot"].job
    assert third is not second and third.compiled
    assert not app.exception and not third.snapshot().running
    assert any("layout verified on 8 devices" in s.value for s in app.success)
    assert len(plotly_values(chart_spec(app, "loss")["data"][0]["y"])) == 200


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


def plotly_values(values) -> list:
    """Plotly's JSON arrays: plain lists, or {'dtype', 'bdata'} (base64 numpy) for numeric data."""
    if isinstance(values, dict) and "bdata" in values:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def test_communication_page_lists_the_seed_collectives():
    at = page("app_pages/communication.py")
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Collectives per step"] == "4"  # the trained program: 2 all-reduces + 2 all-gathers of w2
    assert any("exactly the parameters" in c.value for c in at.caption)
    # byte columns as wide as their digits: a "small" one cut 1,050,673,152 to "050,673,152" (issue 50)
    columns = json.loads(next(d for d in at.dataframe if "sent / step" in d.value.columns).proto.columns)
    assert all(columns[c].get("width") != "small" for c in ("sent / step", "sent / op", "result bytes / op"))
    at.selectbox(key="comm_selected").select(1).run()  # the gradient all-reduce over data
    mesh = chart_spec(at, "comm_mesh")
    bright = {t["meta"]["device"] for t in device_traces(mesh) if t.get("opacity", 1) > 0.5}
    assert bright == {0, 4}  # group 1: device 0 and its partner across `data`


def test_communication_page_holds_the_compiled_step_against_the_textbook():
    at = page("app_pages/communication.py")
    assert any(s.value.startswith("As the textbook: 1 × all-reduce of gradients over `data`") for s in at.success)
    assert any("pinned" in w.value for w in at.warning)  # the seed's 2 extra all-gathers of w2, named
    table = at.dataframe[0].value
    assert any(c.startswith("gradients of ") and "params/w1 (1×8 of 1×32)" in c for c in table["carries"])
    assert int(table["sent / step"].sum()) == int(at.metric[1].value.replace(",", ""))


def test_communication_page_animates_the_ring_of_the_chosen_collective():
    at = page("app_pages/communication.py")
    ops = at.dataframe[0].value["op"].tolist()
    at.selectbox(key="comm_selected").select(ops.index("all-reduce")).run()  # over model: 4 devices
    spec = chart_spec(at, "comm_animation")
    assert len(spec["frames"]) == 1 + 2 * (4 - 1)  # start, reduce-scatter 3 steps, all-gather 3 steps
    last = spec["frames"][-1]["data"][0]
    assert set(last["text"]) == {"4/4"}  # every device ends with every block summed over all 4
    assert len(spec["frames"][1]["layout"]["annotations"]) == 4  # each device sends once per step


def test_communication_page_on_one_device_has_no_collectives():
    at = page("app_pages/communication.py")
    at.number_input(key="size_0").set_value(1)
    at.number_input(key="size_1").set_value(1).run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Collectives per step"] == "0"


def test_cost_panel_reads_in_the_step_s_own_unit_and_says_what_it_leaves_out():
    at = page("app_pages/communication.py")
    metrics = {m.label: m.value for m in at.metric}
    # the seed's step on an H100 moves ~200 bytes in 4 collectives inside one NVLink node: latency-bound,
    # 4 × 3.5 µs (NCCL's measured α) plus picoseconds of bandwidth
    assert metrics["Predicted step"] == "14 µs" and metrics["Bound"] == "latency"
    costs = next(df.value for df in at.dataframe if "wire bytes" in df.value.columns)
    largest = max(costs["bytes"] / costs["count"])
    assert any(f"largest collective moves {largest:,.0f} bytes" in c.value and "Latency" in c.value for c in at.caption)
    assert cost.format_seconds(4.1e-10) == "410 ps" and cost.format_seconds(1.25e-3) == "1.25 ms"
    assert cost.format_seconds(2500.0) == "2,500 s" and cost.format_seconds(0.0) == "0 s"


def test_compare_page_shows_fsdp_storing_less_than_dp():
    at = page("app_pages/compare.py")
    assert not at.exception and not at.error
    spec = chart_spec(at, "compare_chart")
    params = next(t for t in spec["data"] if t["meta"]["metric"] == "params")
    by_name = dict(zip(plotly_values(params["x"]), plotly_values(params["y"])))
    assert set(by_name) == {"dp", "fsdp", "tp"}
    assert by_name["fsdp"] < by_name["dp"]
    comm = next(t for t in spec["data"] if t["meta"]["metric"] == "comm_bytes")
    assert all(v > 0 for v in plotly_values(comm["y"]))


def test_with_page_compiles_off_plan_and_compare_compile_only_when_asked(monkeypatch):
    """SHARDING_LAB_PAGE_COMPILES=off (the suite's browser server, which only walks through the pages): the Plan
    page counts its candidates but times no compile, and says so; Compare computes nothing until Compare is
    pressed, then the same three strategies as on opening."""
    monkeypatch.setenv("SHARDING_LAB_PAGE_COMPILES", "off")
    at = page("app_pages/compare.py")
    assert not at.exception and not at.error
    assert not at.session_state["compare_done"] and "compare_rows" not in at.session_state
    assert any("Press **Compare**" in i.value for i in at.info)
    at.button(key="compare_go").click().run()
    assert not at.exception and {r["name"] for r in at.session_state["compare_rows"]} == {"dp", "fsdp", "tp"}
    at.switch_page("app_pages/plan.py").run()
    assert not at.exception, at.exception
    estimate = at.session_state["plan_estimate"][1]
    assert estimate.to_compile and estimate.seconds_each is None
    said = next(c.value for c in at.caption if "candidates:" in c.value)
    assert f"{estimate.to_compile} to compile" in said and "Nothing is compiled before Run" in said


def test_compare_page_predicts_each_strategy_s_step_on_the_chosen_chip():
    import sharding_lab as sl

    at = page("app_pages/compare.py")
    at.selectbox(key="compare_cost_chip").select("tpu-v5e").run()
    assert not at.exception
    table = next(df.value for df in at.dataframe if "predicted step" in df.value.columns).set_index("strategy")
    assert list(table.index) == ["dp", "fsdp", "tp"]
    # the same numbers from the backend directly: the page's model (width 1024, 2 extra layers) per preset
    base = sl.LabConfig(
        mesh=sl.MeshSpec((2, 4), ("data", "model")), model=sl.MLPSpec(1, 1024, 1, 2), steps=1, seed=0, chunk=1
    )
    want = {
        name: cost.predict(sl.plan(dataclasses.replace(base, preset=name)), "tpu-v5e", "bf16") for name in table.index
    }
    for name, p in want.items():
        assert table.loc[name, "predicted step"] == cost.format_seconds(p.step_s)
        assert table.loc[name, "bound"] == p.bound
    fastest = min(want, key=lambda n: want[n].step_s)
    assert any(f"**{fastest}** is predicted fastest" in m.value and "TPU v5e" in m.value for m in at.markdown)
    bars = chart_spec(at, "compare_cost_bars")
    assert {t["meta"]["term"] for t in bars["data"]} == {"compute", "memory", "communication", "latency", "step"}


def test_compare_page_short_run_measures_speed_and_loss():
    at = page("app_pages/compare.py")
    at.select_slider(key="compare_width").set_value(128)
    at.number_input(key="compare_steps").set_value(50)
    at.button(key="compare_go").click().run()
    assert not at.exception and not at.error
    spec = chart_spec(at, "compare_chart")
    metrics = {t["meta"]["metric"]: plotly_values(t["y"]) for t in spec["data"]}
    assert all(v > 0 for v in metrics["steps_per_s"])
    assert all(0 < v < 10 for v in metrics["final_loss"])


def test_settings_survive_a_page_switch(app):
    app.selectbox(key="preset").select("tp").run()
    app.switch_page("app_pages/train.py").run()
    assert not app.exception and not app.error
    assert any("preset tp" in c.value for c in app.caption)


def test_a_run_on_the_same_page_sends_no_widget_values_back(app):
    """A setting written by the server reaches the browser as the widget's value (``set_value``); sent on every
    run, a late one undid a learner's newer edit on a busy server (the load test's name typed twice came back
    as the first). Only a page's first run copies the settings; its later runs leave the browser the source."""
    sidebar_boxes = {"name_0", "name_1", "size_0", "size_1", "preset", "n_axes"}

    def echoed() -> set[str]:
        widgets = [*app.text_input, *app.number_input, *app.selectbox, *app.radio]
        return {w.key for w in widgets if w.key in sidebar_boxes and w.proto.set_value}

    assert echoed() == sidebar_boxes  # the session's first run: every setting onto its widget
    app.text_input(key="name_1").input("mdl").run()
    assert not app.exception and app.session_state["name_1"] == "mdl"
    assert echoed() == set()
    app.switch_page("app_pages/train.py").run()  # a new page: its widgets get the settings again
    assert echoed() == sidebar_boxes and app.text_input(key="name_1").value == "mdl"
    assert any("(data, mdl)" in c.value for c in app.caption)


def test_a_settings_number_box_has_its_value_as_default(app):
    """Streamlit 1.67's browser, just after a page's first run set a box's value, still counts the box's default as
    its value: a number typed equal to it is never sent (Size 1 → 1, Streamlit's default being the minimum, was
    lost 6 times in 16 in a real browser; with the value as default, 0 in 16). Every page's settings boxes."""
    for path in ("app_pages/layout.py", "app_pages/train.py", "app_pages/plan.py"):
        app.switch_page(path).run()
        assert not app.exception
        boxes = {w.key: (w.proto.default if w.proto.HasField("default") else None, w.value) for w in app.number_input}
        assert {"size_0", "size_1", "batch"} <= set(boxes)
        assert {k: v for k, (d, v) in boxes.items() if d != v and k != "compare_steps"} == {}, path


def test_explicit_axes_refusal_is_explained_and_fixed_in_one_click(app):
    """Issue 23: Explicit axes with the seed's rules blanked every page with a garbled sentence."""
    app.radio(key="axis_type").set_value("Explicit").run()
    assert not app.exception
    (error,) = [e.value for e in app.error if "params/w2" in e.value and "cannot run" in e.value]
    assert "does not evenly divide" in error and "size 4 divides" not in error
    app.button(key="apply_fix").click().run()
    assert not app.exception and not app.error
    assert app.session_state["preset"] == "custom" and app.session_state["ovr_w2_1"] == "replicated"
    assert app.session_state["axis_type"] == "Explicit"


def test_lesson_page_walks_every_step():
    at = page("app_pages/lesson.py")
    for step in range(9):
        at.radio(key="lesson_step").set_value(step).run()
        assert not at.exception, step
        assert step == 0 or at.code, step  # every step shows its code
    # the seed preset, step 8: JAX's refusal of w2, then the walk with w2's dimension 1 replicated
    assert any("JAX refuses" in e.value and "params/w2" in e.value for e in at.error)
    assert any(s.value.startswith("Instead: replicate w2's dimension 1") for s in at.success)
    assert any(m.value == "`h @ w2`" for m in at.markdown)
    at.selectbox(key="preset").select("tp").run()
    assert any("JAX refuses" in e.value and "out" in e.value for e in at.error)
    assert any("Instead" in s.value for s in at.success)


def test_collectives_table_puts_its_key_columns_first_and_names_the_phase_as_its_legend():
    """Issue 23: at 1400 px count and bytes needed a horizontal scroll behind the long *carries*
    sentences, and the phase column said "unknown" where the legend says "none"."""
    at = page("app_pages/communication.py")
    table = at.dataframe[0].value
    columns = list(table.columns)
    assert columns[-1] == "carries"
    assert columns.index("count") < 4 and columns.index("sent / step") < 5
    assert set(table["phase"]) <= {"forward", "backward", "optimizer", "none"}
    assert "none" in set(table["phase"])  # the seed's all-gathers back to w2's pinned layout
    assert "none = moved back" in " ".join(c.value for c in at.caption)
    assert f"{len(table)} kinds of op, 4 ops in all" in " ".join(c.value for c in at.caption)


def test_compare_keeps_what_it_has_computed_and_says_per_strategy():
    """Issue 23: a short run of three strategies sat under one spinner, and changing the selection
    recomputed (re-trained) rows already shown. A re-measured real run would give another speed."""
    at = page("app_pages/compare.py")
    at.select_slider(key="compare_width").set_value(128)
    at.number_input(key="compare_steps").set_value(20)
    at.button(key="compare_go").click().run()
    assert not at.exception and not at.error
    first = {r["name"]: r["steps_per_s"] for r in at.session_state["compare_rows"]}
    assert set(first) == {"dp", "fsdp", "tp"} and all(v > 0 for v in first.values())
    computed = " ".join(c.value for c in at.caption if c.value.startswith("Computed: "))
    assert all(f"{name} in " in computed for name in first)
    at.multiselect(key="compare_strategies_mlp").select("fsdp_tp").run()
    assert not at.exception and not at.error
    again = {r["name"]: r["steps_per_s"] for r in at.session_state["compare_rows"]}
    assert {k: again[k] for k in first} == first  # the same measurements, not new runs
    assert again["fsdp_tp"] > 0
    at.button(key="compare_go").click().run()
    assert {r["name"]: r["steps_per_s"] for r in at.session_state["compare_rows"]} == again


def test_ring_animation_controls_do_not_overlap_and_the_modebar_is_off():
    """Issue 23: the slider's "step" label ran under the pause button, and Plotly's toolbar sat on
    the step's title. The buttons now have a row of their own above the slider (which spans the
    width, its label on the right), and the chart is drawn without the toolbar."""
    at = page("app_pages/communication.py")
    ops = at.dataframe[0].value["op"].tolist()
    at.selectbox(key="comm_selected").select(ops.index("all-reduce")).run()
    chart = next(c for c in at.get("plotly_chart") if c.proto.id.endswith("-comm_animation"))
    assert json.loads(chart.proto.config or "{}").get("displayModeBar") is False
    layout = json.loads(chart.proto.spec)["layout"]
    (buttons,), (slider,) = layout["updatemenus"], layout["sliders"]
    assert slider["currentvalue"]["xanchor"] == "right" and slider["x"] == 0 and slider["len"] == 1
    assert buttons["yanchor"] == slider["yanchor"] == "top" and slider["y"] < buttons["y"] < 0
    # at least 35 px between the buttons' top and the slider's: a row for the buttons
    plot_px = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    assert (buttons["y"] - slider["y"]) * plot_px >= 35


def test_wording_a_new_user_met():
    """Issue 23: "cannot run. the mesh…", "450000000000" bytes/s, "40.5468" steps/s, and the
    device-count flag broken after its "--" in the sidebar."""
    at = app_test(TIMEOUT).run()
    (devices,) = [c for c in at.sidebar.caption if c.value.startswith("8 simulated host devices")]
    assert devices.value == "8 simulated host devices (CPU)" and "--" not in devices.value
    assert "`XLA_FLAGS=--xla_force_host_platform_device_count=8`" in devices.proto.help
    at.number_input(key="size_0").set_value(4).run()
    assert any(e.value.startswith("**This configuration cannot run.** The mesh 4×4") for e in at.error)
    at = page("app_pages/communication.py")
    links = next(d.value for d in at.dataframe if "bandwidth" in d.value.columns)
    assert all(v.endswith(" GB/s") or v.endswith(" TB/s") for v in links["bandwidth"])
    assert not any(str(c).endswith("B/s") for c in links.columns if c != "bandwidth")
    at = page("app_pages/compare.py")
    formats = {
        name: c["type_config"].get("format")
        for name, c in json.loads(at.dataframe[0].proto.columns).items()
        if "type_config" in c
    }
    assert formats["steps / s"] == "%.1f" and formats["final loss"] == "%.4g"
    assert formats["bytes sent / device / step"] == "localized"


def test_lesson_names_and_links_the_blog():
    """Issue 23: "the blog" was never named or linked."""
    at = page("app_pages/lesson.py")
    text = " ".join(c.value for c in at.caption) + " ".join(m.value for m in at.markdown)
    assert "[*Distributed Training with JAX and Flax NNX: A Practical Guide to Sharding*](https://" in text
    assert "10_fsdp_and_optimizer.py`](https://github.com/google/flax/blob/" in text


def test_lesson_shows_todays_api_on_both_stacks():
    """Issue 55: the first step names both stacks and shows each call the lab teaches with what differs."""
    from sharding_lab.lessons import today
    from sharding_lab.stacks import NEWEST, OLDEST

    at = page("app_pages/lesson.py")
    assert any(NEWEST.label() in c and OLDEST.label() in c for c in at.dataframe[0].value.columns)  # blog's names
    api = next(m.value for m in at.markdown if m.value.startswith("| the call"))
    assert api.strip() == today.markdown().strip() and f"| on {NEWEST.label()} | on {OLDEST.label()} |" in api
    assert api.count("\n| `") == len(today.ROWS) and "axis_shapes" in api


def test_an_edit_while_a_run_trains_is_named_against_what_the_run_keeps():
    import dataclasses

    import sharding_lab as sl
    from sharding_lab.training.run_settings import edits as edits_since

    run = sl.LabConfig()
    now = dataclasses.replace(run, preset="fsdp", lr=0.02)
    assert edits_since(run, now) == [("rules", "preset seed", "preset fsdp"), ("learning rate", "0.01", "0.02")]
    assert edits_since(run, dataclasses.replace(run)) == []


def test_an_error_names_the_app_s_box_not_the_command_line_option():
    """ "(Layers, --layers: e.g. 4)" wrapped as "-" / "-layers" in a narrow error box (seen in Chromium, a code
    span too); the app has a box for it: the error now names the box only (issue 36: the app's labels)."""
    at = app_test(TIMEOUT)
    at.query_params.update({"model": "transformer", "mesh": "2x4", "preset": "pp"})
    at.run()
    errors = [e.value for e in at.error if "pipeline stages" in e.value]
    shown = [e.replace("\\", "") for e in errors]  # Markdown escapes
    assert shown and all("(Layers: e.g. 4)" in e and "layers`" not in e and "--layers" not in e for e in shown)
