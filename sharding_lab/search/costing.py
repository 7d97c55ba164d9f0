"""Compiling and costing one candidate: its step compiled for the target (whole, as a loop counted per
layer, or at 1 and 2 layers extended to the model's depth), priced by the roofline
(:func:`sharding_lab.cost.roofline.keyed_prediction`), and cached per candidate."""

from __future__ import annotations

import dataclasses
import functools
import threading

from ..training.config import LabConfig
from ..training.config import plan as make_plan
from .candidates import Candidate, Result, screen


@functools.lru_cache(maxsize=512)
def compiled_figures(config: LabConfig, dtype: str):
    """The target's compiled step for ``config`` with any scan of layers unrolled (cached): the
    :class:`~sharding_lab.cost.compiled.Compiled` figures of a loop-free program."""
    from ..cost.compiled import canonical, compile_once
    from ..models.remat import unrolled_scan

    with unrolled_scan():
        return compile_once(make_plan(canonical(config)), dtype)


def at_layers(config: LabConfig, layers: int) -> LabConfig:
    return dataclasses.replace(config, model=dataclasses.replace(config.model, layers=layers))


def extend(one, two, layers: int):
    """Figures of ``layers`` layers from compiles of 1 and 2: f(L) = f(1) + (L − 1)(f(2) − f(1)), per
    figure and per collective (op, axes): bytes and count. Returns (flops, hbm_bytes, hbm_needed, keyed)."""
    k = layers - 1

    def line(a, b):
        return a + k * (b - a)

    keyed = {}
    first, second = one.by_key(), two.by_key()
    for key in set(first) | set(second):
        a, b = first.get(key), second.get(key)
        example = (b or a)["example"]
        count = line(a["count"] if a else 0, b["count"] if b else 0)
        size = line(a["bytes"] if a else 0, b["bytes"] if b else 0)
        if count > 0 and size > 0:
            keyed[key] = {"count": int(round(count)), "bytes": size, "example": example}
    return (line(one.flops, two.flops), line(one.hbm_bytes, two.hbm_bytes), line(one.hbm_needed, two.hbm_needed), keyed)


def full_depth(config: LabConfig, dtype: str):
    """The step of ``config`` compiled whole, as ``cost`` compiles it (:func:`~sharding_lab.cost.compiled.
    compile_step`: a loop over layers compiled as it runs, its body counted by the loop's trips)."""
    from ..cost.compiled import canonical, compile_step

    return compile_step(make_plan(canonical(config)), dtype)


def prediction(config: LabConfig, dtype: str):
    """The roofline of ``config`` on its target and the depths compiled for it: compiled as it is, as
    ``cost`` does (≤ 2 layers: :func:`full_depth`) or extended from 1 and 2 layers, unrolled (the
    rematerialised blocks too:
    :class:`~sharding_lab.models.remat.unrolled_scan`), the 2-layer compile skipped when the compiler
    refuses the 1-layer one (more layers need more memory). A :class:`~sharding_lab.cost.prediction.Prediction`
    (refused when the compiler refused either) and the depths: ``(L,)`` compiled whole, ``(1, 2)`` extended."""
    from ..cost.compiled import loop_layers

    layers, looped = getattr(config.model, "layers", None), loop_layers(config)
    if layers is None or layers <= 2 or looped:
        # A scanned step (remat full) compiles in the same time at any depth: its loop body is one block.
        runs = [full_depth(config, dtype)]
    else:
        runs = [compiled_figures(at_layers(config, 1), dtype)]
        if not runs[0].refused:
            runs.append(compiled_figures(at_layers(config, 2), dtype))
    depths = (1, 2)[: len(runs)] if layers and layers > 2 and not looped else ((layers,) if layers else ())
    return prediction_of(config, dtype, runs), depths


def prediction_of(config: LabConfig, dtype: str, runs):
    """The Prediction of one compile (``runs`` of one) or of 1 and 2 layers extended to the model's depth."""
    from ..cost.roofline import keyed_prediction

    compile_s = sum(r.compile_s for r in runs)
    refused = next((r.refused for r in runs if r.refused), None)
    notes = []
    if refused or len(runs) == 1:
        c = runs[-1]
        flops, traffic, needed, keyed = c.flops, c.hbm_bytes, c.hbm_needed, c.by_key()
        notes += [n for n in (c.loop_note, c.kernel_note) if n]
        priced = c.priced
    else:
        layers = config.model.layers
        flops, traffic, needed, keyed = extend(*runs, layers)
        notes.append(f"extended linearly from compiles of 1 and 2 layers to {layers}")
        notes += [runs[-1].kernel_note] if runs[-1].kernel_note else []
        one, two = runs
        priced = one.priced.scaled(layers - 1, two.priced) if one.priced and two.priced else None
    calibration = runs[-1].calibration if priced is not None else None
    return keyed_prediction(
        config, dtype, (flops, traffic, needed), keyed, notes, compile_s, refused, priced, calibration
    )


