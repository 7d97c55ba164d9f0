"""Challenges that check themselves: every solution passes its own check, the default configuration
fails them, the `why` says what was computed, and `python -m sharding_lab challenge` keeps its contract.

Real JAX throughout: compiled checks compile the trainer's step (abstract inputs, nothing allocated)."""

import argparse
import json
import re
import shlex

import pytest

import sharding_lab as sl
from sharding_lab.app.state import config_state
from sharding_lab.cli import main as cli
from sharding_lab.lessons import challenges
from sharding_lab.lessons.challenges import checks
from sharding_lab.training import options

IDS = list(challenges.CHALLENGES)


def in_process(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_catalogue_is_core_code():
    """No Streamlit or Plotly: test_boundary imports every core module with both refused."""
    from test_boundary import core_modules

    assert "sharding_lab.lessons.challenges" in core_modules()


def test_catalogue_is_complete_and_graded():
    assert len([c for c in challenges.CHALLENGES.values() if c.run is not checks.megatron_sublayers]) >= 8
    levels = [c.level for c in challenges.CHALLENGES.values()]
    assert levels == sorted(levels), "listed from easy to hard"
    assert set(levels) == {1, 2, 3}
    for c in challenges.CHALLENGES.values():
        assert re.fullmatch(r"[a-z][a-z0-9-]*", c.id), c.id  # safe in a link, no quoting needed
        assert c.goal.endswith(".") and c.goal.count(". ") == 0, c.goal  # one sentence
        assert 2 <= len(c.hints) <= 3 and c.checked_on in challenges.CHECKED_ON
        assert isinstance(c.solution, dict) and c.solution  # a partial configuration, settings by name
    # the transformer challenge is there exactly when the transformer family is
    assert ("megatron-sublayers" in challenges.CHALLENGES) == ("transformer" in sl.FAMILIES)


@pytest.mark.parametrize("challenge_id", IDS)
def test_solution_solves_it_and_the_sidebar_can_hold_it(challenge_id):
    challenge = challenges.get(challenge_id)
    # the solution as a partial configuration, and as the command line prints it, are one configuration
    parser = argparse.ArgumentParser()
    options.add_config_options(parser)
    config = challenges.solution_config(challenge)
    assert options.config_from_args(parser.parse_args(challenges.solution_args(challenge))) == config
    solved, why = challenge.check(sl.plan(config))
    assert solved, why
    assert why.endswith(".")  # a sentence
    # the page applies it through the sidebar's keys: they must rebuild the same configuration
    state = {**config_state.defaults(), **config_state.state_from_config(config)}
    assert config_state.config_from_state(state) == config


def test_default_configuration_fails_them_all_and_says_why():
    plan = sl.plan(sl.LabConfig())
    verdicts = {c.id: c.check(plan) for c in challenges.CHALLENGES.values()}
    failed = [cid for cid, (solved, _) in verdicts.items() if not solved]
    assert len(failed) >= len(verdicts) - 1, verdicts
    assert all(why for _, why in verdicts.values())


def test_why_is_built_from_what_was_computed():
    seed = sl.plan(sl.LabConfig())
    # the seed's w1 (1×32) is split 4 ways over `model`
    assert challenges.check("eighth", seed) == (
        False,
        "w1 (1×32) is laid out as `P(None, 'model')`: each device holds 8 of its 32 entries — 1/4, not 1/8.",
    )
    # the fallback the plan warns about is the reason, in the plan's own words
    solved, why = challenges.check("no-fallback", seed)
    assert not solved and seed.warnings[0] in why
    # the forward collective named is the compiled step's own
    from sharding_lab.program.communication import analyze

    forward = [c for c in analyze(seed).collectives if c.phase == "forward"]
    solved, why = challenges.check("quiet-forward", seed)
    assert forward and not solved and f"{forward[0].count} × {forward[0].op}" in why
    # memory and bytes against DP are the plan's and the compiled step's numbers
    dp = sl.plan(sl.LabConfig(preset="dp"))
    solved, why = challenges.check("halve-dp", dp)
    assert not solved and f"{analyze(dp).total_wire_bytes:,} bytes per device per step against DP's" in why


def test_checks_are_cached_by_configuration():
    plan = sl.plan(challenges.solution_config(challenges.get("quiet-forward")))
    first = challenges.check("quiet-forward", plan)
    again = sl.plan(challenges.canonical(plan.config))  # steps/seed/chunk do not matter to a check
    assert challenges.check("quiet-forward", again) is first


def test_other_ways_to_solve_count_too():
    """A check tests the goal, not the recorded solution."""
    tp = sl.plan(challenges.config_from_argv(["--preset", "tp"]))
    assert challenges.check("no-fallback", tp)[0]  # w2 rows on `model`, no fallback
    assert challenges.check("halve-dp", sl.plan(challenges.config_from_argv(["--preset", "fsdp_tp"])))[0]
    wider = challenges.config_from_argv(["--preset", "seed", "--dout", "4"])  # w2's columns now divide
    assert challenges.check("no-fallback", sl.plan(wider))[0]
    # FSDP on a 1-D mesh at the seed's sizes gathers weights, as the textbook: not this challenge
    fsdp = sl.plan(challenges.config_from_argv(["--mesh", "8", "--preset", "fsdp"]))
    solved, why = challenges.check("gather-activations", fsdp)
    assert not solved and "weights" in why


# --- the command line ----------------------------------------------------------------------------


def test_cli_list_json(capsys):
    code, out, _ = in_process(capsys, "challenge", "list", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [c["id"] for c in listed] == IDS
    assert all(set(c) == {"id", "title", "goal"} for c in listed)


def test_cli_check_default_and_solution(capsys):
    code, out, _ = in_process(capsys, "challenge", "check", "eighth", "--json")
    assert code == 0 and json.loads(out)["solved"] is False and "1/4, not 1/8" in json.loads(out)["why"]
    code, out, _ = in_process(capsys, "challenge", "solution", "eighth")
    assert code == 0 and out.count("\n") == 1
    argv = shlex.split(out)
    code, out, _ = in_process(capsys, "challenge", "check", "eighth", *argv, "--json")
    assert code == 0 and json.loads(out) == {
        "solved": True,
        "why": challenges.check("eighth", sl.plan(challenges.config_from_argv(argv)))[1],
    }
    code, out, _ = in_process(capsys, "challenge", "check", "eighth", *argv)
    assert code == 0 and out.startswith("solved: ")


def test_cli_solution_is_shell_quoted(capsys):
    code, out, _ = in_process(capsys, "challenge", "solution", "no-fallback")
    solution = challenges.get("no-fallback")
    assert code == 0 and shlex.split(out) == challenges.solution_args(solution)
    assert challenges.config_from_argv(shlex.split(out)) == challenges.solution_config(solution)


@pytest.mark.parametrize(
    "args,fragment",
    [
        (("check", "no-such-thing"), "unknown challenge 'no-such-thing'"),
        (("solution", "x;rm -rf /"), "unknown challenge"),
        (("check", "eighth", "--mesh", "3x3"), "needs 9 devices"),
        (("check", "eighth", "--mesh", "banana"), "mesh shape 'banana'"),
        (("check", "eighth", "--preset", "nope"), "unknown preset 'nope'"),
    ],
)
def test_cli_errors_are_one_line_exit_2(capsys, args, fragment):
    code, out, err = in_process(capsys, "challenge", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and fragment in err and "Traceback" not in err
