"""Ring algorithms, step by step: which device sends which block to whom.

The Communication page animates a collective over one group of ``n`` devices (positions 0..n−1
around the ring; each device sends to the next). Each array is cut into ``n`` blocks:

- **all-gather**: device d starts with block d; at step s it forwards block (d − s) mod n, the one
  it received last. After n − 1 steps every device holds every block; each sent n − 1 blocks,
  (n − 1)/n of the result.
- **reduce-scatter**: every device starts with its own partial value of every block; at step s
  device d sends its running sum of block (d − s − 1) mod n, and the next device adds its own
  partial. After n − 1 steps device d holds block d summed over all n devices; each sent n − 1
  blocks of 1/n of the input, (n − 1) × its result block.
- **all-reduce**: a reduce-scatter, then an all-gather of the summed blocks: 2(n − 1) steps,
  2(n − 1)/n of the array sent per device.

:func:`schedule` returns the steps as data, so a test can replay them and check the bytes against
the formulas in :class:`sharding_lab.program.communication.Collective`.
"""

from __future__ import annotations

import dataclasses

RING_OPS = ("all-gather", "reduce-scatter", "all-reduce")


@dataclasses.dataclass(frozen=True)
class Send:
    sender: int  # ring positions
    receiver: int
    block: int


@dataclasses.dataclass(frozen=True)
class Step:
    phase: str  # "reduce-scatter" or "all-gather"
    sends: tuple[Send, ...]
    # held[d][b]: the ring positions whose contributions block b on device d sums (empty: not held)
    held: tuple[tuple[frozenset, ...], ...]


def schedule(op: str, n: int) -> list[Step]:
    """The ring's states: the starting state (no sends), then one Step per communication step."""
    if op not in RING_OPS:
        raise ValueError(f"no ring schedule for {op!r}: only {', '.join(RING_OPS)}")
    if op == "all-gather":
        held = [[frozenset({d}) if b == d else frozenset() for b in range(n)] for d in range(n)]
    else:
        held = [[frozenset({d}) for _ in range(n)] for d in range(n)]
    steps = [Step("start", (), _freeze(held))]
    if op in ("reduce-scatter", "all-reduce"):
        for s in range(n - 1):
            sends = tuple(Send(d, (d + 1) % n, (d - s - 1) % n) for d in range(n))
            before = [row[:] for row in held]
            for send in sends:
                held[send.receiver][send.block] = before[send.receiver][send.block] | before[send.sender][send.block]
            steps.append(Step("reduce-scatter", sends, _freeze(held)))
        # each device keeps only its fully summed block
        held = [[held[d][b] if b == d else frozenset() for b in range(n)] for d in range(n)]
        steps[-1] = dataclasses.replace(steps[-1], held=_freeze(held)) if n > 1 else steps[-1]
    if op in ("all-gather", "all-reduce"):
        for s in range(n - 1):
            sends = tuple(Send(d, (d + 1) % n, (d - s) % n) for d in range(n))
            before = [row[:] for row in held]
            for send in sends:
                held[send.receiver][send.block] = before[send.sender][send.block]
            steps.append(Step("all-gather", sends, _freeze(held)))
    return steps


def _freeze(held) -> tuple:
    return tuple(tuple(row) for row in held)


def sent_fraction(op: str, n: int) -> float:
    """What one device sends over the whole op, as a fraction of the array (replayed, not assumed)."""
    steps = schedule(op, n)
    return sum(1 for step in steps for send in step.sends if send.sender == 0) / n


@dataclasses.dataclass(frozen=True)
class Chain:
    """Devices a collective-permute links one after another: ``members[i]`` sends to
    ``members[i + 1]``; when ``closed``, the last sends back to the first (a cycle)."""

    members: tuple[int, ...]
    closed: bool

    def label(self) -> str:
        return " → ".join(map(str, self.members + (self.members[:1] if self.closed else ())))


def permute_chains(pairs) -> list[Chain]:
    """A collective-permute's (source, target) pairs as the cycles and chains they form.

    A permute is *one* op: every source sends its block to its target at the same time; each
    device sends at most once and receives at most once, so the pairs fall apart into cycles and
    open chains. Devices swap only in a 2-cycle; ``1→4, 4→2, 2→1`` is a cycle of three in which
    nobody sends back to the device it received from."""
    target = dict(pairs)
    if len(target) != len(pairs) or len(set(target.values())) != len(pairs):
        raise ValueError(f"not a permutation: a device sends or receives twice in {pairs}")
    source = {t: s for s, t in target.items()}
    chains, seen = [], set()
    # open chains first start at a device that receives nothing; what is left are cycles
    starts = [s for s in target if s not in source] + sorted(target)
    for start in starts:
        if start in seen:
            continue
        members, device = [], start
        while device is not None and device not in seen:
            seen.add(device)
            members.append(device)
            device = target.get(device)
        chains.append(Chain(tuple(members), closed=device == start))
    return chains
