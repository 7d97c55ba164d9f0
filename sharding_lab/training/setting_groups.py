"""The run settings made of several values: the mesh's shape and names, the model (its family and sizes); the
rules (a preset, or the rules table) are in :mod:`.layout_setting`. Each is a row of the table like any other setting
(:mod:`.setting_kinds` has the methods); what is special about them is here, in one place each.

A session keeps them under several keys: ``n_axes``, ``size_i``, ``name_i``; ``model`` and the family's size
keys (:func:`size_key`).
"""

from __future__ import annotations

import argparse
import dataclasses
import re

from ..errors import ConfigError
from ..hardware import targets
from ..hardware.devices import available_count
from ..models import FAMILIES, ChoiceField
from ..models import family as model_family
from ..models.hf_config import load_hf_config
from ..models.plugins import module_of
from ..sharding.mesh import AXIS_NAME, default_axes, parse_axis_names, parse_mesh_shape
from .setting_kinds import CUSTOM, LinkReading, Setting, read_int

MAX_AXES = 3
MAX_HOST_AXIS_SIZE = 64  # the simulated host has at most 64 devices
MESH_PART = re.compile(r"[0-9]{1,6}\Z")  # one axis size in a link: ASCII digits, bounded


def max_axis_size(target: str | None) -> int:
    """The largest mesh axis the app offers: the target's device count, or the simulated host's cap."""
    parsed = targets.parse(target or targets.CPU)
    return parsed.devices if parsed.compile_only else MAX_HOST_AXIS_SIZE


def device_count(target: str | None) -> int:
    """How many devices a mesh may use: the target's (all of them) or the simulated host's."""
    parsed = targets.parse(target or targets.CPU)
    return parsed.devices if parsed.compile_only else available_count()


@dataclasses.dataclass(frozen=True)
class MeshShape(Setting):
    """The mesh's axis sizes: ``--mesh 2x4``, ``mesh=2x4``, state ``n_axes`` and ``size_0`` … ``size_2``."""

    default: str = "2x4"

    def read(self, config):
        return config.mesh.shape

    def add_option(self, parser) -> None:
        parser.add_argument(self.flag, default=self.default, help=self.described())

    def edits(self, run, now) -> list[tuple[str, str, str]]:  # the mesh's shape and names, as one
        before, after = run.mesh.label(), now.mesh.label()
        return [] if before == after else [("mesh", before, after)]

    def from_args(self, args, values, defaults) -> None:
        values[self.name] = parse_mesh_shape(getattr(args, self.dest))

    def to_args(self, config) -> list[str]:
        return [self.flag, "x".join(map(str, config.mesh.shape))]

    def to_state(self, config, piped) -> dict:
        return {"n_axes": len(config.mesh.shape), **{f"size_{i}": int(s) for i, s in enumerate(config.mesh.shape)}}

    def from_state(self, state, values, piped) -> None:
        values[self.name] = tuple(int(state[f"size_{i}"]) for i in range(int(state["n_axes"])))

    def check_state(self, state, context) -> None:
        largest = max_axis_size(state.get("target"))
        for i in range(int(state.get("n_axes", 0))):
            if not 1 <= state[f"size_{i}"] <= largest:
                raise ConfigError(
                    f"Size {i + 1} = {state[f'size_{i}']} is outside what the sidebar allows (1 to {largest})", "mesh"
                )

    def state_keys(self, state) -> tuple[str, ...]:
        return ("n_axes", *(f"size_{i}" for i in range(MAX_AXES)))

    def first_state(self) -> dict:  # a third axis's size waits in size_2 until the mesh has one
        return {"n_axes": 2, "size_0": 2, "size_1": 4, "size_2": 2}

    def to_query(self, state, piped) -> dict:
        return {self.link: "x".join(str(state[f"size_{i}"]) for i in range(int(state["n_axes"])))}

    def from_query(self, link: LinkReading, context) -> None:
        if self.link not in link.query:
            return
        sizes = [p for p in re.split(r"[x×,]", link.query[self.link][:200]) if p]
        largest = max_axis_size(link.updates.get("target"))  # what the widgets allow
        if (
            not (1 <= len(sizes) <= MAX_AXES and all(MESH_PART.match(p) and 1 <= int(p) <= largest for p in sizes))
            or len(link.query[self.link]) > 200
        ):
            link.bad(self.link, f"expected 1–{MAX_AXES} sizes from 1 to {largest}, like 2x4")
            return
        link.updates["n_axes"] = len(sizes)
        link.updates.update({f"size_{i}": int(p) for i, p in enumerate(sizes)})
        link.updates.update({f"name_{i}": name for i, name in enumerate(default_axes(len(sizes)))})

    def to_json(self, config) -> dict:
        return {self.link: list(config.mesh.shape)}

    def from_json(self, data, values) -> None:
        values[self.name] = tuple(data[self.link])


