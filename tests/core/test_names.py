"""Names that cannot collide (issue 49): a mesh axis name is an identifier, unique, and not a word the rules or
the exported script read as something else — checked once, where the mesh is declared (``MeshSpec.validate``),
with a sentence; sizes are ASCII digits; an export's header states the rules its RULES really holds."""

import ast
import re

import pytest

import sharding_lab as sl
from sharding_lab.cli import main as cli
from sharding_lab.export.script import export_script
from sharding_lab.sharding import mesh as mesh_module
from sharding_lab.sharding.mesh import MeshSpec, parse_mesh_shape
from sharding_lab.sharding.rules import parse_target, target_text

RULE_WORDS = ["replicated", "Replicated", "none", "None", "NONE"]
KEYWORDS = ["True", "False", "class", "lambda"]


@pytest.mark.parametrize("name", RULE_WORDS + KEYWORDS)
def test_a_rule_word_or_keyword_cannot_name_a_mesh_axis(name):
    with pytest.raises(sl.ConfigError, match="name (it|the axis) something else") as refused:
        MeshSpec((2, 4), (name, "model")).validate(8)
    assert refused.value.field == "mesh" and repr(name) in str(refused.value)


def test_the_fsdp_preset_on_axes_named_none_and_true_is_refused_not_replicated():
    """Before: the plan bound fsdp's data role to the axis 'None', which the rules read as 'not split': the export
    was headed "Preset: fsdp" with every rule None."""
    config = sl.LabConfig(mesh=MeshSpec((2, 4), ("None", "True")), preset="fsdp")
    with pytest.raises(sl.ConfigError, match="'None'"):
        sl.plan(config)
    with pytest.raises(sl.ConfigError, match="'None'"):
        export_script(config)


def test_a_mesh_axis_named_replicated_is_refused_where_rules_could_not_reach_it():
    assert parse_target("replicated") is None  # why: the rules read the word as "not split"
    with pytest.raises(sl.ConfigError, match="'replicated' is the word the rules use"):
        sl.plan(sl.LabConfig(mesh=MeshSpec((2, 4), ("data", "replicated")), preset="tp"))


@pytest.mark.parametrize("name", ["data\n", "da ta", "1data", "x" * 33, "données", "", "a-b"])
def test_names_that_are_not_identifiers_are_refused(name):
    assert mesh_module.axis_name_problem(name) is not None
    with pytest.raises(sl.ConfigError):
        MeshSpec((8,), (name,)).validate(8)


@pytest.mark.parametrize("name", ["data", "model", "stage", "expert", "x", "_private", "None_", "nonesuch", "type"])
def test_identifiers_that_are_no_rule_word_are_fine(name):
    assert mesh_module.axis_name_problem(name) is None
    MeshSpec((8,), (name,)).validate(8)


@pytest.mark.parametrize("text", ["²x4", "2x٤", "5" * 5000, "2x" + "9" * 4301, "½", "2x4" + " " * 100, "-2x4", "2.5x4"])
def test_mesh_text_that_is_not_ascii_sizes_is_a_sentence(text):
    """'²'.isdigit() is True and int('²') fails; int() refuses more than 4,300 digits: both were ValueErrors."""
    with pytest.raises(sl.ConfigError, match="not like '2x4'") as refused:
        parse_mesh_shape(text)
    assert len(str(refused.value)) < 200  # a 5,000-digit size is not repeated back in full


def test_mesh_text_in_ascii_digits_parses():
    assert parse_mesh_shape(" 2×4 ") == (2, 4) and parse_mesh_shape("1,8") == (1, 8) and parse_mesh_shape("8") == (8,)


@pytest.mark.parametrize("mesh", ["²x4", "5" * 5000])
def test_the_command_line_answers_a_bad_mesh_with_a_sentence(mesh, capsys):
    assert cli.main(["layout", "--mesh", mesh]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not like '2x4'" in err and "Traceback" not in err


@pytest.mark.parametrize("axes", ["None,model", "data,replicated", "True,False"])
def test_the_command_line_answers_a_rule_word_axis_with_a_sentence(axes, capsys):
    assert cli.main(["layout", "--mesh", "2x4", "--axes", axes]) == 2
    assert "something else" in capsys.readouterr().err


HEADER_RULES = re.compile(r"^Rules \(what RULES and OVERRIDES below hold\): (.*)\.$", re.M)


def header_rules(script: str) -> dict[str, str]:
    text = HEADER_RULES.search(script).group(1).split("; overridden: ")[0]
    return dict(item.split(" -> ") for item in text.split(", "))


def script_rules(script: str) -> dict[str, str]:
    literal = re.search(r"^RULES = (.*)$", script, re.M).group(1)
    return {axis: target_text(target) for axis, target in ast.literal_eval(literal).items()}


@pytest.mark.parametrize("preset", [p for p in sl.PRESETS if p != "pp"])
def test_an_exports_header_states_the_rules_its_script_holds(preset):
    for axes in (("data", "model"), ("rows", "cols")):
        script = export_script(sl.LabConfig(mesh=MeshSpec((2, 4), axes), preset=preset))
        assert f"Preset: {preset};" in script
        assert header_rules(script) == script_rules(script)
        overrides = ast.literal_eval(re.search(r"^OVERRIDES = (.*)$", script, re.M).group(1))
        assert ("; overridden: " in HEADER_RULES.search(script).group(1)) == bool(overrides)
