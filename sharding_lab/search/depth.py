"""The depth check: an extended best (figures from 1 and 2 layers) compiled at full depth as ``cost`` does,
each figure's relative error reported, and the full-depth figures adopted (:func:`adopt_full_depth`, on the
:class:`~sharding_lab.search.search.Search`, which imports this module)."""

from __future__ import annotations

from ..errors import ConfigError
from ..training.config import LabConfig
from .candidates import Candidate, label
from .costing import at_layers, compiled_figures, extend, fill, full_depth, prediction_of


def check_extension(candidate: Candidate, base: LabConfig, dtype: str, layers: int | None = None) -> dict:
    """Compile ``candidate`` at full depth (or ``layers`` layers) as ``cost`` does (:func:`full_depth`), and
    compare each figure extended from 1 and 2 layers with it."""
    layers = min(layers or base.model.layers, base.model.layers)
    if layers <= 2:
        raise ConfigError(f"the extension is checked against a compile of more than 2 layers, not {layers}", "model")
    full = full_depth(at_layers(candidate.config(base), layers), dtype)
    one, two = (compiled_figures(at_layers(candidate.config(base), n), dtype) for n in (1, 2))
    if full.refused or one.refused or two.refused:
        return {
            "candidate": label(candidate),
            "layers": layers,
            "full_depth": layers == base.model.layers,
            "compile_s": round(full.compile_s, 1),
            "refused": full.refused or one.refused or two.refused,
        }
    flops, traffic, needed, keyed = extend(one, two, layers)
    measured = full.by_key()
    wire = sum(v["bytes"] for v in keyed.values()), sum(v["bytes"] for v in measured.values())
    counts = sum(v["count"] for v in keyed.values()), sum(v["count"] for v in measured.values())
    errors = {
        "flops": _rel(flops, full.flops),
        "hbm_bytes": _rel(traffic, full.hbm_bytes),
        "hbm_needed": _rel(needed, full.hbm_needed),
        "collective_bytes": _rel(*wire),
        "collective_count": _rel(*counts),
    }
    return {
        "candidate": label(candidate),
        "layers": layers,
        "full_depth": layers == base.model.layers,
        "compile_s": round(full.compile_s, 1),
        "loop": full.loop_note,
        "relative_error": errors,
        "max_relative_error": max(abs(e) for e in errors.values()),
        "extended": {"flops": flops, "hbm_bytes": traffic, "hbm_needed": needed},
        "compiled": {"flops": full.flops, "hbm_bytes": full.hbm_bytes, "hbm_needed": full.hbm_needed},
    }


def adopt_full_depth(out, check_layers: int | None, tries: int = 3) -> None:
    """Check the extension on the best, and when the check compiled it whole (full depth) take that compile's
    figures for it — the very figures ``cost`` gives. Should the best then not fit, or be slower than another
    fitting candidate, the new best is checked too (at most ``tries`` candidates)."""
    checked: set = set()
    while out.best is not None and out.best.candidate not in checked and len(checked) < tries:
        best = out.best
        checked.add(best.candidate)
        if best.extension is not None and best.extension["layers"] == min(check_layers or 10**9, out.base.model.layers):
            out.extension = best.extension  # checked (and adopted) by an earlier search
            continue
        if not best.extended:
            return
        out.extension = best.extension = check_extension(best.candidate, out.base, out.dtype, check_layers)
        if not out.extension.get("full_depth"):
            return
        p = prediction_of(
            best.candidate.config(out.base), out.dtype, [full_depth(best.candidate.config(out.base), out.dtype)]
        )
        fill(best, p)
        best.compiled_layers = (out.base.model.layers,)
        best.compile_s += p.compile_s
    if checked and out.best is not None and out.best.candidate not in checked and out.best.extended:
        out.extension = {**(out.extension or {}), "unchecked_best": label(out.best.candidate)}


def _rel(extended: float, compiled: float) -> float:
    return (extended - compiled) / compiled if compiled else (0.0 if extended == 0 else float("inf"))
