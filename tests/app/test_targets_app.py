"""The compile target in the app: the sidebar's picker, the link, the pages that compile for it."""

import jax
import pytest
from streamlit.testing.v1 import AppTest

from sharding_lab.hardware import targets
from tests.support import app_test

TPU = targets.availability(targets.parse("v5e-8"))
needs_tpu = pytest.mark.skipif(not TPU[0], reason=TPU[1])


def on_v5e_8(page: str, timeout: int = 300) -> AppTest:
    """The app compiling for v5e-8 (a 2×4 mesh, from a link), opened on ``app_pages/<page>.py``."""
    at = app_test(timeout)
    at.query_params.update({"target": "v5e-8", "mesh": "2x4"})
    at.run()
    return at.switch_page(f"app_pages/{page}.py").run()


def seconds(text: str) -> float:
    """A time as the app prints it ("24 µs", "1.2 s") in seconds."""
    value, unit = text.split()
    return float(value) * {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}[unit]


def test_a_link_carries_the_target_and_reports_a_bad_one():
    from sharding_lab.app.state import links

    updates, problems = links.from_query({"target": "v5e-8", "mesh": "2x4"})
    assert updates["target"] == "v5e-8" and not problems
    updates, problems = links.from_query({"target": "v5e-9"})
    assert "target" not in updates and problems and problems[0].startswith("target='v5e-9' ignored")
    from sharding_lab.app.state import config_state

    state = {**config_state.defaults(), "target": "v5e-8"}
    assert links.to_query(state)["target"] == "v5e-8"
    assert "target" not in links.to_query(config_state.defaults())  # links to the simulated host stay as they were


def test_choosing_a_target_lays_a_mesh_that_fits_it():
    from sharding_lab.app.state import config_state

    for name in ("v5e-8", "v5e-256", "v5p-8", "v5p-128", "h100-8", "h100-16", "cpu"):
        state = {**config_state.defaults(), "target": name}
        state.update(config_state.target_changed(state))
        mesh = config_state.mesh_spec(state)
        assert mesh.size == (targets.parse(name).devices or 8), name


@needs_tpu
def test_the_communication_page_names_the_tpu_compiler_and_where_xla_cpu_differs():
    at = on_v5e_8("communication", timeout=180)
    assert not at.exception
    assert any("Compiled by **the TPU compiler (libtpu)** for **v5e-8" in i.value for i in at.info)
    text = " ".join(m.value for m in at.markdown)
    assert "XLA:TPU vs the simulated host (XLA:CPU)" in text and "≠ " in text
    # The memory view names the step's largest buffers on a TPU target (program.buffers), largest first.
    largest = next(d.value for d in at.dataframe if "buffer" in d.value.columns)
    assert len(largest) == 5 and list(largest["bytes"]) == sorted(largest["bytes"], reverse=True)
    assert any("w1" in what or "w2" in what for what in largest["buffer"])  # named by the MLP's parameters
    # Beside the roofline (the bound), the step at a real v5e's measured rates, its calibration named: never
    # faster than the bound (this tiny step is latency-bound: the collectives' α sets both).
    metrics = {m.label: m.value for m in at.metric}
    assert "Calibrated step" in metrics and "Calibrated HFU" in metrics, sorted(metrics)
    assert seconds(metrics["Calibrated step"]) >= seconds(metrics["Predicted step"]) > 0
    assert any("tpu-v5e calibration of" in c.value for c in at.caption)
    at.switch_page("app_pages/train.py")
    at.run()
    assert any("Training needs the chips" in i.value for i in at.info)
    assert at.button(key="train").disabled


@needs_tpu
def test_the_layout_page_says_where_each_axis_runs_in_the_placement_s_own_words():
    """The one account of the chip (hardware.placement.describe), the same the cost prints: on v5e-8's 2×4 torus
    (no dimension of 16: nothing wraps) JAX lays the model axis on a 2×2 block and the data axis across it."""
    from sharding_lab.hardware import placement

    at = on_v5e_8("layout", timeout=180)
    assert not at.exception
    captions = " ".join(c.value for c in at.caption)
    for line in placement.describe_axes("v5e-8", (2, 4), ("data", "model")):
        assert line in captions
    assert "model: 4 chips over ICI, a line of 2 along x × a line of 2 along y; no wraparound" in captions


