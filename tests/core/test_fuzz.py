"""Every setting fuzzed (issue 49): arbitrary text and numbers — Unicode digits, huge and negative numbers, floats,
NaN, empty, very long, rule words as names — through a share link and through the command line, in process. Each
entry point answers with a sentence (a problem reported, a ConfigError, argparse's usage line) or a configuration
that plans; never another exception.

Hypothesis draws 500 examples per entry point, derandomized (the same examples on every run, so CI is
repeatable) and without a deadline (a loaded machine is slow, not wrong). In-process parsing is cheap: each
example is parsed, turned into a configuration and planned (layouts from JAX's abstract arrays: nothing
compiled, nothing allocated). The widgets are fuzzed through AppTest in tests/app/test_fuzz_app.py, with fewer
examples (each one a script run).
"""

import argparse
import contextlib
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sharding_lab as sl
from sharding_lab.app.state import config_state as app_settings
from sharding_lab.app.state import links
from sharding_lab.training import options
from sharding_lab.training.run_settings import link_keys as run_link_keys

EXAMPLES = 500
FUZZ = settings(
    max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
RULE_WORDS = ["replicated", "none", "None", "NONE", "True", "False", "null", "-", "class"]
NASTY = [
    "",
    " ",
    "0",
    "-0",
    "-1",
    "007",
    "1e9",
    "1e-400",
    "1e400",
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-Infinity",
    "1_000",
    "0x10",
    "1.5",
    "²",
    "²x4",
    "2x٤",
    "٣",
    "½",
    "𝟠",
    "2x4",
    "8",
    "1x8",
    "2x2x2",
    "2x2x2x2",
    "0x8",
    "9" * 4301,
    "5" * 5000,
    "2x" + "9" * 30,
    "data,model",
    "data,data",
    "data\n",
    "<script>alert(1)</script>",
    "a" * 10_000,
    "embed:data,mlp:model",
    "mlp:replicated+none",
    "w1.0:data",
    "\x00",
    "\u202e",
    *RULE_WORDS,
]
NUMBER_TEXT = st.one_of(
    st.integers(-(10**40), 10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f"{f:g}"),
)
UNICODE_DIGITS = st.text(alphabet=st.characters(categories=["Nd", "No", "Nl"]), min_size=1, max_size=6)
ODD_SIZES = st.sampled_from(["²", "٤", "½", "𝟠", "٣", "9" * 4301, "-2", "0", "", " 4", "4 ", "1e1", "0x8"])
MESHES = st.tuples(
    st.lists(st.one_of(st.integers(1, 9).map(str), ODD_SIZES, UNICODE_DIGITS), min_size=1, max_size=4),
    st.sampled_from(["x", "×", ",", "*", " "]),
).map(lambda sizes_sep: sizes_sep[1].join(sizes_sep[0]))
NAMES = st.lists(st.one_of(st.sampled_from(RULE_WORDS + ["data", "model", "x"]), st.text(max_size=6)), max_size=4).map(
    ",".join
)
VALUES = st.one_of(st.sampled_from(NASTY), NUMBER_TEXT, UNICODE_DIGITS, MESHES, NAMES, st.text(max_size=40))


def plans_or_says_why(config_or_error) -> None:
    """A configuration plans, or its ConfigError is a sentence: nothing else may come out."""
    try:
        sl.plan(config_or_error)
    except sl.ConfigError as error:
        assert str(error).strip(), "an empty ConfigError"


# --- a share link ------------------------------------------------------------------------------------------


def link_keys() -> list[str]:
    return sorted(run_link_keys() | set(links.PAGE_KEYS) | links.NOT_SETTINGS | {"no_such_setting"})


# A few settings at a time (one bad value must not hide another's), the mesh and the axes often: their text is parsed.
KEYS = st.one_of(st.sampled_from(link_keys()), st.sampled_from(["mesh", "axes", "rules", "focus", "mb"]))
LINKS = st.dictionaries(KEYS, VALUES, min_size=1, max_size=3)


@FUZZ
@given(query=LINKS)
def test_any_link_is_answered_with_settings_and_sentences(query):
    updates, problems = links.from_query(query)
    assert all(isinstance(p, str) and p for p in problems)
    state = {**app_settings.defaults(), **updates}
    try:
        config = app_settings.config_from_state(state)
    except sl.ConfigError as error:
        assert str(error).strip()
        return
    plans_or_says_why(config)


@pytest.mark.parametrize("mesh", ["5" * 5000, "²x4", "2x" + "9" * 4301, "٣x2"])
def test_the_issues_links_are_answered_with_a_sentence(mesh):
    """The two links of issue 49: a 5,000-digit mesh size (Python's 4,300-digit limit on ``int()``) and ``²x4``
    (``'²'.isdigit()`` is True, ``int('²')`` fails) raised ValueError out of ``links.from_query``."""
    updates, problems = links.from_query({"mesh": mesh, "axes": "data,model"})
    assert "n_axes" not in updates
    assert any(p.startswith("mesh=") and "ignored" in p for p in problems), problems
    assert all(len(p) < 300 for p in problems)  # the 5,000 digits are not repeated back


# --- the command line --------------------------------------------------------------------------------------

# --family imports a module and --hf-config reads a file, by design: whoever runs the command chose them.
FLAGS = [
    a.option_strings[0]
    for a in (lambda p: (options.add_config_options(p), p)[1])(argparse.ArgumentParser())._actions
    if a.option_strings and a.option_strings[0] not in ("-h", "--family", "--hf-config")
]
ARGV = st.lists(st.tuples(st.sampled_from(FLAGS), VALUES), max_size=5).map(
    lambda pairs: [f"{flag}={value}" for flag, value in pairs]
)


def parse(argv: list[str]):
    """argv → LabConfig as ``sharding-lab layout`` does it (argparse, then options.config_from_args), in
    process; argparse's own refusal (usage and one line on stderr, exit 2) is a sentence too."""
    parser = argparse.ArgumentParser(prog="sharding-lab layout", exit_on_error=True)
    options.add_config_options(parser)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            args = parser.parse_args(argv)
        except SystemExit as leaving:
            assert leaving.code == 2 and "error: " in err.getvalue(), err.getvalue()
            return None
    return options.config_from_args(args)


@FUZZ
@given(argv=ARGV)
def test_any_command_line_is_answered_with_a_configuration_or_a_sentence(argv):
    try:
        config = parse(argv)
    except sl.ConfigError as error:
        assert str(error).strip()
        return
    if config is not None:
        plans_or_says_why(config)
