"""The rules of a run as a setting: a preset of the model family, or custom rules — the rules table's
``rule_*`` / ``ovr_*`` session keys, a link's ``rules`` and ``ovr``, ``--rule`` and ``--override``.
A row of :data:`sharding_lab.training.run_settings.RUN_SETTINGS` like any other (:mod:`.setting_kinds`).
"""

from __future__ import annotations

import dataclasses
import itertools
import re

from ..errors import ConfigError
from ..models import FAMILIES
from ..models import family as model_family
from ..models import family_of as model_family_of
from ..sharding.mesh import MeshSpec
from ..sharding.rules import Rules, bind_preset, parse_target, target_text
from .setting_groups import device_count
from .setting_kinds import CUSTOM, LinkReading, Setting, shown

FROM_RULES = "(rule)"  # an override dimension that follows the rules
REPLICATED = "replicated"
RULE_TARGET = re.compile(r"(replicated|[A-Za-z_][A-Za-z0-9_]{0,31}(\+[A-Za-z_][A-Za-z0-9_]{0,31})*)\Z")
OVERRIDE_NAME = re.compile(r"[a-z_]+[0-9]*\.[0-9]\Z")


def target_options(axes: tuple[str, ...]) -> list[str]:
    """What a rule may say on this mesh: replicated, one axis, or two or three axes together."""
    options = [REPLICATED, *axes]
    options += ["+".join(pair) for pair in itertools.permutations(axes, 2)]
    if len(axes) == 3:
        options.append("+".join(axes))
    return options


def to_target(option: str):
    return None if option in (FROM_RULES, None) else parse_target(option)


def override_keys(fam, model) -> list[tuple[str, int, str]]:
    """(rule name, dimension, state key) of every per-parameter override widget."""
    seen, keys = set(), []
    for array in fam.parameters(model).values():
        if array.rule_name in seen:
            continue
        seen.add(array.rule_name)
        keys += [(array.rule_name, dim, f"ovr_{array.rule_name}_{dim}") for dim in range(len(array.shape))]
    return keys


def custom_rules(state, fam, mesh: MeshSpec, model) -> Rules:
    """The rules the ``rule_*`` and ``ovr_*`` keys say (a value the mesh no longer has counts as
    replicated / no override)."""
    valid = set(target_options(mesh.axes))
    rules = Rules(
        {a: to_target(state.get(f"rule_{a}")) if state.get(f"rule_{a}") in valid else None for a in fam.logical_axes}
    )
    by_name = {a.rule_name: a.logical_axes for a in fam.parameters(model).values()}
    for name, logical in by_name.items():
        dims = [state.get(f"ovr_{name}_{d}", FROM_RULES) for d in range(len(logical))]
        dims = [d if d in valid else FROM_RULES for d in dims]
        if any(d != FROM_RULES for d in dims):
            base = rules.targets(name, logical)
            rules = rules.with_override(
                name, tuple(base[i] if d == FROM_RULES else to_target(d) for i, d in enumerate(dims))
            )
    return rules


def rule_widget_values(rules: Rules, fam, model) -> dict[str, str]:
    """The ``rule_*`` / ``ovr_*`` values that show ``rules`` in the rules table."""
    values = {f"rule_{a}": target_text(rules.target(a)) for a in fam.logical_axes}
    for name, dim, key in override_keys(fam, model):
        override = rules.override_for(name)
        values[key] = FROM_RULES if override is None or dim >= len(override) else target_text(override[dim])
    return values


def pipelined(state) -> bool:
    """Whether the rules in ``state`` map the blocks (logical axis ``layers``) to a mesh axis: the
    preset's rule, or the rules table's when the rules are custom."""
    fam = model_family(state.get("model", "mlp"))
    if "layers" not in fam.logical_axes:
        return False
    if state["preset"] == CUSTOM:
        return state.get("rule_layers") not in (None, REPLICATED, FROM_RULES)
    preset = fam.presets.get(state["preset"])
    return preset is not None and preset.logical.get("layers") is not None


