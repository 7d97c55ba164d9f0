"""Share links made by an earlier main still open to the same configuration.

``tests/data/share_links_5e2778d.json`` was written by main 5e2778d (before the run settings were declared in
one table): for each link, what ``from_query`` made of it (the session's settings and the problems it
reported) and the configuration a fresh session then held (the ``LabConfig``'s repr, or the ConfigError).
Links made from presets of both families, pipelines, experts, custom rules and overrides, compile targets,
named sizes, the challenges' solutions, and links written by hand (old forms, bad parts)."""

import dataclasses
import json
from pathlib import Path

import pytest

import sharding_lab as sl
from sharding_lab.app.state import config_state, links

CASES = json.loads((Path(__file__).parents[1] / "data" / "share_links_5e2778d.json").read_text())
# Classes renamed since the links were saved, in their reprs: the MLP's sizes were ModelSpec (issue 57: ModelSpec
# is now the type every family's spec meets). The same values, field by field.
RENAMED = {"model=ModelSpec(": "model=MLPSpec("}


def opened(query: dict, saved: str) -> tuple[dict, list, str]:
    """What ``query`` opens to now: the settings, the problems, and the configuration's repr — a model field
    added since the link was saved (absent from ``saved``) must hold its default, and is left out."""
    updates, problems = links.from_query(query)
    try:
        config = config_state.config_from_state({**config_state.defaults(), **updates})
    except sl.ConfigError as error:
        return json.loads(json.dumps(updates)), problems, f"ConfigError({error.field!r}): {error}"
    text = repr(config)
    for field in dataclasses.fields(config.model):
        if f"{field.name}=" not in saved:
            assert getattr(config.model, field.name) == field.default, field.name
            text = text.replace(f", {field.name}={getattr(config.model, field.name)!r}", "")
    return json.loads(json.dumps(updates)), problems, text


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_a_saved_link_opens_to_the_same_configuration(case):
    saved = case["config"]
    for before, now in RENAMED.items():
        saved = saved.replace(before, now)
    updates, problems, config = opened(case["query"], saved)
    assert config == saved
    added = {key for key in updates if key not in case["updates"]}  # a model size added since (at its default)
    assert all(f"{key}=" not in case["config"] and key in config_state.defaults() for key in added), added
    assert {k: v for k, v in updates.items() if k not in added} == case["updates"]
    # the same parts reported (their wording and order may change)
    assert sorted(p.split("=")[0].split(" ")[0] for p in problems) == sorted(
        p.split("=")[0].split(" ")[0] for p in case["problems"]
    )


def test_the_saved_links_cover_what_a_link_can_say():
    """The data is not thin: every kind of setting a link carries appears in some saved link."""
    keys = {key for case in CASES for key in case["query"]}
    assert {"target", "mesh", "axes", "type", "model", "preset", "rules", "ovr", "opt", "focus", "solved"} <= keys
    assert {"size", "mb", "schedule", "lr", "decay", "steps", "batch", "experts", "layers", "hidden"} <= keys
    assert sum("ConfigError" not in case["config"] for case in CASES) >= 60
