"""Comments say why, docs say when: no date in a code comment or docstring of the package, the pages or app.py.

A measured figure carries its date in docs/measurements.md (or the guide it belongs to), where a reader looks
for it and where it can be measured again; in the code it would go stale unseen. Strings the program shows
(a chip figure's source) are data, not comments: they may name a date.
"""

import ast
import io
import re
import tokenize

import pytest

from tests.support import ROOT

MONTHS = (
    "Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
    "|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
DATE = re.compile(
    rf"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b"  # 2026-12-05
    rf"|\b(?:{MONTHS})\.? [0-3]?\d(?:st|nd|rd|th)?\b"  # Dec 5, December 5th
    rf"|\b[0-3]?\d(?:st|nd|rd|th)? (?:of )?(?:{MONTHS})\b"  # 5 Dec, 5th of December
)


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every ``#`` comment and every module, class and function docstring in ``source``."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    found.append((body[0].lineno, body[0].value.value))
    return found


def dated(source: str) -> list[str]:
    return [
        f"line {line}: {m.group(0)!r}" for line, text in comments_and_docstrings(source) for m in DATE.finditer(text)
    ]


def files() -> list:
    return sorted([*(ROOT / "sharding_lab").rglob("*.py"), *(ROOT / "app_pages").glob("*.py"), ROOT / "app.py"])


def test_no_date_in_a_code_comment():
    found = {str(p.relative_to(ROOT)): d for p in files() if (d := dated(p.read_text(encoding="utf-8")))}
    assert not found, f"dates in code comments (move the measurement to docs/measurements.md): {found}"


@pytest.mark.parametrize(
    "source, hits",
    [
        ("x = 1  # measured on 2026-12-05: 3 s\n", 1),
        ('def f():\n    """Logged on Dec 5, a class of 20."""\n', 1),
        ('"""The load test of 6 December."""\n', 1),
        ("# 5th of December, tonight's class\n", 1),
        ('x = "Measured on one TPU v5e (2026-12-05)"\n', 0),  # a string the program shows: data
        ("# a 2026-12 figure and 12-05 of a mesh: no day\n", 0),
        ("# December 24th, or Dec. 24\n", 2),
        ("# the sizes 2 4 8; a Decoder 4 layers deep\n", 0),
    ],
)
def test_the_lint_finds_a_date_only_in_comments(source, hits):
    assert len(dated(source)) == hits, dated(source)
