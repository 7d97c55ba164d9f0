"""The README and the documentation site: the README stays short and every link in it lands, the site builds
in MkDocs' strict mode (a broken link, a missing anchor or a page left out of the nav fails it), everything
the docs hold is one click from the README, and the configuration table names exactly the settings the code
reads."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import markdown
import pytest
import yaml

from sharding_lab import settings
from tools import settings_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 200

# [text](target) and ![alt](target); a target ends at whitespace or ')' (no titles are used here).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SETTING = re.compile(r"SHARDING_LAB_[A-Z0-9_]+")


def relative_links(path: Path) -> list[str]:
    """Every link target in a Markdown file that points into the repository (no scheme, not only an anchor)."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # links inside code blocks are not links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def heading_ids(path: Path) -> set[str]:
    """The anchors a Markdown file's headings get, computed by the same toc extension MkDocs uses."""
    md = markdown.Markdown(extensions=["toc", "tables"])
    md.convert(path.read_text(encoding="utf-8"))

    def walk(tokens):
        for token in tokens:
            yield token["id"]
            yield from walk(token["children"])

    return set(walk(md.toc_tokens))


def nav_pages() -> list[str]:
    """The pages mkdocs.yml lists in its nav, as paths under docs/."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def walk(entries):
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            if isinstance(value, list):
                yield from walk(value)
            else:
                yield value

    return list(walk(config["nav"]))


def test_readme_is_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; guides belong under docs/"


def test_every_relative_link_in_the_readme_resolves():
    links = relative_links(README)
    assert len(links) >= 10  # the README is mostly a map into docs/: an empty list means the parse broke
    for link in links:
        target, _, anchor = link.partition("#")
        path = (README.parent / target).resolve()
        assert path.is_file(), f"README.md links to {link}: no such file"
        if anchor:
            assert anchor in heading_ids(path), f"README.md links to {link}: {target} has no heading #{anchor}"


def test_every_docs_page_and_picture_is_one_click_from_the_readme():
    """The README was cut to a map: whatever it used to hold now lives in a docs page it links to directly."""
    linked = {(README.parent / link.partition("#")[0]).resolve() for link in relative_links(README)}
    pages = [(DOCS / page).resolve() for page in nav_pages()]
    assert sorted(p.name for p in DOCS.glob("*.md")) == sorted(p.name for p in pages), "a page is not in the nav"
    unlinked = [p.name for p in pages if p not in linked]
    assert not unlinked, f"README.md does not link these docs pages: {unlinked}"
    pictures_shown = {
        (page.parent / link).resolve()
        for page in pages
        for link in relative_links(page)
        if link.endswith((".png", ".svg", ".jpg"))
    }
    for picture in DOCS.glob("*.png"):
        assert picture.resolve() in pictures_shown | linked, f"{picture.name} is shown by no page"


def test_the_docs_site_builds_in_strict_mode(tmp_path):
    """`mkdocs build --strict`: a link to a missing page or anchor, or a page outside the nav, is an error."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    for page in nav_pages():
        html = tmp_path / "site" / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert html.is_file(), f"{page} was not built"
    assert "Measurements log" in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def test_the_configuration_table_is_the_settings_module():
    """docs/configuration.md's table is sharding_lab/settings.py's list: every variable, its default and what it
    does, in the module's order (rewrite it with `python -m tools.settings_table --write`)."""
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert settings_table.table_in_page(page) == settings_table.render()
    documented = SETTING.findall(settings_table.table_in_page(page))
    assert {s.name for s in settings.ALL} <= set(documented)
    assert len(settings.ALL) >= 10  # the module's list was read, not an empty one


def test_the_launch_scripts_read_only_documented_settings():
    """run_app.sh and run_tests.sh read their own variables (e.g. the GPU compiler's switch): those are in the
    settings module too, so they are in the table."""
    defined = {s.name for s in settings.ALL}
    for script in ("run_app.sh", "run_tests.sh"):
        assert set(SETTING.findall((ROOT / script).read_text(encoding="utf-8"))) <= defined, script


@pytest.mark.parametrize("page", ["architecture.md", "measurements.md"])
def test_docs_name_nothing_outside_the_repository(page):
    """Paths that leave the checkout (a sibling folder, the machine it was written on) would not exist for a reader."""
    text = (DOCS / page).read_text(encoding="utf-8")
    assert not re.search(r"\.\./shared|/work/", text)


