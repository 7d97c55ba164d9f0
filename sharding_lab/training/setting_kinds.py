"""How each kind of run setting is read and written: a number, a word, and the settings made of several values.

One class per kind; each instance is a row of :data:`sharding_lab.training.run_settings.RUN_SETTINGS`, and
every medium a configuration travels through is a method, so the converters loop over the table and name no
setting: the command line (``add_option``, ``from_args``, ``to_args``), a session's state (``to_state``,
``from_state``), a share link (``to_query``, ``from_query``) and JSON (``to_json``). Text from outside is
read with explicit patterns — ASCII digits, bounded lengths, anchored at the true end (``\\Z``, not ``$``,
which lets a trailing newline through) — and what does not fit is a :class:`ConfigError` naming the
setting's label, never a ``ValueError`` from ``int()``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from typing import Callable

from ..errors import ConfigError

INTEGER = re.compile(r"[+-]?[0-9]{1,30}\Z")  # ASCII digits only: str.isdigit() also takes '²' and '٣'
DECIMAL = re.compile(r"[+-]?(?:[0-9]{1,30}\.?[0-9]{0,30}|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,4})?\Z")
NOT_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)\Z", re.IGNORECASE)  # read, then refused by the range
CUSTOM = "custom"  # what a preset of edited rules, and a size of typed numbers, is called
SHOWN_CHARS = 40  # the longest piece of a user's text an error repeats


def shown(text) -> str:
    """``text`` as an error quotes it: repr'd, cut to :data:`SHOWN_CHARS` characters."""
    text = str(text)
    return repr(text) if len(text) <= SHOWN_CHARS else repr(text[:SHOWN_CHARS]) + f"… ({len(text):,} characters)"


def read_int(text: str, label: str, field: str) -> int:
    """A whole number typed as ASCII digits (an optional sign); ConfigError naming ``label`` otherwise."""
    if not isinstance(text, str) or not INTEGER.match(text):
        raise ConfigError(f"{label} must be a whole number written with the digits 0-9, not {shown(text)}", field)
    return int(text)


def read_float(text: str, label: str, field: str) -> float:
    """A decimal number (``0.01``, ``1e-3``; ``nan`` and ``inf`` are read, for the range to refuse)."""
    if not isinstance(text, str) or not (DECIMAL.match(text) or NOT_FINITE.match(text)):
        raise ConfigError(f"{label} must be a number like 0.01 or 1e-3, not {shown(text)}", field)
    return float(text)


class LinkReading:
    """One link being read: its query, the session settings it gives, the parts that were not understood."""

    def __init__(self, query: dict[str, str]):
        self.query, self.updates, self.problems = query, {}, []

    def bad(self, key: str, why: str) -> None:
        self.problems.append(f"{key}={shown(self.query[key])} ignored: {why}")


@dataclasses.dataclass(frozen=True)
class Setting:
    """What every row of the table has: the name its value goes by (a LabConfig attribute; ``mesh.X`` for the
    mesh's), the widget's label, the command-line option, the link key and its older aliases, help."""

    name: str
    label: str
    flag: str
    link: str
    help: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def link_keys(self) -> tuple[str, ...]:
        return (self.link, *self.aliases) if self.link else ()

    def described(self) -> str:
        """The command line's help: ``help`` with ``{default}`` filled in from the row's default, so the
        help never repeats a default the row declares."""
        return self.help.format(default=getattr(self, "default", None))

    def fields(self) -> tuple[str, ...]:
        """The error fields (ConfigError.field) that name this setting."""
        return (self.name, self.name.removeprefix("mesh."), self.link)

    def note(self, config) -> str | None:
        """The setting's value as a page notes an edit of it (None: a page never shows it)."""
        return None

    def edits(self, run, now) -> list[tuple[str, str, str]]:
        """(name, the run's value, the value now) when a learner changed this setting while ``run`` trains."""
        before, after = self.note(run), self.note(now)
        return [] if before == after else [(self.label.lower(), before, after)]

    def partial_args(self, partial: dict, config) -> list[str]:
        """The options that say this setting when a partial configuration names it (else none)."""
        return self.to_args(config) if self.name in partial else []

    def in_link(self, query: dict) -> str | None:
        """The link key this setting was given under (its own, else an older alias), or None."""
        return next((key for key in self.link_keys() if key in query), None)


