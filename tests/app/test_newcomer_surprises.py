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
    wide, seed = sl.MLPSpec(1, 1024, 1, 2), sl.LabConfig().model
    assert said and f"{count(wide):,} parameters against the sidebar's {count(seed):,}" in said[0]
    assert not any("same model" in c.value for c in at.caption)


def test_the_transformers_default_layout_says_which_preset_uses_the_idle_axis_and_switches_to_it():
    """Issue 50: picking the transformer on the default 2×4 mesh warned at once that `data` splits no array
    (its default preset, tp, is Megatron on `model` only) and told the newcomer to map a logical axis by hand.
    The warning now names the preset that uses both axes — planned, not guessed — and a button switches to it."""
    from tests.support import app_test

    at = app_test(120)
    at.run()
    at.selectbox(key="model").select("transformer").run()
    assert not at.exception, at.exception
    (warning,) = [w.value for w in at.sidebar.warning if "splits no array" in w.value]
    assert warning.startswith("Mesh axis `data` (2) splits no array") and "preset fsdp_tp" in warning
    at.button(key="use_every_axis").click().run()
    assert not at.exception, at.exception
    assert at.session_state["preset"] == "fsdp_tp"
    assert not [w for w in at.sidebar.warning if "splits no array" in w.value]
    config = sl.LabConfig(mesh=sl.MeshSpec((2, 4)), model=sl.family("transformer").Spec(), preset="fsdp_tp")
    assert sl.plan(config).unused_axes() == ()  # JAX's layouts agree: both axes split some array


def test_a_preset_on_renamed_axes_says_which_axis_plays_each_role(capsys):
    """Issue 50: "presets silently split nothing when the axes are renamed" — they do split (roles are bound by
    name, else by position: data → the first axis, model → the last); the app and the command line now say so."""
    from sharding_lab.cli import main as cli
    from tests.support import app_test

    at = app_test(120)
    at.run()
    at.text_input(key="name_0").set_value("x")
    at.text_input(key="name_1").set_value("y")
    at.selectbox(key="preset").select("fsdp_tp").run()
    assert not at.exception, at.exception
    said = [c.value for c in at.sidebar.caption if "names its mesh axes by role" in c.value]
    assert said and "data is played by axis `x`, model is played by axis `y`" in said[0]
    plan = sl.plan(sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("x", "y")), preset="fsdp_tp"))
    assert plan.unused_axes() == () and plan.spec("batch/x")[0] == "x"  # split, as said
    assert cli.main(["layout", "--mesh", "2x4", "--axes", "x,y", "--preset", "fsdp"]) == 0
    out = capsys.readouterr().out
    assert "note: Preset fsdp names its mesh axes by role (data)" in out and "data is played by axis `x`" in out
    assert "note: Mesh axis `y` (4) splits no array" in out  # fsdp binds data only: true on any names
    at.text_input(key="name_0").set_value("data")
    at.text_input(key="name_1").set_value("model").run()
    assert not [c for c in at.sidebar.caption if "names its mesh axes by role" in c.value]


def test_a_link_that_renames_the_default_meshs_axes_opens_with_those_names():
    """A link with ``axes=x,y`` and no ``mesh`` (the default 2×4's two axes renamed) was refused: "give one name
    per mesh axis", as if the mesh had none."""
    from sharding_lab.app.state import links

    updates, problems = links.from_query({"axes": "x,y", "preset": "fsdp"})
    assert problems == [] and (updates["name_0"], updates["name_1"]) == ("x", "y")
    _, problems = links.from_query({"axes": "x,y,z"})  # three names for the default's two axes: still refused
    assert problems and "one name per mesh axis" in problems[0]
