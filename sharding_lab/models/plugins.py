"""Model families from outside this package: your own model without editing Sharding Lab.

A family module defines a :class:`~sharding_lab.models.ModelFamily` subclass decorated with
:func:`~sharding_lab.models.register`; importing it registers it. Three ways to have it imported,
each chosen by whoever runs the program — never by a link or anything typed in the app, because
importing runs the module's code:

- ``--family my_pkg.my_module`` on the command line (:func:`import_from_argv`);
- ``SHARDING_LAB_FAMILIES=mod1,mod2`` in the environment of the server (or of a command);
- an installed package's entry point in the group ``sharding_lab.models``
  (``[project.entry-points."sharding_lab.models"] my_model = "my_pkg.my_module"``).

docs/own-model.md shows how to write one; ``examples/families/`` holds a runnable one.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re

from .. import settings
from ..errors import ConfigError
from . import FAMILIES, ModelFamily, register

ENTRY_POINT_GROUP = "sharding_lab.models"
ENV_VARIABLE = settings.FAMILIES.name
_MODULE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
_loaded_modules: set[str] = set()
_problems: list[str] = []  # entry points or env modules that failed: said, never fatal to the app
_entry_points_done = False


def import_family_module(name: str) -> list[str]:
    """Import the module ``name`` (dotted) and return the families it registered; ConfigError, in
    one sentence, when it cannot be imported or registers none."""
    name = name.strip()
    if not re.match(_MODULE_NAME, name):
        raise ConfigError(f"--family {name!r} is not a module name like my_pkg.my_module", "model")
    before = {n: type(f) for n, f in FAMILIES.items()}
    try:
        importlib.import_module(name)
    except ConfigError:
        raise
    except ModuleNotFoundError as error:
        raise ConfigError(
            f"cannot import model family module {name!r}: {error} (is it on PYTHONPATH, or installed?)", "model"
        ) from None
    except Exception as error:  # the user's module: any error it raises is reported in one line
        raise ConfigError(
            f"importing model family module {name!r} failed: {type(error).__name__}: {error}", "model"
        ) from None
    _loaded_modules.add(name)
    found = [n for n, f in FAMILIES.items() if type(f).__module__ == name or before.get(n) is not type(f)]
    if not found:
        raise ConfigError(
            f"module {name!r} registered no model family: decorate a ModelFamily subclass "
            f"with @sharding_lab.models.register",
            "model",
        )
    return found


def import_from_argv(argv: list[str]) -> None:
    """Import every module named by ``--family NAME`` / ``--family=NAME`` in ``argv``, before the
    parser is built (so ``--model`` offers their families). ConfigError when one cannot be."""
    for i, arg in enumerate(argv):
        if arg == "--family" and i + 1 < len(argv):
            import_family_module(argv[i + 1])
        elif arg.startswith("--family="):
            import_family_module(arg.split("=", 1)[1])


def load_installed() -> list[str]:
    """Import the modules ``SHARDING_LAB_FAMILIES`` names and load the ``sharding_lab.models``
    entry points of installed packages (once each). What fails is kept in :func:`problems`
    rather than raised: one broken package must not take the app down."""
    global _entry_points_done
    for name in filter(None, (n.strip() for n in settings.FAMILIES.raw().split(","))):
        if name in _loaded_modules:
            continue
        try:
            import_family_module(name)
        except ConfigError as error:
            _loaded_modules.add(name)  # said once, not on every rerun
            _problems.append(f"{ENV_VARIABLE}: {error}")
    if not _entry_points_done:
        _entry_points_done = True
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = entry.load()  # a module (its import registers) or a ModelFamily subclass
                if (
                    isinstance(loaded, type)
                    and issubclass(loaded, ModelFamily)
                    and type(FAMILIES.get(loaded.name)) is not loaded
                ):
                    register(loaded)
            except Exception as error:  # noqa: BLE001 (an installed package's code: report, go on)
                _problems.append(f"entry point {entry.name} = {entry.value}: {type(error).__name__}: {error}")
    return problems()


def problems() -> list[str]:
    """What could not be loaded by :func:`load_installed`, one sentence each."""
    return list(_problems)


def module_of(family) -> str | None:
    """The module to import for ``family`` in another process (a multi-process run's workers),
    None for the families that come with Sharding Lab."""
    module = type(family).__module__
    return None if module.startswith("sharding_lab.") else module