@dataclasses.dataclass(frozen=True)
class Value(Setting):
    """A setting that is one number or one word, kept in the session under ``state``.

    ``kind``: ``int``, ``float`` or ``word``. ``low``/``high``: what the app's widget and a link allow.
    ``cap``: the most any configuration may hold, where that is more than ``high`` — the command line's
    range, which :func:`sharding_lab.training.config.plan` enforces (a batch of 65,536 compiles for a TPU
    slice; the app's widget, which also trains on this host, stops at ``high``). ``choices``: the words
    allowed (a function: the registries fill in at import). ``words``: how the widget shows a value (the axis
    type's ``auto`` is ``Auto``). ``family_default``: a model family's ``train_defaults`` may replace the
    default. ``pipeline_only``: shown and linked only for a pipelined layout, else the default.
    ``app_default``: the widget's first value where it differs. ``in_app``: False for command-line-only
    settings. ``omit``: a value a link leaves out. ``canonical``: the value's one spelling (a target's name).
    ``json``: its key in ``LabConfig.to_json`` (None: not there). ``page``: where the app draws its widget
    (``model``: the sidebar's model section; ``pipeline``: under a pipelined preset; ``train``: the Train
    page; None: a widget of its own), with ``hint`` (the widget's help; a function for one built from a
    registry), ``titles`` (how a choice is shown) and ``widget`` (the box's other options: step, format)."""

    state: str = ""
    kind: str = "int"
    default: object = None
    low: float | None = None
    high: float | None = None
    cap: float | None = None
    choices: Callable[[], tuple[str, ...]] | None = None
    words: tuple[tuple[str, str], ...] = ()
    family_default: bool = False
    pipeline_only: bool = False
    app_default: object = None
    in_app: bool = True
    omit: object = None
    canonical: Callable[[str], str] | None = None
    json: str | None = None
    page: str | None = None
    hint: str | Callable[[], str] = ""
    titles: tuple[tuple[str, str], ...] = ()
    widget: tuple[tuple[str, object], ...] = ()

    def fields(self) -> tuple[str, ...]:
        return (*super().fields(), self.state)

    # --- values ---------------------------------------------------------------------------------

    @property
    def most(self):
        """The largest value any configuration may hold (``cap``, else ``high``)."""
        return self.cap if self.cap is not None else self.high

    def widget_options(self) -> dict:
        """What the app's widget needs besides label, range or choices and key: help, format, step."""
        options = dict(self.widget)
        hint = self.hint() if callable(self.hint) else self.hint
        if hint:
            options["help"] = hint
        if self.titles:
            options["format_func"] = lambda choice: dict(self.titles).get(choice, choice)
        return options

    def first_value(self):
        """The value a new session's widget starts at."""
        return self.app_default if self.app_default is not None else self.shown(self.default)

    def shown(self, value):
        return dict(self.words).get(value, value)

    def unshown(self, value):
        return {word: v for v, word in self.words}.get(value, value) if self.words else value

    def parse(self, text: str):
        """Text (a link's, the command line's) → the value; ConfigError naming the label."""
        if self.kind == "int":
            return read_int(text, self.label, self.name)
        if self.kind == "float":
            return read_float(text, self.label, self.name)
        if self.canonical is not None:
            return self.canonical(text)
        if self.choices is not None and text not in self.choices():
            raise ConfigError(f"{self.label} must be one of {', '.join(self.choices())}, not {shown(text)}", self.name)
        return text

    def text(self, value) -> str:
        if self.kind == "float":
            return repr(float(value))
        return str(int(value)) if self.kind == "int" else str(value)

    def check_range(self, value) -> None:
        """ConfigError when a number is outside what the app's widget allows."""
        if self.low is not None and not (math.isfinite(value) and self.low <= value <= self.high):
            raise ConfigError(
                f"{self.label} = {value} is outside what the sidebar allows ({self.low} to {self.high})", self.name
            )

    def read(self, config):
        return _attr(config, self.name)

    def note(self, config) -> str | None:
        if not self.in_app:
            return None
        if self.pipeline_only and not config.stage_axis:
            return "none"
        value = self.read(config)
        return f"{value:g}" if self.kind == "float" else f"{value:,}" if self.kind == "int" else str(value)

    # --- the command line -----------------------------------------------------------------------

    def add_option(self, parser: argparse.ArgumentParser) -> None:
        options = {"default": None if self.family_default else self.default, "help": self.described() or None}
        if self.kind != "word":
            options["type"] = self._argument
        elif self.choices is not None and self.canonical is None:
            options["choices"] = list(self.choices())
        parser.add_argument(self.flag, **options)

    def _argument(self, text: str):
        try:
            return self.parse(text)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    def from_args(self, args, values: dict, defaults: Callable) -> None:
        given = getattr(args, self.dest, None)
        if given is None:
            given = defaults(self.name)
        values[self.name] = self.canonical(given) if self.canonical else given

    def to_args(self, config) -> list[str]:
        return [self.flag, self.text(self.read(config))]

    # --- a session's state ----------------------------------------------------------------------

    def to_state(self, config, piped: bool) -> dict:
        if not self.in_app or (self.pipeline_only and not piped):
            return {}
        value = self.read(config)
        return {self.state: self.shown(int(value) if self.kind == "int" else value)}

    def from_state(self, state, values: dict, piped: bool) -> None:
        if not self.in_app or (self.pipeline_only and not piped):
            values[self.name] = self.default
            return
        raw = self.unshown(state.get(self.state, self.first_value()))
        values[self.name] = {"int": int, "float": float}.get(self.kind, str)(raw)

    def first_state(self) -> dict:
        """The session's keys for this setting, as a new session starts."""
        return {self.state: self.first_value()} if self.in_app else {}

    def check_state(self, state: dict, context: dict) -> None:
        if self.state in state and self.kind != "word":
            self.check_range(state[self.state])

    def state_keys(self, state) -> tuple[str, ...]:
        return (self.state,) if self.in_app else ()

    # --- a share link ---------------------------------------------------------------------------

    def to_query(self, state, piped: bool) -> dict:
        if not self.in_app or (self.pipeline_only and not piped):
            return {}
        value = state.get(self.state, self.first_value())
        if self.omit is not None and value == self.omit:
            return {}
        if self.kind == "float":
            return {self.link: f"{value:g}"}
        return {self.link: str(int(value)) if self.kind == "int" else str(self.unshown(value))}

    def from_query(self, link: LinkReading, context: dict) -> None:
        key = self.in_link(link.query)
        if key is None or not self.in_app:
            return
        try:
            value = self.parse(link.query[key])
            if self.kind != "word":
                self.check_range(value)
        except ConfigError as error:
            link.bad(key, self._why(error))
            return
        link.updates[self.state] = self.shown(value)

    def _why(self, error: ConfigError) -> str:
        if self.kind == "word" and self.canonical is not None:
            return str(error).split(": ", 1)[-1]
        if self.kind == "word":
            return f"one of {', '.join(self.choices())}"
        if self.low is not None and "outside" in str(error):
            return f"must be between {self.low} and {self.high}"
        return "not a number"

    # --- JSON -----------------------------------------------------------------------------------

    def to_json(self, config) -> dict:
        return {self.json: self.read(config)} if self.json else {}

    def from_json(self, data: dict, values: dict) -> None:
        source = data.get("pipeline", {}) if self.pipeline_only else data
        values[self.name] = source.get(self.json, self.default) if self.json else self.default


def _attr(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj
