"""Config ↔ command line: the options every subcommand shares, parsed into a :class:`LabConfig`
and written back (the worker processes of a multi-process run are started with them). Each option is a
row of :data:`.run_settings.RUN_SETTINGS`; this module only loops over them.

It sits below :mod:`.cli`, :mod:`.challenges` and :mod:`.distributed`, which all read a
configuration from argv, so their imports run one way.
"""

from __future__ import annotations

import argparse
import sys

from ..models.hf_config import load_hf_config, summary
from .config import LabConfig, config_from_partial, config_from_values
from .run_settings import RUN_SETTINGS, VALUES, family_defaults


def add_config_options(parser: argparse.ArgumentParser) -> None:
    for setting in RUN_SETTINGS:
        setting.add_option(parser)


def config_from_args(args) -> LabConfig:
    """argv (parsed by :func:`add_config_options`) → LabConfig; :func:`config_to_args` is the inverse. What an
    option does not say is the model family's default (:func:`.run_settings.family_defaults`), else the seed's."""
    values: dict = {}

    def default(name: str):
        chosen = family_defaults(values["family"]) if "family" in values else {}
        return chosen[name] if name in chosen else VALUES[name].default

    for setting in RUN_SETTINGS:
        setting.from_args(args, values, default)
    return config_from_values(values)


def config_to_args(config: LabConfig) -> list[str]:
    """Command-line options that rebuild ``config`` with :func:`config_from_args` (the worker
    processes of a multi-process run are started with them). A family from outside Sharding Lab
    comes with the ``--family`` that imports it; a named size is written as ``--size NAME`` and
    only the options that differ from it."""
    return [word for setting in RUN_SETTINGS for word in setting.to_args(config)]


def partial_to_args(partial: dict) -> list[str]:
    """A partial configuration (settings by name, e.g. a challenge's solution) as the command-line options
    that say it: only the settings it names, over the family's defaults."""
    config = config_from_partial(partial)
    return [word for setting in RUN_SETTINGS for word in setting.partial_args(partial, config)]


def model_source(args) -> dict:
    """The model as the user named it, for MaxText's command (:func:`sharding_lab.export.maxtext.maxtext`): the
    named size (``--size``: Llama 3 and 3.1 have the same shapes) and the Hugging Face config read (``--hf-config``:
    its RoPE and norm fields)."""
    hf = getattr(args, "hf_config", None)
    return {
        "size": getattr(args, "size", None),
        "hf": load_hf_config(hf, getattr(args, "size_seq", None)) if hf else None,
    }


def say_hf_config(args, config) -> None:
    """With ``--hf-config``: what was read (the parameter count beside the card's, what the lab computes
    differently), on stderr so that ``--json`` stays one object."""
    if getattr(args, "hf_config", None):
        read = load_hf_config(args.hf_config, getattr(args, "size_seq", None))
        for line in summary(read, config.family, config.model):
            print(f"{args.hf_config}: {line}", file=sys.stderr)
