"""What the chip itself timed: programs run under JAX's profiler, their device-side durations read back from the
trace (``jax.profiler.ProfileData``), program by program and op by op.

A wall-clock call from Python carries the cost of the call itself (a fraction of a millisecond on a TPU), which
small programs take whole; the chip's profiler times each program (the ``XLA Modules`` line of a device plane)
and each op in it (``XLA Ops``) on the chip, with no call around it. The calibration (:mod:`.calibrate`) and the
measured steps (``tools/calibration_check.py``) read their times from here where the platform's trace has a
device plane (a TPU), and fall back to the wall clock where it has none (a CPU).
"""

from __future__ import annotations

import dataclasses
import glob
import re
import statistics
import tempfile
import time


@dataclasses.dataclass
class Timed:
    """One program's device-side times: each call's duration, and per op name its (calls, seconds) summed over
    the calls (an op in a loop's body runs once per trip)."""

    calls_s: list[float]
    ops: dict[str, list[float]]  # op name → [times it ran, seconds in all], over every call
    device: bool  # False: wall clock (no device plane in the trace)

    @property
    def median_s(self) -> float:
        return statistics.median(self.calls_s) if self.calls_s else 0.0

    def per_call(self) -> dict[str, list[float]]:
        """{op name: [times it ran per call, seconds per call]}."""
        n = max(1, len(self.calls_s))
        return {name: [count / n, seconds / n] for name, (count, seconds) in self.ops.items()}


def op_name(event_name: str) -> str:
    """The HLO instruction's name of a trace event ("%fusion.12 = …" or "fusion.12" → "fusion.12")."""
    return re.split(r"[\s=]", event_name.lstrip("%").strip(), maxsplit=1)[0]


def module_name(event_name: str) -> str:
    """A program's name without its run id ("jit_step(42)" → "jit_step")."""
    return event_name.split("(", 1)[0].strip()


def read_trace(path: str) -> dict[str, list[tuple[float, float, str]]]:
    """{line name: [(start ns, end ns, event name), ...]} over the device planes of a trace file (``/device:``
    planes other than the host's); empty when the trace has none."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(path)
    out: dict[str, list] = {}
    for plane in data.planes:
        if not plane.name.startswith("/device:") or "CUSTOM" in plane.name:
            continue
        for line in plane.lines:
            events = out.setdefault(line.name, [])
            events += [(e.start_ns, e.end_ns, e.name) for e in line.events]
    return out


def timed_programs(jobs: list[tuple[str, object, tuple]], repeats: int) -> dict[str, Timed]:
    """Each ``(label, jitted fn, args)`` run ``repeats`` times (after one call outside the trace that compiles and
    warms it), all under one trace: {label: :class:`Timed`}. A program is told apart by its name (the jitted
    function's ``__name__``, which must differ between jobs). Without a device plane, each call's wall clock."""
    import jax

    for _, fn, args in jobs:
        jax.block_until_ready(fn(*args))
    walls: dict[str, list[float]] = {label: [] for label, _, _ in jobs}
    with traced() as folder:
        for label, fn, args in jobs:
            for _ in range(repeats):
                start = time.perf_counter()
                jax.block_until_ready(fn(*args))
                walls[label].append(time.perf_counter() - start)
    names = {f"jit_{getattr(fn, '__name__', label)}": label for label, fn, _ in jobs}
    return collect(folder.name, names, walls)


class traced:
    """``with traced() as folder:`` — JAX's profiler on, its trace written under ``folder.name``."""

    def __enter__(self):
        import jax

        self.name = tempfile.mkdtemp(prefix="device-times-")
        self._trace = jax.profiler.trace(self.name)
        try:
            self._trace.__enter__()
        except Exception as error:  # a profiler that does not start leaves the wall clock (collect finds no trace)
            print(f"device_times: no profiler trace ({type(error).__name__}: {error}); timing by the wall clock")
            self._trace = None
        return self

    def __exit__(self, *exc):
        return self._trace.__exit__(*exc) if self._trace is not None else None


def collect(folder: str, names: dict[str, str] | None, walls: dict[str, list[float]]) -> dict[str, Timed]:
    """The programs of the trace under ``folder``: {label: :class:`Timed`}, a program's label by its name
    (``names``: {"jit_fn": label}; None: every program is the one label of ``walls``). A label whose program the
    trace lacks (no device plane, as on a CPU) keeps its wall clock."""
    files = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
    lines = read_trace(files[0]) if files else {}
    modules = sorted(lines.get("XLA Modules", []))
    ops = sorted(lines.get("XLA Ops", []))
    out = {label: Timed([], {}, True) for label in walls}
    cursor = 0
    for start, end, name in modules:
        label = next(iter(walls)) if names is None else names.get(module_name(name))
        if label is None:
            continue
        timed = out[label]
        timed.calls_s.append((end - start) * 1e-9)
        while cursor < len(ops) and ops[cursor][0] < start:
            cursor += 1
        i = cursor
        while i < len(ops) and ops[i][0] < end:
            entry = timed.ops.setdefault(op_name(ops[i][2]), [0, 0.0])
            entry[0] += 1
            entry[1] += (ops[i][1] - ops[i][0]) * 1e-9
            i += 1
    for label, timed in out.items():
        if not timed.calls_s:  # no device plane (or the trace lost this program): its wall clock, said so
            out[label] = Timed(walls[label], {}, False)
    return out
