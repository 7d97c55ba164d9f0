"""The two stacks Sharding Lab is tested on, as the Lesson and the exported script name them.

JAX 0.11 dropped Python 3.11, and the TPU machine the lab is calibrated on runs Python 3.11 and cannot install
another JAX: so the lab supports two stacks, and everything it shows is written to run on both. Each entry holds
the versions of its Python's constraints file (the suite passed with them; ``tests/core/test_stacks.py`` holds the
two together), newest first.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Stack:
    python: str  # "3.12+": 3.12 and newer
    jax: str
    flax: str
    optax: str
    constraints: str  # the constraints file that pins it

    def label(self) -> str:
        return f"jax {self.jax}, flax {self.flax} (Python {self.python})"


STACKS = (
    Stack(python="3.12+", jax="0.12.1", flax="0.12.12", optax="0.2.8", constraints="constraints-py312.txt"),
    Stack(python="3.11", jax="0.10.2", flax="0.12.8", optax="0.2.8", constraints="constraints.txt"),
)
NEWEST, OLDEST = STACKS[0], STACKS[-1]


def stacks_text() -> str:
    """'jax 0.12.1, flax 0.12.12 (Python 3.12+) and jax 0.10.2, flax 0.12.8 (Python 3.11); optax 0.2.8'."""
    optax = sorted({s.optax for s in STACKS})
    return " and ".join(s.label() for s in STACKS) + f"; optax {' / '.join(optax)}"