def fill(result: Result, p) -> None:
    result.compile_s = p.compile_s
    result.refused = p.refused
    result.fits = p.fits
    result.hbm_per_chip = result.step_s = result.bound = result.mfu = result.hfu = result.terms = None
    result.roofline_step_s = None
    result.links = {
        a: {"link": link.name, "bytes_per_s": link.bytes_per_s if link.name != "none" else None, "where": link.why}
        for a, link in p.links.items()
    }
    if not p.refused:
        result.hbm_per_chip = p.hbm_needed
        result.step_s, result.bound, result.mfu, result.hfu = p.step_s, p.bound, p.mfu, p.hfu
        result.roofline_step_s = p.step_s
        result.terms = {"compute_s": p.compute_s, "memory_s": p.memory_s, "comm_s": p.comm_s, "latency_s": p.latency_s}
        if p.calibrated_step_s is not None:  # the plan ranks by the calibrated prediction; the roofline beside it
            result.step_s, result.mfu, result.hfu = p.calibrated_step_s, p.calibrated_mfu, p.calibrated_hfu
            result.calibration = p.calibration.name


_results: dict[tuple, Result] = {}
_results_lock = threading.Lock()


def cached(candidate: Candidate, base: LabConfig, dtype: str) -> Result | None:
    """The result of an earlier costing of ``candidate`` (same base configuration and dtype), if any."""
    with _results_lock:
        return _results.get((candidate, base, dtype))


def remember(candidate: Candidate, base: LabConfig, dtype: str, result: Result) -> None:
    """Keep ``result`` for :func:`cached` (and :func:`cost_candidate`)."""
    with _results_lock:
        _results[(candidate, base, dtype)] = result


def cost_candidate(candidate: Candidate, base: LabConfig, dtype: str) -> Result:
    """Screen and cost one candidate; cached per (candidate, base configuration, dtype)."""
    key = (candidate, base, dtype)
    with _results_lock:
        if key in _results:
            return _results[key]
    result = screen(candidate, base, dtype)
    if result.skipped is None:
        p, result.compiled_layers = prediction(candidate.config(base), dtype)
        fill(result, p)
    with _results_lock:
        _results[key] = result
    return result


# Layers from which a step without remat is first probed at a quarter of its depth: a deep step's full-depth probe is
# the costly one (llama3-8b's 32 layers: 70–270 s to a refusal), and one that fits pays the short probe on top
# (gpt2-small's 12 layers on v5e-8 fit: its 3-layer probe only added a compile).
SHORT_PROBE_FROM = 16


def short_probe_layers(layers: int) -> int:
    """The depth of a deep step's first probe: a quarter of its layers. A step the compiler refuses at fewer
    layers it refuses at more (they keep more), and the unrolled program's passes up to the memory check take
    time in proportion to its layers (llama3-8b without remat on v5e-256: 100–270 s at 32 layers, every one
    refused)."""
    return max(1, layers // 4)


def compile_job(kind: str, config: LabConfig, dtype: str):
    """One of a candidate's compiles, as a worker runs it (:mod:`sharding_lab.search.pool`): ``whole`` or
    ``looped`` (a remat-full step's loop as it runs, counted by its trips; ``resumed``: the same, sent again after it
    waited at its memory check) as ``cost`` compiles it; ``probe`` full
    depth, unrolled (watched only to its memory check), ``probe_short`` the same at :func:`short_probe_layers`;
    ``layers1`` / ``layers2`` 1 and 2 layers, unrolled, to extend."""
    if kind in ("whole", "looped", "resumed"):
        return full_depth(config, dtype)
    if kind == "probe_short":
        return compiled_figures(at_layers(config, short_probe_layers(config.model.layers)), dtype)
    return compiled_figures(config if kind == "probe" else at_layers(config, int(kind[-1])), dtype)


def first_jobs(config: LabConfig) -> tuple[str, ...]:
    """The compiles a candidate starts with: its loop as it runs (remat), a probe of its full depth (more than 2
    layers, unrolled; from :data:`SHORT_PROBE_FROM` layers, first at a quarter of it), or the step as ``cost``
    compiles it."""
    from ..cost.compiled import loop_layers

    layers = getattr(config.model, "layers", None)
    if loop_layers(config):
        return ("looped",)
    if layers is not None and layers >= SHORT_PROBE_FROM:
        return ("probe_short",)
    return ("probe",) if layers is not None and layers > 2 else ("whole",)