@dataclasses.dataclass(frozen=True)
class AxisNames(Setting):
    """The mesh's axis names: ``--axes data,model``, ``axes=data,model``, state ``name_0`` … ``name_2``."""

    def read(self, config):
        return config.mesh.axes

    def add_option(self, parser) -> None:
        parser.add_argument(self.flag, default=None, help=self.described())

    def from_args(self, args, values, defaults) -> None:
        given = getattr(args, self.dest)
        values[self.name] = parse_axis_names(given) if given else default_axes(len(values["mesh.shape"]))

    def to_args(self, config) -> list[str]:
        return [self.flag, ",".join(config.mesh.axes)]

    def to_state(self, config, piped) -> dict:
        return {f"name_{i}": name for i, name in enumerate(config.mesh.axes)}

    def from_state(self, state, values, piped) -> None:
        values[self.name] = tuple(str(state[f"name_{i}"]).strip() for i in range(int(state["n_axes"])))

    def check_state(self, state, context) -> None:
        pass

    def state_keys(self, state) -> tuple[str, ...]:
        return tuple(f"name_{i}" for i in range(MAX_AXES))

    def first_state(self) -> dict:
        return {"name_0": "data", "name_1": "model", "name_2": "z"}

    def to_query(self, state, piped) -> dict:
        return {self.link: ",".join(str(state[f"name_{i}"]) for i in range(int(state["n_axes"])))}

    def from_query(self, link: LinkReading, context) -> None:
        if self.link not in link.query:
            return
        names = link.query[self.link].split(",")
        # a link without a mesh opens on the default one: its names are for the default's axes
        n = link.updates.get("n_axes", len(parse_mesh_shape(MeshShape.default)))
        if len(names) != n or not all(AXIS_NAME.match(name) for name in names):
            link.bad(self.link, "give one name per mesh axis: letters, digits, '_'")
        else:
            link.updates.update({f"name_{i}": name for i, name in enumerate(names)})

    def to_json(self, config) -> dict:
        return {self.link: list(config.mesh.axes)}

    def from_json(self, data, values) -> None:
        values[self.name] = tuple(data[self.link])


@dataclasses.dataclass(frozen=True)
class Family(Setting):
    """The model family: ``--model transformer`` (``--family MODULE`` imports one from outside first), a link's
    ``model`` (left out for the MLP: links made before there were other models stay as they were)."""

    default: str = "mlp"

    def read(self, config):
        return config.family

    def add_option(self, parser) -> None:
        parser.add_argument(
            "--family",
            action="append",
            default=[],
            metavar="MODULE",
            help="import this module first (e.g. my_pkg.my_model): the model families it "
            "registers join --model (docs/own-model.md)",
        )
        parser.add_argument(self.flag, choices=list(FAMILIES), default=self.default, help=self.described())

    def from_args(self, args, values, defaults) -> None:
        values[self.name] = model_family(
            "transformer" if getattr(args, "hf_config", None) else getattr(args, self.dest)
        )

    def note(self, config) -> str:
        return config.family.name

    def to_args(self, config) -> list[str]:
        module = module_of(config.family)
        return (["--family", module] if module else []) + [self.flag, config.family.name]

    def to_state(self, config, piped) -> dict:
        return {self.link: config.family.name}

    def from_state(self, state, values, piped) -> None:
        values[self.name] = model_family(state.get(self.link, self.default))

    def check_state(self, state, context) -> None:
        pass

    def state_keys(self, state) -> tuple[str, ...]:
        return (self.link,)

    def first_state(self) -> dict:
        return {self.link: self.default}

    def to_query(self, state, piped) -> dict:
        name = model_family(state.get(self.link, self.default)).name
        return {} if name == self.default else {self.link: name}

    def from_query(self, link: LinkReading, context) -> None:
        if self.link not in link.query:
            return
        name = link.query[self.link]
        if name not in FAMILIES:
            link.bad(self.link, f"one of {', '.join(FAMILIES)}")
            return
        link.updates[self.link] = name
        context["family"] = FAMILIES[name]
        # As choosing the model in the sidebar does: its preset and training defaults, unless the link says.
        link.updates.update(context["defaults_in_state"](FAMILIES[name]))

    def to_json(self, config) -> dict:
        return {"model_family": config.family.name}

    def from_json(self, data, values) -> None:
        values[self.name] = model_family(data["model_family"])


