"""A newcomer's surprises (issue 50.8), each fixed with a test."""

import sharding_lab as sl


def test_momentum_decay_is_off_under_adamw_and_says_why():
    """Issue 50: Train showed "Momentum decay" under AdamW, which has none to set."""
    from tests.support import app_test

    at = app_test(120)
    at.query_params.update({"opt": "adamw"})
    at.switch_page("app_pages/train.py")
    at.run()
    assert not at.exception, at.exception
    decay = at.number_input(key="decay")
    assert decay.disabled and "adamw keeps its own decays" in decay.help
    seed = app_test(120)
    seed.switch_page("app_pages/train.py")
    seed.run()
    assert not seed.number_input(key="decay").disabled  # the seed's momentum SGD: its decay is the box's


def test_show_me_a_solution_leaves_no_verdict_of_the_configuration_before():
    """Issue 50: after "Show me a solution" the old "not solved" verdict stayed under the new configuration."""
    from sharding_lab.lessons import challenges
    from tests.support import app_test

    at = app_test(120)
    at.switch_page("app_pages/challenges.py")
    at.run()
    unsolved = next(
        c.id
        for c in challenges.CHALLENGES.values()
        if c.checked_on == "plan" and not c.check(sl.plan(sl.LabConfig()))[0]
    )
    at.button(key=f"check_{unsolved}").click().run()
    assert unsolved in at.session_state["challenge_results"]  # the default configuration: not solved
    at.button(key=f"solution_{unsolved}").click().run()
    assert not at.exception, at.exception
    assert unsolved not in at.session_state["challenge_results"]
    assert not any("earlier configuration" in c.value for c in at.caption)


def test_compare_says_when_its_mlp_is_not_the_sidebar_s():
    """Issue 50: Compare said "same model" but compared its own, wider MLP (8.41 MB against 388 B)."""
    from tests.support import app_test

    at = app_test(120)
    at.switch_page("app_pages/compare.py")
    at.run()
    assert not at.exception, at.exception
    said = [c.value for c in at.caption if "Not the sidebar's model" in c.value]
    count = sl.family("mlp").parameter_count
    wide, seed = sl.ModelSpec(1, 1024, 1, 2), sl.LabConfig().model
    assert said and f"{count(wide):,} parameters against the sidebar's {count(seed):,}" in said[0]
    assert not any("same model" in c.value for c in at.caption)
