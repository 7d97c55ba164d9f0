"""The Challenges page through the real script (AppTest, real JAX): hints one per click, Check
against the sidebar's configuration, a solution that fills in the sidebar, progress in the link,
and the teacher's counts."""

from streamlit.testing.v1 import AppTest
from test_app import TIMEOUT

import sharding_lab as sl
from sharding_lab.lessons import challenges
from sharding_lab.server import classroom
from tests.support import app_test

PAGE = "app_pages/challenges.py"


def challenges_page(query: dict | None = None) -> AppTest:
    at = app_test(TIMEOUT)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    at.switch_page(PAGE)
    return at.run()


def badges(at: AppTest) -> int:
    return sum(":green-badge[" in m.value and "Solved" in m.value for m in at.markdown)


def progress_text(at: AppTest) -> str:
    return at.get("progress")[0].proto.text


def test_hints_appear_one_per_click():
    at = challenges_page()
    assert not at.exception
    hints = challenges.get("eighth").hints
    for shown in range(1, len(hints) + 1):
        at.button(key="hint_eighth").click().run()
        texts = [i.value for i in at.info if i.value.startswith("**Hint")]
        assert texts == [f"**Hint {i + 1}.** {h}" for i, h in enumerate(hints[:shown])]
        assert at.button(key="hint_eighth").label == f"Hint ({shown}/{len(hints)})"
    assert at.button(key="hint_eighth").disabled  # no more hints to give


def test_check_fails_on_default_then_the_solution_solves_it_and_is_counted():
    before = classroom.solved_counts().get("quiet-forward", 0)
    at = challenges_page()
    assert badges(at) == 0 and progress_text(at).startswith("Solved 0 of")
    at.button(key="check_quiet-forward").click().run()
    assert not at.exception
    assert [w.value for w in at.warning] == [challenges.check("quiet-forward", sl.plan(sl.LabConfig()))[1]]
    assert badges(at) == 0 and at.session_state.solved == []

    at.button(key="solution_quiet-forward").click().run()
    # the sidebar now holds the solution's configuration
    assert at.selectbox(key="preset").value == "dp"
    assert [at.number_input(key=k).value for k in ("size_0", "size_1")] == [2, 4]
    at.button(key="check_quiet-forward").click().run()
    assert not at.exception
    assert [s.value for s in at.success] and "no collective" in at.success[0].value
    assert badges(at) == 1 and at.session_state.solved == ["quiet-forward"]
    assert progress_text(at).startswith("Solved 1 of")
    assert at.query_params["solved"] in ("quiet-forward", ["quiet-forward"])  # the share link carries it
    assert classroom.solved_counts()["quiet-forward"] == before + 1
    at.button(key="check_quiet-forward").click().run()  # solving again does not count twice
    assert classroom.solved_counts()["quiet-forward"] == before + 1


def test_custom_rules_solution_applies_and_passes():
    at = challenges_page()
    at.button(key="solution_no-fallback").click().run()
    assert at.selectbox(key="preset").value == "custom"
    assert at.session_state["ovr_w2_0"] == "model"
    at.button(key="check_no-fallback").click().run()
    assert not at.exception and "no parameter falls back" in at.success[0].value
    assert at.session_state.solved == ["no-fallback"]


def test_link_restores_progress_and_reports_a_bad_id():
    before = classroom.solved_counts()
    at = challenges_page({"solved": "eighth,halve-dp,<b>bogus</b>"})
    assert not at.exception
    assert at.session_state.solved == ["eighth", "halve-dp"]
    assert badges(at) == 2 and progress_text(at).startswith("Solved 2 of")
    notice = [w.value for w in at.warning if "link" in w.value]
    assert notice and "bogus" in notice[0] and "<b>" not in notice[0]  # reported, shown literally
    assert classroom.solved_counts() == before  # a link's claim is progress, not a solve to count


def test_a_configuration_that_cannot_be_planned_disables_check_and_a_solution_repairs_it():
    at = challenges_page()
    at.number_input(key="size_0").set_value(3).run()
    at.number_input(key="size_1").set_value(3).run()
    assert not at.exception
    assert any("cannot be planned" in e.value for e in at.error)
    assert at.button(key="check_no-activation-allreduce").disabled
    at.button(key="solution_no-activation-allreduce").click().run()  # a 1-D mesh of 8
    assert at.radio(key="n_axes").value == 1 and at.number_input(key="size_0").value == 8
    assert not at.error and not at.button(key="check_no-activation-allreduce").disabled
    at.button(key="check_no-activation-allreduce").click().run()
    assert not at.exception and "no all-reduce in the compiled step carries activations" in at.success[0].value
