"""Numbers as people read them, in one place: bytes, seconds, rates, FLOP/s and counts, each with three
significant digits in the unit it reads best in. Bytes are decimal (SI: kB, MB, GB, TB, as the chips' data sheets
and XLA's own messages give them), never GiB; counts are words (billion), never a 'B' that reads as bytes.

Why three digits in a moving unit: a tiny model moves a few hundred bytes and steps in nanoseconds on a big
chip, a real one moves gigabytes and steps in seconds; a fixed unit prints one of them as 0.00.
"""

from __future__ import annotations

_BYTES = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
_FLOPS = (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9))
_SECONDS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9), ("ps", 1e-12))


def format_bytes(n: float) -> str:
    """'2.1 kB', '35.4 GB'; under a kilobyte the exact count, '677 B'."""
    for unit, size in _BYTES:
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:,.0f} B"


_COUNTS = (("trillion", 1e12), ("billion", 1e9), ("million", 1e6))


def format_count(n: float) -> str:
    """'70.6 billion', '124 million'; under a million the exact count, '30,081' (a short 'B' reads as bytes)."""
    for word, size in _COUNTS:
        if abs(n) >= size:
            return f"{n / size:.3g} {word}"
    return f"{n:,.0f}"


def format_rate(bytes_per_s: float | None) -> str:
    """'450 GB/s'; '—' when there is no link."""
    return "—" if not bytes_per_s else format_bytes(bytes_per_s) + "/s"


def format_flops(flops_per_s: float) -> str:
    """'989 TFLOP/s'."""
    for unit, size in _FLOPS:
        if flops_per_s >= size:
            return f"{flops_per_s / size:.3g} {unit}"
    return f"{flops_per_s:,.0f} FLOP/s"


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit a duration reads best in (its value between 1 and 1000): ('µs', 1e-6)."""
    return next(((unit, scale) for unit, scale in _SECONDS if seconds >= scale), _SECONDS[-1])


def format_seconds(seconds: float) -> str:
    """'412 ns', '1.25 ms', '2.27 s'."""
    if seconds <= 0:
        return "0 s"
    unit, scale = time_unit(seconds)
    value = seconds / scale
    return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
