"""The one exception a learner sees for a configuration that cannot work."""


class ConfigError(ValueError):
    """A configuration that JAX would reject (or that makes no sense), explained in plain words.

    The message always says what is wrong and how to fix it, on one line, so the CLI can print it
    and the app can show it next to the widget that caused it. ``field`` names that widget's
    setting (``"mesh"``, ``"rules"``, ``"batch"``, ``"model"``, ``"optimizer"``, ``"steps"``).
    When one change is known to make the configuration work, ``fix`` is that configuration (a
    ``LabConfig``) and ``fix_label`` says the change in a few words, so the app can offer it as a
    button; ``fix_help`` is that button's tooltip (what the click changes in the sidebar).
    """

    def __init__(
        self,
        message: str,
        field: str = "config",
        fix=None,
        fix_label: str = "",
        fix_help: str = "Changes that one setting in the sidebar; everything else stays.",
    ):
        super().__init__(message)
        self.field = field
        self.fix = fix
        self.fix_label = fix_label
        self.fix_help = fix_help


def nearest_divisible(value: int, divisor: int) -> list[int]:
    """The closest positive sizes to ``value`` that ``divisor`` divides, smaller first."""
    below = (value // divisor) * divisor
    above = below + divisor
    return [size for size in (below, above) if size > 0]
