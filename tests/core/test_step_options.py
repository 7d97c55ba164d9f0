"""Remat and attention are step options a model family declares (``step_only_fields``) and the code reads through
the family (``remat_of``, ``attention_of``, ``with_step_options``) — not by asking a Spec whether it has such a
field (issue 57.1)."""

import dataclasses
import re
from pathlib import Path

import sharding_lab as sl

ROOT = Path(__file__).parents[2]
DUCK = re.compile(r"\b(?:get|has)attr\([^()]*,\s*[\"'](?:remat|attention)[\"']")


def test_no_module_asks_a_spec_for_remat_or_attention():
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in [*ROOT.glob("sharding_lab/**/*.py"), *ROOT.glob("app_pages/*.py")]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if DUCK.search(line)
    ]
    assert found == []


def test_a_family_without_the_options_answers_for_them():
    mlp = sl.FAMILIES["mlp"]
    spec = mlp.Spec()
    assert (mlp.remat_of(spec), mlp.attention_of(spec)) == ("none", None)
    assert mlp.with_step_options(spec, remat="full", attention="splash") == spec


def test_the_transformer_declares_both_and_they_are_set_through_it():
    family = sl.FAMILIES["transformer"]
    spec = family.with_step_options(family.Spec(), remat="full", attention="splash")
    assert (family.remat_of(spec), family.attention_of(spec)) == ("full", "splash")
    assert family.with_step_options(spec, remat=None) == spec  # None keeps the value
    assert dataclasses.replace(spec, remat="none") == family.with_step_options(spec, remat="none")