def size_key(field: str) -> str:
    """The state (and link) key of a model size; the MLP's ``hidden_layers`` was always ``hidden``."""
    return "hidden" if field == "hidden_layers" else field


def every_size_field() -> dict[str, object]:
    """Every family's size fields by state key (a key two families share keeps the first's)."""
    fields = {}
    for fam in FAMILIES.values():
        for f, s in fam.size_fields.items():
            fields.setdefault(size_key(f), s)
    return fields


def valid_value(field, value) -> bool:
    """Whether a sizes widget can hold ``value`` (a choice it offers, or a number in its range)."""
    if isinstance(field, ChoiceField):
        return value in field.choices
    return isinstance(value, (int, float)) and not isinstance(value, bool) and field.low <= value <= field.high


def field_value(field, value):
    return str(value) if isinstance(field, ChoiceField) else int(value)


def named_size_values(fam, name: str) -> dict:
    """The size keys that show the family's named size ``name`` (remat kept: it is how to train, not a size)."""
    spec = fam.named_spec(name)
    return {size_key(f): getattr(spec, f) for f in fam.size_fields if f != "remat"}


def _size_dest(flag: str) -> str:
    return "size_" + flag.lstrip("-").replace("-", "_")


@dataclasses.dataclass(frozen=True)
class ModelSizes(Setting):
    """The model's sizes: each family's own fields (:class:`sharding_lab.models.SizeField`, declared with the
    family), a named size (``--size llama3-8b``, a link's ``size``) and the sizes given on top of it."""

    def read(self, config):
        return config.model

    def add_option(self, parser) -> None:
        parser.add_argument(
            self.flag,
            default=None,
            metavar="NAME",
            help="a named size of the model family ("
            + "; ".join(f"{name}: {', '.join(f.named_sizes)}" for name, f in FAMILIES.items() if f.named_sizes)
            + "); size options given as well change it",
        )
        parser.add_argument(
            "--hf-config",
            default=None,
            metavar="PATH",
            help="a Hugging Face config.json (Llama, Mistral, Mixtral, Qwen 2, GPT-2): the transformer with its "
            "shapes; size options given as well change it (docs/transformer.md)",
        )
        self.add_size_options(parser)

    def add_size_options(self, parser) -> None:
        """Every family's size options (after the optimizer's, where ``--help`` always listed them)."""
        flags = set()
        for fam in FAMILIES.values():
            for field, size in fam.size_fields.items():
                if size.flag in flags:
                    continue
                flags.add(size.flag)
                default = getattr(fam.Spec(), field)
                if isinstance(size, ChoiceField):
                    parser.add_argument(
                        size.flag,
                        choices=size.choices,
                        default=None,
                        dest=_size_dest(size.flag),
                        help=f"{fam.name}: {size.help or size.label} (default {default})",
                    )
                else:
                    parser.add_argument(
                        size.flag,
                        type=self._size_argument(size),
                        default=None,
                        dest=_size_dest(size.flag),
                        help=f"{fam.name}: {size.label} (default {default})",
                    )

    @staticmethod
    def _size_argument(size):
        def parse(text: str) -> int:
            try:
                return read_int(text, size.label, "model")
            except ConfigError as error:
                raise argparse.ArgumentTypeError(str(error)) from None

        return parse

    def from_args(self, args, values, defaults) -> None:
        """The named size (``--size``), a Hugging Face config (``--hf-config``) or the family's defaults, then
        every size option given on top (``--size llama3-8b --layers 2``: Llama 3 8B's shapes, two blocks)."""
        fam = values["family"]
        named = getattr(args, self.dest, None)
        if getattr(args, "hf_config", None):
            if named:
                raise ConfigError("give --size or --hf-config, not both: each sets the model's shapes", "model")
            base = load_hf_config(args.hf_config, getattr(args, _size_dest("--seq"), None)).spec
        else:
            base = fam.named_spec(named) if named else fam.Spec()
        sizes = {
            field: getattr(args, _size_dest(size.flag))
            for field, size in fam.size_fields.items()
            if getattr(args, _size_dest(size.flag), None) is not None
        }
        model = dataclasses.replace(base, **sizes)
        model.validate()  # before a preset's rules read the model's parameters
        values[self.name] = model

    def to_args(self, config) -> list[str]:
        """A named size as ``--size NAME`` and only the options that differ from it."""
        fam = config.family
        size = fam.size_name(config.model)
        base = fam.named_spec(size) if size else None
        args = [self.flag, size] if size else []
        for field, option in fam.size_fields.items():
            value = getattr(config.model, field)
            if base is None or value != getattr(base, field):
                args += [option.flag, str(value)]
        return args

    def edits(self, run, now) -> list[tuple[str, str, str]]:
        """The sizes that differ (a model of another family is the family's edit), not the Spec's repr."""
        if run.family.name != now.family.name or run.model == now.model:
            return []
        changed = [f for f in run.family.size_fields if getattr(run.model, f) != getattr(now.model, f)]
        return [("sizes", *(", ".join(f"{f} {getattr(c.model, f)}" for f in changed) for c in (run, now)))]

    def partial_args(self, partial, config) -> list[str]:
        """Only the sizes the partial configuration gives."""
        fields = config.family.size_fields
        return [
            word for field, value in partial.get(self.name, {}).items() for word in (fields[field].flag, str(value))
        ]

    def to_state(self, config, piped) -> dict:
        fam = config.family
        return {size_key(f): field_value(s, getattr(config.model, f)) for f, s in fam.size_fields.items()}

    def from_state(self, state, values, piped) -> None:
        fam = values["family"]
        values[self.name] = fam.Spec(**{f: field_value(s, state[size_key(f)]) for f, s in fam.size_fields.items()})

    def check_state(self, state, context) -> None:
        for key, size in every_size_field().items():
            if key in state and not isinstance(size, ChoiceField) and not size.low <= state[key] <= size.high:
                raise ConfigError(
                    f"{size.label} = {state[key]} is outside what the sidebar allows ({size.low} to {size.high})",
                    "model",
                )

    def state_keys(self, state) -> tuple[str, ...]:
        return ("named_size", *every_size_field())

    def first_state(self) -> dict:
        """A custom size, each key at its family's Spec default (a key two families share keeps the first's)."""
        sizes = {}
        for fam in FAMILIES.values():
            for f in fam.size_fields:
                sizes.setdefault(size_key(f), getattr(fam.Spec(), f))
        return {"named_size": CUSTOM, **sizes}

    def to_query(self, state, piped) -> dict:
        fam = model_family(state.get("model", "mlp"))
        query = {}
        if fam.named_sizes:  # the name says what the sizes below are (they are written all the same)
            try:
                name = fam.size_name(
                    fam.Spec(**{f: field_value(s, state[size_key(f)]) for f, s in fam.size_fields.items()})
                )
            except (ConfigError, TypeError, ValueError):
                name = None
            if name is not None:
                query[self.link] = name
        for f, s in fam.size_fields.items():
            value = state[size_key(f)]
            query[size_key(f)] = str(value) if isinstance(s, ChoiceField) else str(int(value))
        return query

    def link_keys(self) -> tuple[str, ...]:
        return (self.link, *every_size_field())

    def from_query(self, link: LinkReading, context) -> None:
        fam, query = context["family"], link.query
        if self.link in query:  # a named size sets the sizes; the link's own size values (below) then win
            if query[self.link] in fam.named_sizes:
                link.updates.update(named_size_values(fam, query[self.link]))
            else:
                link.bad(
                    self.link,
                    f"one of {', '.join(fam.named_sizes)}"
                    if fam.named_sizes
                    else f"the {fam.name} model has no named sizes",
                )
        for key, size in every_size_field().items():
            if key not in query:
                continue
            if isinstance(size, ChoiceField):
                if query[key] in size.choices:
                    link.updates[key] = query[key]
                else:
                    link.bad(key, f"one of {', '.join(size.choices)}")
                continue
            try:
                value = read_int(query[key], size.label, "model")
            except ConfigError:
                link.bad(key, "not a number")
                continue
            if size.low <= value <= size.high:
                link.updates[key] = value
            else:
                link.bad(key, f"must be between {size.low} and {size.high}")

    def to_json(self, config) -> dict:
        return {"model": dataclasses.asdict(config.model)}

    def from_json(self, data, values) -> None:
        values[self.name] = values["family"].Spec(**data["model"])
