"""The widgets fuzzed (issue 49): arbitrary axis names (rule words, keywords, Unicode, empty, too long) and numbers
(negative, huge) typed into the Layout page's sidebar, through AppTest. Every example ends in the page drawn with
a sentence for what is wrong, never an exception.

Fewer examples than the link and command-line fuzzers (tests/core/test_fuzz.py, 500 each): each example here is
a script run of the real page (about half a second), so 40 examples, derandomized, on one AppTest session — the
state one bad input leaves behind is part of what the next one meets, as for a student typing on.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharding_lab.sharding.mesh import axis_name_problem
from tests.support import app_test

RULE_WORDS = ["replicated", "none", "None", "True", "False", "class", "NONE"]
NAMES = st.one_of(
    st.sampled_from(RULE_WORDS + ["data", "model", "", " ", "data\n", "x" * 40, "数据", "<b>b</b>", "1a"]),
    st.text(max_size=12),
)
SIZES = st.one_of(st.integers(-(10**6), 10**6), st.sampled_from([0, 1, 2, 4, 8, 64, 65]))


@pytest.fixture(scope="module")
def layout_page():
    at = app_test()
    at.run()
    at.switch_page("app_pages/layout.py").run()
    assert not at.exception, at.exception
    return at


def shown(at) -> str:
    return " ".join(e.value for e in [*at.error, *at.warning]).replace("\\", "")


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(names=st.tuples(NAMES, NAMES), sizes=st.tuples(SIZES, SIZES))
def test_any_axis_names_and_sizes_typed_are_answered_with_a_sentence(layout_page, names, sizes):
    at = layout_page
    for i in (0, 1):
        at.text_input(key=f"name_{i}").input(names[i])
        at.number_input(key=f"size_{i}").set_value(sizes[i])
    at.run()
    assert not at.exception, (names, sizes, at.exception)
    typed = [at.text_input(key=f"name_{i}").value for i in (0, 1)]
    wrong = [n for n in typed if axis_name_problem(n.strip())]
    if wrong:
        assert shown(at), f"{wrong} drew no sentence"
