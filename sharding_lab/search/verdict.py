"""The search's verdict, in words and as a table, written from the computed figures only. Each function takes
the :class:`~sharding_lab.search.search.Search` (``s``), which imports this module."""

from __future__ import annotations

import math

from .candidates import Result, gb, label


def _term_name(term: str) -> str:
    return {
        "compute_s": "compute",
        "memory_s": "HBM traffic",
        "comm_s": "communication bandwidth",
        "latency_s": "collective latency",
    }[term]


def why(s) -> str:
    """A paragraph, from the computed figures only: which term bounds the best, how much slower the
    runner-up is and which of its terms costs it, the per-chip batch against the critical batch."""
    from ..units import format_seconds

    best = s.best
    costed = s.costed
    if best is None and not costed:
        reasons = "; ".join(f"{n} × {reason}" for reason, n in s.skipped().items())
        return (
            f"No candidate fits: all {len(s.results)} were ruled out before compiling ({reasons}). Try more chips, "
            "a leaner optimizer, remat full or a smaller batch."
        )
    if best is None:
        refused = sum(1 for r in costed if not r.fits)
        return (
            f"No candidate fits: {len(s.results) - len(costed)} were skipped before compiling and {refused} of "
            f"{len(costed)} compiled do not fit in HBM. Try more chips, a leaner optimizer, remat full or a "
            "smaller batch."
        )
    t = best.terms
    words = [
        f"The fastest layout that fits is {label(best.candidate)}: a predicted step of "
        f"{format_seconds(best.step_s)}, {best.bound}-bound (compute {format_seconds(t['compute_s'])}, "
        f"HBM traffic {format_seconds(t['memory_s'])}, communication {format_seconds(t['comm_s'])} + "
        f"latency {format_seconds(t['latency_s'])}), {_utilisation(best)}, "
        f"{gb(best.hbm_per_chip)} of HBM per chip. " + _links_sentence(best)
    ]
    if len(s.fitting) > 1:
        second = s.fitting[1]
        worse = max(second.terms, key=lambda k: second.terms[k] - t[k])
        ratio = second.step_s / best.step_s
        slower = f"{ratio:.1f}× as slow" if ratio >= 2 else f"{ratio - 1:.1%} slower"
        among = " among the steps compiled to the end" if s.floored else ""
        words.append(
            f"The runner-up{among}, {label(second.candidate)}, is {slower} "
            f"({format_seconds(second.step_s)}, {second.bound}-bound); its {_term_name(worse)} costs it most: "
            f"{format_seconds(second.terms[worse])} against {format_seconds(t[worse])}."
        )
    if s.floored:
        nearest, many = s.floored[0], len(s.floored) > 1
        whose = "each one's" if many else "its"
        words.append(
            f"{len(s.floored)} other layout{'s' * many} fit{'s' * (not many)} but cannot be faster: "
            f"{whose} program, priced op by op once the compiler had decided it (before "
            f"generating its code), already takes at least as long as the best's step — the nearest, "
            f"{label(nearest.candidate)}, at least {format_seconds(nearest.step_floor_s)}."
        )
    elif len(s.fitting) == 1:
        words.append("No other candidate fits.")
    words.append(_critical_sentence(s, best))
    refused = [r for r in costed if not r.fits]
    floored = len(s.floored)
    words.append(
        f"{len(s.results)} candidates: {len(s.results) - len(costed) - floored} skipped before compiling, "
        + (f"{floored} answered at the compiler's memory check (they fit), " if floored else "")
        + f"{len(costed)} compiled, "
        + (f"{len(refused)} of them do not fit." if refused else "all of them fit.")
    )
    return " ".join(words)


def _utilisation(r) -> str:
    """'MFU 44% (the model's own FLOPs: …) and HFU 61% (…)': both, named (sharding_lab.cost.roofline)."""
    hfu = f"HFU {r.hfu:.0%} (the compiled program's FLOPs, recompute included)"
    return hfu if r.mfu is None else f"MFU {r.mfu:.0%} (the model's own FLOPs: 6·N per token + attention) and {hfu}"


def _links_sentence(r) -> str:
    """Where its axes run, as every page says it (hardware.placement.describe), and whose figures these are."""
    return (
        "Its axes: "
        + "; ".join(v["where"] for v in (r.links or {}).values())
        + ". Collective times are the scaling book's count on that placement; FLOPs, HBM traffic and memory are "
        "the compiler's."
    )


