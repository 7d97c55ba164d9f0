"""Arrays named alike and laid out alike, counted once: ``params/blocks/{0,…,79}/q`` for eighty blocks.

A real model repeats itself: Llama 3 70B has 2,179 arrays (its 723 parameters, their two Adam moments, the
batch), 80 blocks of nine weights each laid out the same way. A page that draws or lists each of them sends
tens of megabytes and says one thing eighty times. :func:`group` puts paths that differ only in their numbers
(block indices) into one group when a key (their layout) is the same; :func:`spell` writes such a group's paths
once, with the numbers in braces.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Hashable, Iterable

_NUMBER = re.compile(r"^\d+$")


@dataclasses.dataclass(frozen=True)
class Group:
    """Paths that differ only in their numeric parts and share a key; ``paths`` in their first order."""

    paths: tuple[str, ...]

    @property
    def first(self) -> str:
        return self.paths[0]

    @property
    def name(self) -> str:
        return spell(self.paths)

    def __len__(self) -> int:
        return len(self.paths)


def _pattern(path: str) -> tuple[str | None, ...]:
    return tuple(None if _NUMBER.match(part) else part for part in path.split("/"))


def group(paths: Iterable[str], key: Callable[[str], Hashable] = lambda path: None) -> list[Group]:
    """``paths`` grouped by their name with the numbers left out and ``key(path)``, in order of first appearance."""
    found: dict[tuple, list[str]] = {}
    for path in paths:
        found.setdefault((_pattern(path), key(path)), []).append(path)
    return [Group(tuple(members)) for members in found.values()]


def _numbers(values: list[int]) -> str:
    """'0,…,79' for a run, '1,3,7' for a few, '0,…,79 (40 of them)' for many with gaps."""
    values = sorted(set(values))
    if len(values) == 1:
        return str(values[0])
    if len(values) > 3 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]},…,{values[-1]}"
    if len(values) <= 4:
        return ",".join(map(str, values))
    return f"{values[0]},…,{values[-1]} ({len(values)} of them)"


def spell(paths: Iterable[str]) -> str:
    """The paths of one group as one name: ``params/blocks/{0,…,79}/q``; a single path as it is."""
    paths = list(paths)
    if len(paths) == 1:
        return paths[0]
    split = [p.split("/") for p in paths]
    if len({len(parts) for parts in split}) != 1:
        return ", ".join(paths)
    out = []
    for parts in zip(*split):
        if len(set(parts)) == 1:
            out.append(parts[0])
        elif all(_NUMBER.match(p) for p in parts):
            out.append("{" + _numbers([int(p) for p in parts]) + "}")
        else:
            out.append("{" + ",".join(dict.fromkeys(parts)) + "}")
    return "/".join(out)
