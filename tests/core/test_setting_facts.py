"""A setting's facts — its range, cap and default — are written once, in the run settings table
(training/run_settings.py), and read from there everywhere else (issue 57).

The check reads the source: a number the table declares for a setting (its ``low``, ``high``, ``cap`` or
``default``), written as a literal where code bounds or defaults that same setting — a comparison, a
``MAX_…``/``MIN_…``/``DEFAULT_…`` constant, a widget's range, a field or parameter named for the setting — is
a second copy that can drift (the batch was 4,096 in the table and 65,536 in training/config.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
TABLE = ROOT / "sharding_lab/training/run_settings.py"
BOUNDS = ("low", "high", "cap")
WIDGETS = {"number_input", "slider", "number_setting", "select_slider", "min", "max", "clip", "clamp"}


def declared() -> dict[str, dict[str, object]]:
    """Setting name → {fact: number} for every number the table writes as a literal in a ``Value`` row (a fact
    the table reads from elsewhere — ``high=MAX_MICROBATCHES`` — is declared there, not here)."""
    facts = {}
    for node in ast.walk(ast.parse(TABLE.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Value":
            name = node.args[0].value
            state = next((k.value.value for k in node.keywords if k.arg == "state"), None)
            numbers = {
                k.arg: k.value.value
                for k in node.keywords
                if k.arg in (*BOUNDS, "default")
                and isinstance(k.value, ast.Constant)
                and isinstance(k.value.value, (int, float))
                and not isinstance(k.value.value, bool)
            }
            facts[name] = {"words": words_of(name, state, node.args[3].value), **numbers}
    return facts


def words_of(*names) -> set[str]:
    """The words that name a setting in code: ``batch_size`` → batch, size is too common: batch."""
    common = {"size", "mesh", "type", ""}
    return {w for n in names if n for w in re.split(r"[_.]", n.lower()) if w not in common}


def mentions(node: ast.AST) -> set[str]:
    """The words of every identifier, attribute and short string in ``node``."""
    found = set()
    for sub in ast.walk(node):
        text = (
            sub.id
            if isinstance(sub, ast.Name)
            else sub.attr
            if isinstance(sub, ast.Attribute)
            else sub.arg
            if isinstance(sub, (ast.keyword, ast.arg)) and sub.arg
            else sub.value
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and len(sub.value) < 40
            else ""
        )
        found |= {w for w in re.split(r"[^a-z]+", text.lower()) if w}
    return found


def number(node: ast.AST):
    """The number ``node`` writes (``65_536``, ``1 << 16``, ``2**32``, ``-1``), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and number(node.operand) is not None:
        return -number(node.operand)
    if isinstance(node, ast.BinOp) and None not in (number(node.left), number(node.right)):
        ops = {ast.Mult: "__mul__", ast.Pow: "__pow__", ast.LShift: "__lshift__", ast.Add: "__add__"}
        if type(node.op) in ops and abs(number(node.right)) < 64:
            return getattr(number(node.left), ops[type(node.op)])(number(node.right))
    return None


def numbers(node: ast.AST) -> set:
    """Every number ``node`` writes, each read whole (``2**32`` is 4294967296, not 2 and 32)."""
    if number(node) is not None:
        return {number(node)}
    return set().union(*(numbers(child) for child in ast.iter_child_nodes(node)))


def places(tree: ast.AST):
    """(what, node, facts it may repeat) for every place in ``tree`` that bounds or defaults something."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            yield "comparison", node, BOUNDS
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", "") or getattr(node.func, "attr", "")) in WIDGETS:
            yield "range", node, BOUNDS
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [getattr(t, "id", getattr(t, "attr", "")) for t in targets]
            if any(re.match(r"(MAX|MIN|LIMIT|CAP)_", n) for n in names):
                yield "constant", node, BOUNDS
            if any(n.startswith("DEFAULT_") for n in names):
                yield "default", node, ("default",)
            elif number(node.value) is not None:  # a field or variable named for a setting, given a number
                yield "default", ast.Module(body=[ast.Expr(t) for t in targets] + [ast.Expr(node.value)]), ("default",)
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs = list(zip(positional[len(positional) - len(node.defaults) :], node.defaults))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            for arg, value in pairs:
                yield "parameter", ast.Module(body=[ast.Expr(ast.Name(arg.arg)), ast.Expr(value)]), ("default",)


# A number that only looks like a setting's: the file, the setting, and why it is not a copy.
NOT_COPIES = {
    ("sharding_lab/lessons/third_way.py", "lr"): "the seed's step written out as a lesson to read: LR is in its text"
}


def sources():
    for path in sorted([*ROOT.glob("sharding_lab/**/*.py"), *ROOT.glob("app_pages/*.py"), ROOT / "app.py"]):
        if path != TABLE:
            yield path


def copies(path: Path, facts: dict) -> list[str]:
    found = []
    for what, node, kinds in places(ast.parse(path.read_text())):
        said, written = mentions(node), numbers(node)
        for name, fact in facts.items():
            if not (fact["words"] & said) or (str(path.relative_to(ROOT)), name) in NOT_COPIES:
                continue
            for kind in kinds:
                number = fact.get(kind)
                if number is not None and number not in (0, 1) and number in written:
                    line = getattr(node, "lineno", None) or getattr(node.body[-1].value, "lineno", "?")
                    found.append(f"{path.relative_to(ROOT)}:{line}: {what} repeats {name}'s {kind} {number}")
    return found


def test_the_table_declares_the_facts_this_test_looks_for():
    facts = declared()
    assert facts["batch_size"]["high"] == 4096 and facts["batch_size"]["cap"] == 65_536
    assert facts["steps"]["cap"] == 200_000 and facts["lr"]["default"] == 0.01
    assert "batch" in facts["batch_size"]["words"] and "steps" in facts["steps"]["words"]


def test_no_range_cap_or_default_of_a_setting_is_written_twice():
    facts = declared()
    found = [line for path in sources() for line in copies(path, facts)]
    assert found == [], "read these from run_settings.VALUES:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "code",
    [
        "MAX_BATCH = 65_536",
        "MAX_STEPS = 200_000",
        "if batch > 65536:\n    pass",
        "DEFAULT_BATCH = 32",
        "class C:\n    batch_size: int = 32",
        "def f(steps=3000):\n    pass",
        "st.number_input('Batch size', 1, 4096, key='batch')",
    ],
)
def test_a_copy_is_found(code):
    """The check catches each copy the table replaced, and the forms like them."""
    facts = declared()
    found = [
        what
        for what, node, kinds in places(ast.parse(code))
        for fact in facts.values()
        if fact["words"] & mentions(node)
        and any(fact.get(k) in numbers(node) for k in kinds if fact.get(k) not in (None, 0, 1))
    ]
    assert found, code
