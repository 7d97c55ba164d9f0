"""The phase of a collective that moves one of the step's inputs as it is: the phase of its first use.

JAX names each compiled op after the traced line that made it (``jit(train_step)/jvp()/dot_general``), and the lab
reads a collective's phase — forward, backward, optimizer — from that name. XLA of JAX 0.12.1 places a weight's
all-gather on the step's input itself and names it after the input (``state[0]['w1'].value``), a name that says
nothing of when the gathered weight is needed: read as a name it would say "optimizer", where JAX 0.10.2's program
says "forward" for the same gather. Such a collective takes the phase of the ops that read its result — through
ops that carry no traced name either (a bitcast named after the same input, an async collective's ``-done``) —
the earliest of them: forward before backward before the optimizer's update.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_DEFINED = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")
_OPERAND = re.compile(r"%([\w.\-]+)")
ORDER = ("forward", "backward", "optimizer")


def named_after_an_input(op_name: str | None) -> bool:
    """True for an op named after one of the step's inputs (``state[0]['w1'].value``, ``x``), not a traced line."""
    return bool(op_name) and "jit(" not in op_name and "/" not in op_name


def users_of(lines: list[str]) -> dict[str, list[str]]:
    """Instruction name → the names of the instructions that read it (an HLO module's names are unique)."""
    users: dict[str, list[str]] = {}
    for line in lines:
        defined = _DEFINED.match(line)
        if defined:
            for operand in _OPERAND.findall(line[defined.end() :]):
                users.setdefault(operand, []).append(defined.group(1))
    return users


def first_use_phase(
    name: str, users: dict[str, list[str]], op_names: dict[str, str], phase_of: Callable[[str | None], str]
) -> str | None:
    """The earliest phase among the traced ops that read ``name``'s result (None when no traced op does)."""
    found, seen, frontier = set(), {name}, [name]
    while frontier and len(seen) < 200:  # a gathered input is read within a few hops; never walk the whole module
        nxt = []
        for user in (u for current in frontier for u in users.get(current, ())):
            if user in seen:
                continue
            seen.add(user)
            op_name = op_names.get(user)
            if op_name is None or named_after_an_input(op_name):
                nxt.append(user)  # a bitcast, a copy, a -done: look at what reads it
            elif phase_of(op_name) in ORDER:
                found.add(phase_of(op_name))
        frontier = nxt
    return next((phase for phase in ORDER if phase in found), None)