RUN_MODULE = re.compile(r"python -m ((?:sharding_lab|tools)(?:\.\w+)*)")
REPOSITORY_PATH = re.compile(r"(?<![\w/.])((?:sharding_lab|tests|tools|app_pages|examples|scripts)/[\w./-]*\w/?)")


@pytest.mark.parametrize("page", ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_every_path_the_docs_name_exists(page):
    """A module, test or tool the docs name by its path is there (the folders move: the docs must follow)."""
    text = (ROOT / page if page == "README.md" else DOCS / page).read_text(encoding="utf-8")
    missing = sorted({path for path in REPOSITORY_PATH.findall(text) if not (ROOT / path).exists()})
    assert not missing, f"{page} names paths that do not exist: {missing}"
    for module in set(RUN_MODULE.findall(text)):
        path = ROOT / module.replace(".", "/")
        assert path.with_suffix(".py").is_file() or (path / "__main__.py").is_file(), f"{page}: python -m {module}"


def code_tree() -> list[str]:
    """The paths architecture.md's "Layout of the code" draws, from each line's indentation (two spaces a level)."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    block = text[text.index("## Layout of the code") :].split("```")[1]
    paths, parents = [], []
    for line in block.splitlines():
        name = line.strip().split(" ")[0] if line.strip() else ""
        indent = len(line) - len(line.lstrip())
        if not name or indent >= 20 or not (name.endswith("/") or "." in name):
            continue  # a blank line or the rest of a description
        parents = parents[: indent // 2]
        paths.append("".join(parents) + name)
        if name.endswith("/"):
            parents.append(name)
    return paths


def test_the_architecture_page_draws_the_code_as_it_is():
    """Every file and folder the code's layout names exists, and every subpackage and module of sharding_lab/ and
    every page of app_pages/ is in it."""
    drawn = code_tree()
    assert "sharding_lab/training/trainer.py" in drawn  # the parse found the nesting
    missing = [path for path in drawn if not (ROOT / path).exists()]
    assert not missing, f"docs/architecture.md draws paths that do not exist: {missing}"
    packages = {
        f"sharding_lab/{p.parent.relative_to(ROOT / 'sharding_lab')}/"
        for p in (ROOT / "sharding_lab").rglob("__init__.py")
    }
    packages.discard("sharding_lab/./")
    assert packages <= set(drawn), f"subpackages missing from docs/architecture.md: {sorted(packages - set(drawn))}"
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "sharding_lab").rglob("*.py") if p.name != "__init__.py"}
    assert modules <= set(drawn), f"modules missing from docs/architecture.md: {sorted(modules - set(drawn))}"
    lines = (DOCS / "architecture.md").read_text(encoding="utf-8").splitlines()
    pages_line = next(line for line in lines if line.startswith("app_pages/"))
    pages = {p.stem for p in (ROOT / "app_pages").glob("*.py")}
    assert all(re.search(rf"\b{page}\b", pages_line) for page in pages), f"pages not named: {pages_line}"


# A name in backticks that starts with one of the package's folders or top modules, e.g.
# `training.trainer.step_program` or `search.candidates.screen()`: the docs' way to point into the code.
PACKAGE_PARTS = sorted(
    {p.name for p in (ROOT / "sharding_lab").iterdir() if (p / "__init__.py").is_file()}
    | {"settings", "units", "errors"}
)
DOTTED = re.compile(r"`((?:%s)(?:\.\w+)+)(?:\([^`]*\))?`" % "|".join(PACKAGE_PARTS))
FILE_SUFFIXES = (".md", ".py", ".json", ".yml", ".toml", ".txt", ".sh", ".png")
RESOLVE = """
import importlib, json, sys
missing = []
for dotted in json.loads(sys.argv[1]):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module("sharding_lab." + ".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            missing.append(dotted)
        break
    else:
        missing.append(dotted)
print(json.dumps(missing))
"""


def test_every_name_the_docs_point_to_in_the_code_exists():
    """`module.function` references (relative to sharding_lab) resolve: a rename or a split must reach the docs.
    Resolved in a fresh process, so the test imports nothing into the suite's."""
    names = sorted(
        {
            name
            for page in DOCS.glob("*.md")
            for name in DOTTED.findall(page.read_text(encoding="utf-8"))
            if not name.endswith(FILE_SUFFIXES)  # `app.py`, the scaling book's `training.md`: files, not names
        }
    )
    assert len(names) >= 20  # the pattern found the docs' references
    done = subprocess.run(
        [sys.executable, "-c", RESOLVE, json.dumps(names)], cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