def _critical_sentence(s, best: Result) -> str:
    from ..cost.sweep import critical_batch

    config = best.candidate.config(s.base)
    if best.data_ways <= 1 or "data" not in config.mesh.axes:
        return (
            f"Its batch is not split (all {best.per_chip_tokens:,} tokens on every chip), so there is no "
            "data-parallel critical batch to hold it against."
        )
    chip = s.base.on.chip
    critical = critical_batch(chip, config, s.dtype, "data")
    rows = critical["rows_per_device"]
    if not rows:
        return ""
    side = "above" if best.per_chip_tokens >= rows else "below"
    return (
        f"Each chip holds {best.per_chip_tokens:,} tokens of the batch ({best.data_ways} data ways), "
        f"{side} the critical batch C/W = {rows:,.0f} tokens for the `data` axis ({critical['link']}): "
        + (
            "by the scaling book's count, the data axis's gradient traffic can hide behind compute."
            if side == "above"
            else "by the scaling book's count, a step waits on the data axis's gradient traffic, not on compute."
        )
    )


def ordered(s) -> list[Result]:
    """The rows of the answer: the compiled candidates fastest fitting first, those answered at their memory check
    (they fit, their step no less than their floor) among them by floor, the ones that do not fit last."""
    rows = [*s.costed, *s.floored]

    def step(r):
        return r.step_s if r.step_s is not None else r.step_floor_s if r.step_floor_s is not None else math.inf

    return sorted(rows, key=lambda r: (not r.fits, step(r)))


def depth_text(result: Result, s) -> str:
    """How a row's figures were compiled: the whole depth, or 1 and 2 layers extended to it (or, answered at its
    memory check, to there)."""
    layers = getattr(s.base.model, "layers", None)
    if result.skipped:
        return "to its memory check"
    if result.extended:
        return f"1+2 layers → {layers}"
    return f"{layers} layers" if layers else "whole"


def table(s) -> str:
    """The candidates as a readable table, fastest fitting first, then the others, then the skips."""
    from ..units import format_seconds

    rows = ordered(s)
    attention = any(r.candidate.attention for r in rows)
    across = any(r.candidate.across for r in rows)
    head = (
        f"{'mesh':<8} {'axes':<14} {'preset':<11} {'remat':<13} "
        + (f"{'attention':<9} " if attention else "")
        + (f"{'across':<7} " if across else "")
        + f"{'HBM/chip':>10} {'fits':<5} {'step':>10} "
        f"{'bound':<14} {'MFU':>6} {'HFU':>6}  {'compiled':<16}"
    )
    lines = [head, "-" * len(head)]
    best = s.best
    for r in rows:
        c = r.candidate
        hbm = f"{r.hbm_per_chip / 1e9:.2f} GB" if r.hbm_per_chip is not None else "refused"
        step = format_seconds(r.step_s) if r.step_s is not None else "-"
        if r.skipped:  # answered at its memory check: it fits, its step no less than its program's price
            hbm, step = "-", f"≥ {format_seconds(r.step_floor_s)}"
        mark = "  ← best" if r is best else ""
        if r.hbm_per_chip is not None and r.hbm_per_chip < 1e8:
            hbm = f"{r.hbm_per_chip / 1e6:.2f} MB"
        lines.append(
            f"{c.mesh_text:<8} {','.join(c.axes):<14} {c.preset:<11} {c.remat:<13} "
            + (f"{c.attention or '-':<9} " if attention else "")
            + (f"{c.across or '-':<7} " if across else "")
            + f"{hbm:>10} "
            f"{'yes' if r.fits else 'no':<5} {step:>10} {r.bound or '-':<14} "
            f"{(f'{r.mfu:.0%}' if r.mfu is not None else '-'):>6} {(f'{r.hfu:.0%}' if r.hfu is not None else '-'):>6}  "
            f"{depth_text(r, s):<16}{mark}"
        )
    for reason, count in s.skipped().items():
        lines.append(f"skipped {count:>3}: {reason}")
    return "\n".join(lines)


def first_table(ranked: list[Result], seconds: float, rows: int = 10) -> str:
    """The first ranking (:mod:`.first`) as text: the book's step for the fastest ``rows`` candidates that passed
    the screens, said to be the book's count, before the compiler's confirmations."""
    from ..units import format_seconds

    lines = [
        f"First ranking after {seconds:.1f} s — the scaling book's count (compute and network, no HBM traffic, fit "
        f"unknown) for {len(ranked)} candidates that pass the screens; compiled confirmations follow:"
    ]
    for r in ranked[:rows]:
        b = r.book
        lines.append(
            f"  {format_seconds(b['step_s']):>10}  {b['bound']:<13}  {label(r.candidate)}"
            f"  (compute {format_seconds(b['compute_s'])}, network {format_seconds(b['comm_s'])})"
        )
    if len(ranked) > rows:
        lines.append(f"  … and {len(ranked) - rows} more")
    return "\n".join(lines)
