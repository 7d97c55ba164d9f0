"""The configuration page's table, written from ``sharding_lab/settings.py`` (name, default, what it does).

Why: the settings module is the one place a ``SHARDING_LAB_*`` variable is defined; the docs must say what
it says. ``tests/docs/test_docs_site.py`` fails when ``docs/configuration.md`` and this rendering differ.

    python -m tools.settings_table            # print the table
    python -m tools.settings_table --write    # rewrite it in docs/configuration.md, between its markers
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sharding_lab import settings

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
BEGIN = "<!-- settings table: written by `python -m tools.settings_table --write`, do not edit by hand -->"
END = "<!-- end of the settings table -->"


def render() -> str:
    """One row per setting, in the module's order."""
    rows = ["| variable | default | what it does |", "| --- | --- | --- |"]
    for setting in settings.ALL:
        default = f"`{setting.default}`" if setting.default else "(empty)"
        doc = setting.doc.replace("|", "\\|")  # a pipe would end the cell
        rows.append(f"| `{setting.name}` | {default} | {doc} |")
    return "\n".join(rows)


def table_in_page(text: str) -> str:
    """What the page holds between the markers."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start : text.index(END)].strip()


def write() -> None:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(BEGIN) + len(BEGIN)
    PAGE.write_text(text[:start] + "\n\n" + render() + "\n\n" + text[text.index(END) :], encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {PAGE.name}")
    if parser.parse_args().write:
        write()
    else:
        print(render())


if __name__ == "__main__":
    main()
