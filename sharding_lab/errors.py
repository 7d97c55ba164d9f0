"""The one exception a learner sees for a configuration that cannot work."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Named:
    """A setting a message names, said as each place says it: the app by its box's label, the command line by
    its option — ``cli`` is how (``"{label} ({flag})"``: "Experts (--experts)"; ``"{flag}"`` where the sentence
    uses the option itself: "--chip v5e")."""

    label: str
    flag: str
    cli: str = "{label} ({flag})"

    @classmethod
    def of(cls, field, cli: str = "{label} ({flag})") -> "Named":
        """A model's size field (:class:`sharding_lab.models.SizeField`) or a run setting, by its label and flag."""
        return cls(field.label, field.flag, cli)

    def on_command_line(self) -> str:
        return self.cli.format(label=self.label, flag=self.flag)


class ConfigError(ValueError):
    """A configuration that JAX would reject (or that makes no sense), explained in plain words.

    The message always says what is wrong and how to fix it, on one line, so the CLI can print it
    and the app can show it next to the widget that caused it. ``field`` names that widget's
    setting (``"mesh"``, ``"rules"``, ``"batch"``, ``"model"``, ``"optimizer"``, ``"steps"``).
    When one change is known to make the configuration work, ``fix`` is that configuration (a
    ``LabConfig``) and ``fix_label`` says the change in a few words, so the app can offer it as a
    button; ``fix_help`` is that button's tooltip (what the click changes in the sidebar).

    ``message`` is a sentence, or its parts: text and the settings it names (:class:`Named`), so that the
    command line reads its options (``str(error)``) and the app its labels (:meth:`in_app`) — no rewriting.
    """

    def __init__(
        self,
        message: str,
        field: str = "config",
        fix=None,
        fix_label: str = "",
        fix_help: str = "Changes that one setting in the sidebar; everything else stays.",
    ):
        self.parts = (message,) if isinstance(message, str) else tuple(message)
        super().__init__("".join(p if isinstance(p, str) else p.on_command_line() for p in self.parts))
        self.field = field
        self.fix = fix
        self.fix_label = fix_label
        self.fix_help = fix_help

    def in_app(self) -> str:
        """The sentence as the app says it: every setting it names by its box's label."""
        return "".join(p if isinstance(p, str) else p.label for p in self.parts)


def in_app(error) -> str:
    """Any error as the app shows it: a ConfigError in the app's words, anything else as it is."""
    return error.in_app() if isinstance(error, ConfigError) else str(error)


def nearest_divisible(value: int, divisor: int) -> list[int]:
    """The closest positive sizes to ``value`` that ``divisor`` divides, smaller first."""
    below = (value // divisor) * divisor
    above = below + divisor
    return [size for size in (below, above) if size > 0]
