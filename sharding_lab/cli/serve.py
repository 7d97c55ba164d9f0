"""``sharding-lab app``: serve the Streamlit app, from a checkout or from an installed copy.

A checkout runs its own ``app.py`` (what ``./run_app.sh`` and ``streamlit run app.py`` run); an installed
copy carries the same entry script, its pages and its server settings inside the package
(``sharding_lab/webapp``, see ``pyproject.toml``). Streamlit reads ``.streamlit/config.toml`` only from the
working directory, so the settings are passed as flags: the server behaves the same wherever it is started.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def entry_script() -> Path:
    """The checkout's ``app.py`` when this package sits in one, else the installed copy's."""
    checkout = PACKAGE.parent / "app.py"
    if checkout.is_file() and (PACKAGE.parent / "app_pages").is_dir():
        return checkout
    return PACKAGE / "webapp" / "app.py"


def config_flags(folder: Path) -> list[str]:
    """``.streamlit/config.toml`` beside the entry script, as ``--section.option=value`` flags."""
    path = folder / ".streamlit" / "config.toml"
    if not path.is_file():
        return []
    flags = []
    for section, options in tomllib.loads(path.read_text()).items():
        for option, value in options.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            flags.append(f"--{section}.{option}={text}")
    return flags


def command(extra: list[str]) -> list[str]:
    """The command that serves the app; ``extra`` goes to ``streamlit run`` (e.g. ``--server.port 8600``)."""
    script = entry_script()
    return [sys.executable, "-m", "streamlit", "run", str(script), *config_flags(script.parent), *extra]


def main(extra: list[str]) -> int:
    argv = command(extra)
    os.execv(argv[0], argv)  # replaces this process: Ctrl+C and signals reach Streamlit directly
    return 0  # not reached