def preset_rules(preset: str, mesh: MeshSpec, model) -> Rules:
    """The family's preset bound to ``mesh``, keeping only the overrides of arrays ``model`` has:
    a preset names every array its family can have (the transformer's ``pos`` or ``unembed``,
    absent from some sizes), and an override of an absent array would be refused."""
    rules = bind_preset(preset, mesh, model_family_of(model).name)
    names = {a.rule_name for a in model_family_of(model).parameters(model).values()}
    return Rules(rules.logical(), tuple((n, d) for n, d in rules.overrides if n in names))


def _pair(text: str, what: str) -> tuple[str, str]:
    if "=" not in text:
        raise ConfigError(f"{what} {shown(text)} is not NAME=VALUE, e.g. mlp=model", "rules")
    name, value = text.split("=", 1)
    return name.strip(), value.strip()


@dataclasses.dataclass(frozen=True)
class Layout(Setting):
    """Where arrays go: a preset of the model family (``--preset fsdp``, a link's ``preset``), or custom rules —
    ``--preset none`` with ``--rule`` and ``--override``; a link's ``preset=custom`` with ``rules`` and ``ovr``;
    the rules table's ``rule_*`` and ``ovr_*`` keys."""

    def read(self, config):
        return config.preset

    def add_option(self, parser) -> None:
        parser.add_argument(
            self.flag,
            default=None,
            help="a preset of the model family ("
            + "; ".join(f"{name}: {', '.join(f.presets)}" for name, f in FAMILIES.items())
            + "), or 'none'; default: the family's first",
        )
        parser.add_argument(
            "--rule",
            action="append",
            default=[],
            metavar="LOGICAL=AXIS",
            help="override a logical rule, e.g. mlp=model, embed=none, mlp=model+data",
        )
        parser.add_argument(
            "--override",
            action="append",
            default=[],
            metavar="ARRAY=D0:D1",
            help="per-parameter spec, e.g. w2=model:none",
        )

    def from_args(self, args, values, defaults) -> None:
        fam, model = values["family"], values["model"]
        mesh = MeshSpec(values["mesh.shape"], values["mesh.axes"], values["mesh.axis_type"])
        preset = getattr(args, self.dest) or defaults(self.name)
        preset = None if preset.lower() == "none" else preset
        rules = None
        if args.rule or args.override or preset is None:
            mesh.validate(device_count(values["target"]))
            rules = preset_rules(preset or REPLICATED, mesh, model)
            for text in args.rule:
                axis, value = _pair(text, "rule")
                if axis not in fam.logical_axes:
                    raise ConfigError(
                        f"rule {shown(text)}: logical axis must be one of {', '.join(fam.logical_axes)}", "rules"
                    )
                rules = rules.with_rule(axis, parse_target(value))
            for text in args.override:
                array, value = _pair(text, "override")
                rules = rules.with_override(array, tuple(parse_target(v) for v in value.split(":")))
            preset = None
        values[self.name], values["rules"] = preset, rules

    def to_args(self, config) -> list[str]:
        if config.preset is not None:
            return [self.flag, config.preset]
        rules, fam = config.resolved_rules(), config.family
        return (
            [self.flag, "none"]
            + [f"--rule={axis}={target_text(rules.target(axis))}" for axis in fam.logical_axes]
            + [f"--override={name}={':'.join(target_text(t) for t in dims)}" for name, dims in rules.overrides]
        )

    def edits(self, run, now) -> list[tuple[str, str, str]]:
        before, after = (f"preset {c.preset}" if c.preset else "custom rules" for c in (run, now))
        return [] if before == after else [("rules", before, after)]

    def partial_args(self, partial, config) -> list[str]:
        """The preset, and the per-parameter overrides a partial configuration puts on it."""
        if self.name not in partial:
            return []
        overrides = partial.get("overrides", {})
        return [self.flag, partial[self.name]] + [
            f"--override={name}={':'.join(target_text(t) for t in dims)}" for name, dims in overrides.items()
        ]

    def to_state(self, config, piped) -> dict:
        # The rules table shows the rules either way: a preset's, bound to this mesh, or the custom ones.
        return {
            self.link: config.preset if config.preset is not None else CUSTOM,
            **rule_widget_values(config.resolved_rules(), config.family, config.model),
        }

    def from_state(self, state, values, piped) -> None:
        preset = None if state[self.link] == CUSTOM else state[self.link]
        rules = None
        if preset is None:
            mesh = MeshSpec(values["mesh.shape"], values["mesh.axes"], values["mesh.axis_type"])
            mesh.validate(device_count(state.get("target")))
            rules = custom_rules(state, values["family"], mesh, values["model"])
        values[self.name], values["rules"] = preset, rules

    def check_state(self, state, context) -> None:
        pass

    def state_keys(self, state) -> tuple[str, ...]:
        return (self.link, *(k for k in state.keys() if str(k).startswith(("rule_", "ovr_"))))

    def first_state(self) -> dict:
        return {self.link: FAMILIES["mlp"].default_preset}

    def link_keys(self) -> tuple[str, ...]:
        return (self.link, "rules", "ovr")

    def to_query(self, state, piped) -> dict:
        query = {self.link: str(state[self.link])}
        if state[self.link] != CUSTOM:
            return query
        fam = model_family(state.get("model", "mlp"))
        query["rules"] = ",".join(f"{a}:{state.get(f'rule_{a}', REPLICATED)}" for a in fam.logical_axes)
        overrides = [
            f"{key[4:].rsplit('_', 1)[0]}.{key.rsplit('_', 1)[1]}:{value}"
            for key, value in sorted(state.items())
            if str(key).startswith("ovr_") and value != FROM_RULES
        ]
        if overrides:
            query["ovr"] = ",".join(overrides)
        return query

    def from_query(self, link: LinkReading, context) -> None:
        fam, query = context["family"], link.query
        if self.link in query:
            if query[self.link] in fam.presets or query[self.link] == CUSTOM:
                link.updates[self.link] = query[self.link]
            else:
                link.bad(self.link, f"one of {', '.join(fam.presets)} or custom")
        if link.updates.get(self.link) != CUSTOM:
            return
        axis = re.compile(rf"({'|'.join(map(re.escape, fam.logical_axes))})\Z")
        for key, prefix, pattern in (("rules", "rule_", axis), ("ovr", "ovr_", OVERRIDE_NAME)):
            for item in filter(None, query.get(key, "").split(",")):
                name, _, target = item.partition(":")
                if pattern.match(name) and RULE_TARGET.match(target):
                    link.updates[prefix + name.replace(".", "_")] = target
                else:
                    link.problems.append(f"{key} entry {shown(item)} ignored: expected NAME:AXIS")

    def to_json(self, config) -> dict:
        rules = config.resolved_rules()
        return {
            self.link: config.preset,
            "rules": {
                **{k: _jsonable(rules.target(k)) for k in config.family.logical_axes},
                "overrides": {n: [_jsonable(t) for t in d] for n, d in rules.overrides},
            },
        }

    def from_json(self, data, values) -> None:
        values[self.name], values["rules"] = data[self.link], None
        if data[self.link] is None:
            rules = data["rules"]
            values["rules"] = Rules(
                {axis: _from_json(t) for axis, t in rules.items() if axis != "overrides"},
                tuple((name, tuple(_from_json(t) for t in dims)) for name, dims in rules["overrides"].items()),
            )


def _jsonable(target):
    return list(target) if isinstance(target, tuple) else target


def _from_json(target):
    return tuple(target) if isinstance(target, list) else target