@needs_tpu
def test_the_app_says_when_the_mesh_does_not_fill_the_slice():
    at = app_test(120)
    at.query_params.update({"target": "v5e-16", "mesh": "2x4"})
    at.run()
    assert not at.exception
    assert any("has 16 chips: make the mesh" in e.value for e in at.error), [e.value for e in at.error]


@needs_tpu
def test_compare_compiles_every_strategy_for_the_sidebar_s_target():
    """Compare once compiled for the simulated host whatever the target: on v5e-8 its sentences said
    "XLA:CPU all-reduced …" and its cost panel opened on an H100. Now each strategy is the TPU compiler's
    program (its collective count checked against that program's HLO by a plain regex), and the short run,
    which needs the chips, is off."""
    import re

    import sharding_lab as sl
    from sharding_lab.lessons.compare import strategy_config
    from sharding_lab.program.communication import COLLECTIVES, analyze

    at = on_v5e_8("compare")
    assert not at.exception
    assert any("compiled by **the TPU compiler (libtpu)** for **v5e-8" in i.value for i in at.info)
    assert at.number_input(key="compare_steps").disabled
    text = " ".join(m.value for m in at.markdown)
    assert "XLA:TPU" in text and "XLA:CPU" not in text
    assert "On TPU v5e" in text
    table = next(df.value for df in at.dataframe if "collectives / step" in df.value.columns)
    dp = int(table.set_index("strategy").loc["dp", "collectives / step"])
    base = sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("data", "model")), model=sl.MLPSpec(1, 1024, 1, 2), target="v5e-8")
    hlo = analyze(sl.plan(strategy_config(base, "dp"))).hlo
    ops = "|".join(COLLECTIVES)
    assert ":T(" in hlo and dp == len(re.findall(rf"\s(?:{ops})(?:-start)?\(", hlo))


@needs_tpu
def test_the_lesson_s_transformer_chapter_compiles_for_the_target_with_the_mlp_selected():
    """With the MLP in the sidebar the chapter builds a default transformer — it once dropped the target
    there and compiled for the simulated host."""
    at = on_v5e_8("lesson")
    at.radio(key="lesson_step").set_value(9).run()
    assert not at.exception and not at.error
    against = " ".join(m.value for m in at.markdown if m.value.startswith("Against the textbook"))
    assert "XLA:TPU" in against and "XLA:CPU" not in against


@needs_tpu
def test_a_challenge_s_solution_keeps_the_target_where_it_holds_there_and_says_why_where_not():
    """ "Show me a solution" once put every learner back on the simulated host, silently. Now a solution that
    holds on the sidebar's slice keeps it (checked there), and one the TPU compiler breaks — quiet-forward:
    XLA:TPU sums the loss inside the forward pass — goes back to the host and says why."""

    def solve(challenge_id):
        at = on_v5e_8("challenges")
        at.button(key=f"solution_{challenge_id}").click().run()
        notice = " ".join(i.value for i in at.info if "sidebar now holds" in i.value)
        at.button(key=f"check_{challenge_id}").click().run()
        assert not at.exception
        return at, notice

    at, notice = solve("no-activation-allreduce")
    assert at.session_state["challenge_results"]["no-activation-allreduce"]["solved"]
    if jax.__version__.startswith("0.10."):  # libtpu 0.0.42: FSDP's step all-reduces gradients only
        assert at.session_state["target"] == "v5e-8" and "simulated host" not in notice
    else:  # libtpu 0.0.52 (JAX 0.12.1) all-reduces one activation too: the solution goes back to the host, said why
        assert at.session_state["target"] == "cpu"
        assert "On v5e-8 it does not" in notice and "activations" in notice
    at, notice = solve("quiet-forward")
    assert at.session_state["target"] == "cpu"
    assert "On v5e-8 it does not" in notice and "loss" in notice
    assert at.session_state["challenge_results"]["quiet-forward"]["solved"]


@needs_tpu
def test_the_lesson_s_transformer_chapter_with_splash_attention_says_there_is_no_scores_array():
    """The splash kernel never materialises the (batch, heads, seq, seq) scores: the chapter once looked that
    array's layout up and raised (an incident on the page)."""
    at = app_test(300)
    at.query_params.update({"target": "v5e-8", "mesh": "2x4", "model": "transformer", "attention": "splash"})
    at.query_params.update({"seq": "256"})
    at.run()
    at = at.switch_page("app_pages/lesson.py").run()
    at.radio(key="lesson_step").set_value(9).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("there is no scores layout to draw" in c.value for c in at.caption)
