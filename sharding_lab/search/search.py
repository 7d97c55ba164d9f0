"""The search: every layout of a model on a target slice, compiled and costed, and the fastest that fits.

A JAX engineer's question — "how should I shard this model on this slice, and what will a step
cost?" — answered by enumerating and letting the compiler decide:

1. **Enumerate.** Mesh shapes are the factorisations of the slice's chip count into one axis
   (``data``) or two (``data`` × ``model``); the model family's presets (its roles are only ``data`` and
   ``model``, so three axes would add nothing a preset could use — counted as skipped, with that
   reason); rematerialisation ``none`` or ``full`` where the family has it. The global batch is given
   in tokens (``batch_tokens`` ÷ ``seq`` sequences).
2. **Skip what cannot work**, counting why: the plan refuses it (:func:`sharding_lab.training.config.plan`'s
   ``ConfigError``: a batch the data axis does not divide, a preset that needs two axes), more
   tensor-parallel ways than heads, a weight dimension the mesh cannot split (JAX would silently
   replicate it: not the layout the preset names; K/V heads are the exception, replicated on purpose as
   Megatron does when ``model`` exceeds ``kv_heads``) — and what memory already rules out: parameters +
   optimizer state + gradients per chip, from the plan's own layouts, more than the chip's HBM; with
   remat full, those + every block's input (the residual stream a scan keeps for its backward pass,
   :func:`kept_inputs_per_chip`). Each layout is tried with remat full first: when even that does not
   fit, the layout without remat (which keeps those inputs and more) is skipped, not compiled.
3. **Compile and cost** each remaining candidate for the target (:mod:`sharding_lab.cost`): the
   roofline of the TPU compiler's program, ``fits`` the compiler's memory answer. ``workers`` processes
   compile at once (the CLI: one per core), each compile watched to the compiler's memory check
   (:mod:`sharding_lab.search.pool`), so that the next compile can start, or a probe be abandoned,
   before code generation (40–100 s per block of a real model).

**Depth.** A step with remat full runs its blocks as a ``lax.scan``: its compile takes the same time at
any depth (the loop's body is one block), so it is compiled at full depth exactly as ``cost`` compiles it
(the loop as it runs, and unrolled by 2 to count the body: :func:`sharding_lab.cost.compiled.compile_step`;
the two compiles in parallel). A step without remat is unrolled, and compiling a real depth unrolled takes
minutes: it is probed at full depth only to the compiler's memory check (a refusal or a total over HBM is
exact and ends it), and, should it fit, compiled with 1 and 2 layers and every figure — FLOPs, HBM traffic,
HBM needed, each collective's bytes and count — extended linearly: ``f(L) = f(1) + (L − 1)·(f(2) − f(1))``
(in one process, ``workers=1``, it is not probed). :func:`check_extension` compiles an extended best at full
depth as ``cost`` does and reports each figure's relative error; the best then carries the full-depth
figures — ``cost``'s own — and, should it no longer fit or lead, the next is checked
(:func:`_adopt_full_depth`). A model of at most 2 layers is compiled as it is (nothing extended).

Results are cached per candidate (:func:`cost_candidate`), a ``threading.Event`` stops the search between
candidates, and a callback reports progress. :func:`why` writes the verdict from the computed figures only.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import threading
import time
from typing import Callable

from ..errors import ConfigError
from ..hardware import targets
from ..sharding.mesh import MeshSpec
from ..training.config import LabConfig
from ..training.config import plan as make_plan

REMATS = ("none", "full")
SKIP_THREE_AXES = "three mesh axes: the presets have only two roles (data, model)"
SKIP_TWO_AXES = "needs two mesh axes"
SKIP_BATCH = "batch not divisible by the data ways"
SKIP_HEADS = "more tensor-parallel ways than heads"
SKIP_INDIVISIBLE = "a weight dimension the mesh cannot split (JAX would replicate it)"
SKIP_MEMORY = "parameters + optimizer state + gradients per chip exceed HBM"
SKIP_MEMORY_INPUTS = (
    "with remat full, parameters + optimizer state + gradients + every block's input per chip exceed HBM"
)
SKIP_OTHER = "the plan refuses it"
SKIP_NO_REMAT = "the model has no remat option"
SKIP_REMAT_FULL_REFUSED = (
    "remat full of the same layout does not fit (compiled, or by the block inputs it keeps), "
    "and without remat a step keeps more"
)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One layout to try: a mesh, a preset, a rematerialisation."""

    mesh: tuple[int, ...]
    axes: tuple[str, ...]
    preset: str
    remat: str

    @property
    def mesh_text(self) -> str:
        return "x".join(map(str, self.mesh))

    def config(self, base: LabConfig) -> LabConfig:
        model = dataclasses.replace(base.model, remat=self.remat) if hasattr(base.model, "remat") else base.model
        return dataclasses.replace(
            base, mesh=MeshSpec(self.mesh, self.axes), preset=self.preset, rules=None, model=model
        )


@dataclasses.dataclass
class Result:
    """A candidate and what became of it: skipped (``skipped`` says why) or costed."""

    candidate: Candidate
    skipped: str | None = None
    detail: str = ""  # the plan's own sentence, for a skip
    hbm_per_chip: float | None = None  # bytes: the compiler's (extended) figure; for a memory skip, the analytic one
    fits: bool | None = None
    refused: str | None = None
    step_s: float | None = None
    bound: str | None = None
    mfu: float | None = None
    terms: dict | None = None  # compute_s, memory_s, comm_s, latency_s
    per_chip_tokens: int | None = None
    data_ways: int = 1
    compile_s: float = 0.0
    compiled_layers: tuple[int, ...] = ()  # the depths compiled: (L,) as it is, (1, 2) extended to L
    extension: dict | None = None  # the check of its extension, once made (check_extension)

    @property
    def extended(self) -> bool:
        return len(self.compiled_layers) > 1

    def to_json(self) -> dict:
        c = self.candidate
        return {
            "mesh": c.mesh_text,
            "axes": list(c.axes),
            "preset": c.preset,
            "remat": c.remat,
            "hbm_per_chip": self.hbm_per_chip,
            "fits": self.fits,
            "step_s": self.step_s,
            "bound": self.bound,
            "mfu": self.mfu,
            "skipped": self.skipped,
            "why_skipped": self.detail or None,
            "refused": self.refused,
            "terms": self.terms,
            "per_chip_tokens": self.per_chip_tokens,
            "compile_s": round(self.compile_s, 2),
            "compiled_layers": list(self.compiled_layers) or None,
        }


@dataclasses.dataclass
class Search:
    """The whole search: every candidate's result, the best that fits, the extension check and the why."""

    base: LabConfig
    dtype: str
    batch_tokens: int
    results: list[Result]
    stopped: bool = False
    elapsed_s: float = 0.0
    extension: dict | None = None
    compiled_layers: tuple[int, ...] = ()

    @property
    def costed(self) -> list[Result]:
        return [r for r in self.results if r.skipped is None]

    @property
    def fitting(self) -> list[Result]:
        return sorted((r for r in self.costed if r.fits), key=lambda r: r.step_s)

    @property
    def best(self) -> Result | None:
        return self.fitting[0] if self.fitting else None

    def skipped(self) -> dict[str, int]:
        return dict(collections.Counter(r.skipped for r in self.results if r.skipped))

    def to_json(self) -> dict:
        best = self.best
        return {
            "model": self.base.family.name,
            "size": self.base.family.size_name(self.base.model),
            "target": self.base.target,
            "dtype": self.dtype,
            "optimizer": self.base.optimizer,
            "batch_tokens": self.batch_tokens,
            "seq": self.base.model.seq,
            "batch": self.base.batch_size,
            "layers": getattr(self.base.model, "layers", None),
            "compiled_layers": list(self.compiled_layers),
            "candidates": [r.to_json() for r in self.results if r.skipped is None],
            "best": best.to_json() if best else None,
            "skipped": self.skipped(),
            "skipped_candidates": [r.to_json() for r in self.results if r.skipped],
            "why": why(self),
            "extension_check": self.extension,
            "stopped": self.stopped,
            "elapsed_s": round(self.elapsed_s, 1),
            "candidates_per_s": round(len(self.results) / self.elapsed_s, 3) if self.elapsed_s else None,
        }


# --- enumerate ----------------------------------------------------------------------------------


def mesh_shapes(chips: int) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """One axis (``data``: all chips) and every two-axis factorisation ``data × model`` with both > 1."""
    shapes = [((chips,), ("data",))]
    shapes += [((a, chips // a), ("data", "model")) for a in range(2, chips) if chips % a == 0]
    return shapes


def three_axis_count(chips: int) -> int:
    """How many 3-axis factorisations (every size > 1) there are: skipped, no preset has a third role."""
    return sum(1 for a in range(2, chips) for b in range(2, chips) if chips % (a * b) == 0 and chips // (a * b) > 1)


def base_config(model, target: str, batch_tokens: int, optimizer: str = "adamw", lr: float = 0.003) -> LabConfig:
    """The search's starting configuration: ``batch_tokens`` ÷ the model's ``seq`` sequences a step."""
    on = targets.parse(target)
    if on.kind != "tpu":
        raise ConfigError(
            f"plan searches TPU slices (v5e-N, v6e-N, v5p-N), whose compiler reports FLOPs and "
            f"refuses what does not fit; {on.name} is not one",
            "target",
        )
    targets.check(on)
    seq = model.seq
    if not isinstance(batch_tokens, int) or batch_tokens < seq or batch_tokens % seq:
        raise ConfigError(
            f"--batch-tokens must be a multiple of the sequence length {seq}, got {batch_tokens}: "
            f"e.g. {seq * max(1, (batch_tokens or 0) // seq) or seq}",
            "batch",
        )
    return LabConfig(
        mesh=MeshSpec((on.devices,), ("data",)),
        preset=None,
        model=model,
        optimizer=optimizer,
        lr=lr,
        batch_size=batch_tokens // seq,
        steps=1,
        chunk=1,
        target=on.name,
    )


def candidates(
    base: LabConfig, presets: tuple[str, ...] | None = None, remats: tuple[str, ...] | None = None
) -> list[Candidate]:
    """Meshes × presets × remat, in that order."""
    chips = targets.parse(base.target).devices
    presets = tuple(presets or base.family.presets)
    has_remat = hasattr(base.model, "remat")
    remats = tuple(remats or (REMATS if has_remat else ("none",)))
    return [
        Candidate(shape, axes, preset, remat)
        for shape, axes in mesh_shapes(chips)
        for preset in presets
        for remat in remats
    ]


def data_ways(config: LabConfig) -> int:
    """How many ways the batch is split: the product of the mesh axes the batch's rule names."""
    from ..sharding.rules import axis_names

    rules = config.resolved_rules()
    sizes = config.mesh.axis_sizes
    return math.prod(sizes[a] for a in axis_names(rules.target("batch")) if a in sizes) if rules.target("batch") else 1


def model_ways(config: LabConfig) -> int:
    from ..sharding.rules import axis_names

    rules = config.resolved_rules()
    sizes = config.mesh.axis_sizes
    return math.prod(sizes[a] for a in axis_names(rules.target("heads")) if a in sizes) if rules.target("heads") else 1


def state_bytes_per_chip(plan) -> int:
    """Parameters + optimizer state + gradients (one more copy of the parameters) on the fullest chip,
    from the plan's layouts (f32: the state of mixed precision and f32)."""
    layouts = plan.layouts()
    params = sum(a.bytes_per_device for p, a in layouts.items() if p.startswith("params/"))
    optimizer = sum(a.bytes_per_device for p, a in layouts.items() if p.startswith("opt/"))
    return params + optimizer + params


def screen(candidate: Candidate, base: LabConfig, dtype: str) -> Result:
    """Plan the candidate; a Result with ``skipped`` set when it cannot work or cannot fit."""
    from ..hardware.chips import chip as get_chip

    config = candidate.config(base)
    result = Result(candidate)
    try:
        config.resolved_rules()
        heads, ways = getattr(base.model, "heads", None), model_ways(config)
        if heads is not None and ways > heads:  # before plan(): it would ask the compiler how JAX falls back
            result.skipped, result.detail = SKIP_HEADS, f"{ways} tensor-parallel ways but {heads} heads"
            return result
        plan = make_plan(config)
    except ConfigError as error:
        text = str(error)
        reason = (
            SKIP_TWO_AXES
            if "needs two different mesh axes" in text
            else SKIP_BATCH
            if error.field == "batch"
            else SKIP_OTHER
        )
        result.skipped, result.detail = reason, text
        return result
    except Exception as error:  # the target's compiler refused plan()'s one-op probe of a fallback layout
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        result.skipped, result.detail = SKIP_INDIVISIBLE, str(error).splitlines()[0]
        return result
    result.data_ways = data_ways(config)
    result.per_chip_tokens = base.batch_size * base.model.seq // result.data_ways
    lost = [
        w
        for w in plan.warnings
        if "cannot be split" in w and not w.startswith(tuple(f"params/{p}" for p in _replicable(plan)))
    ]
    if lost:
        result.skipped, result.detail = SKIP_INDIVISIBLE, lost[0]
        return result
    need = state_bytes_per_chip(plan)
    if dtype == "bf16":
        need //= 2
    hbm = get_chip(targets.parse(base.target).chip).capacity
    if need > hbm:
        result.skipped, result.hbm_per_chip, result.fits = SKIP_MEMORY, float(need), False
        result.detail = (
            f"{need / 1e9:.1f} GB of parameters, optimizer state and gradients per chip > {hbm / 1e9:.1f} GB usable"
        )
        return result
    kept = kept_inputs_per_chip(plan, dtype)
    if kept and need + kept > hbm:
        result.skipped, result.hbm_per_chip, result.fits = SKIP_MEMORY_INPUTS, float(need + kept), False
        result.detail = (
            f"{need / 1e9:.1f} GB of parameters, optimizer state and gradients + {kept / 1e9:.1f} GB of "
            f"block inputs ({config.model.layers} × the residual stream's {_gb(kept / config.model.layers)}) "
            f"per chip > {hbm / 1e9:.1f} GB usable"
        )
    return result


def kept_inputs_per_chip(plan, dtype: str) -> int:
    """Bytes a step with remat full keeps whatever the compiler does: each block's input, the residual stream
    (``act/resid``, in the compute dtype), for the backward pass — the carries a scan saves for its
    transpose (XLA does not recompute across a loop). 0 when the model has no loop over layers."""
    import numpy as np

    from ..cost.compiled import DTYPES, loop_layers

    layers = loop_layers(plan.config)
    resid = plan.layouts().get("act/resid")
    if not layers or resid is None:
        return 0
    return layers * resid.bytes_per_device * np.dtype(DTYPES[dtype]).itemsize // 4


def _replicable(plan) -> tuple[str, ...]:
    """Parameter paths JAX may replicate on purpose: K and V when ``model`` exceeds the K/V heads."""
    return tuple(
        p[len("params/") :] for p, a in plan.arrays.items() if p.startswith("params/") and "kv_heads" in a.logical_axes
    )


# --- compile and cost ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def compiled_figures(config: LabConfig, dtype: str):
    """The target's compiled step for ``config`` with any scan of layers unrolled (cached): the
    :class:`~sharding_lab.cost.compiled.Compiled` figures of a loop-free program."""
    from ..cost.compiled import _compile_once, canonical
    from ..models.transformer import unrolled_scan

    with unrolled_scan():
        return _compile_once(canonical(config), dtype)


def _at_layers(config: LabConfig, layers: int) -> LabConfig:
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


def prediction(config: LabConfig, dtype: str):
    """The roofline of ``config`` on its target and the depths compiled for it: compiled as it is, as
    ``cost`` does (≤ 2 layers: :func:`full_depth`) or extended from 1 and 2 layers, unrolled (the
    rematerialised blocks too:
    :class:`~sharding_lab.models.transformer.unrolled_scan`), the 2-layer compile skipped when the compiler
    refuses the 1-layer one (more layers need more memory). A :class:`~sharding_lab.cost.roofline.Prediction`
    (refused when the compiler refused either) and the depths: ``(L,)`` compiled whole, ``(1, 2)`` extended."""
    from ..cost.compiled import loop_layers

    layers, looped = getattr(config.model, "layers", None), loop_layers(config)
    if layers is None or layers <= 2 or looped:
        # A scanned step (remat full) compiles in the same time at any depth: its loop body is one block.
        runs = [full_depth(config, dtype)]
    else:
        runs = [compiled_figures(_at_layers(config, 1), dtype)]
        if not runs[0].refused:
            runs.append(compiled_figures(_at_layers(config, 2), dtype))
    depths = (1, 2)[: len(runs)] if layers and layers > 2 and not looped else ((layers,) if layers else ())
    return _prediction_of(config, dtype, runs), depths


def _prediction_of(config: LabConfig, dtype: str, runs):
    """The Prediction of one compile (``runs`` of one) or of 1 and 2 layers extended to the model's depth."""
    from ..cost.roofline import Prediction, _comm_rows
    from ..hardware.chips import axis_links
    from ..hardware.chips import chip as get_chip

    on = targets.parse(config.target)
    chip = dataclasses.replace(get_chip(on.chip), torus=on.torus)
    mesh, axes = tuple(config.mesh.shape), tuple(config.mesh.axes)
    notes = [n for n in [chip.flops(dtype)[1]] if n]
    compile_s = sum(r.compile_s for r in runs)
    refused = next((r.refused for r in runs if r.refused), None)
    if refused or len(runs) == 1:
        c = runs[-1]
        flops, traffic, needed, keyed = c.flops, c.hbm_bytes, c.hbm_needed, c.by_key()
        notes += [c.loop_note] if c.loop_note else []
    else:
        layers = config.model.layers
        flops, traffic, needed, keyed = extend(*runs, layers)
        notes.append(f"extended linearly from compiles of 1 and 2 layers to {layers}")
    return Prediction(
        chip,
        dtype,
        mesh,
        axes,
        flops,
        traffic,
        needed,
        axis_links(chip, mesh, axes),
        _comm_rows(chip, mesh, axes, keyed),
        [mesh],
        False,
        notes,
        target=on.name,
        compile_s=compile_s,
        refused=refused,
    )


def _fill(result: Result, p) -> None:
    result.compile_s = p.compile_s
    result.refused = p.refused
    result.fits = p.fits
    result.hbm_per_chip = result.step_s = result.bound = result.mfu = result.terms = None
    if not p.refused:
        result.hbm_per_chip = p.hbm_needed
        result.step_s, result.bound, result.mfu = p.step_s, p.bound, p.mfu
        result.terms = {"compute_s": p.compute_s, "memory_s": p.memory_s, "comm_s": p.comm_s, "latency_s": p.latency_s}


_results: dict[tuple, Result] = {}
_results_lock = threading.Lock()


def is_cached(candidate: Candidate, base: LabConfig, dtype: str) -> bool:
    """Whether :func:`cost_candidate` has this candidate's result already (no compile needed)."""
    with _results_lock:
        return (candidate, base, dtype) in _results


def _counting(progress, counted: int, done: int, total: int, result: Result) -> None:
    progress(counted + done, counted + total, result)


def cost_candidate(candidate: Candidate, base: LabConfig, dtype: str) -> Result:
    """Screen and cost one candidate; cached per (candidate, base configuration, dtype)."""
    key = (candidate, base, dtype)
    with _results_lock:
        if key in _results:
            return _results[key]
    result = screen(candidate, base, dtype)
    if result.skipped is None:
        p, result.compiled_layers = prediction(candidate.config(base), dtype)
        _fill(result, p)
    with _results_lock:
        _results[key] = result
    return result


def search(
    base: LabConfig,
    dtype: str = "mixed",
    presets: tuple[str, ...] | None = None,
    remats: tuple[str, ...] | None = None,
    progress: Callable[[int, int, Result], None] | None = None,
    stop: threading.Event | None = None,
    check: bool = True,
    check_layers: int | None = None,
    workers: int | None = 1,
) -> Search:
    """Every candidate of ``base`` on its target, screened, compiled and costed; the extension checked
    against one compile of the best (``check``) at full depth, or at ``check_layers`` (> 2) layers when a
    full-depth unrolled compile would take too long. ``workers`` > 1 compiles that many candidates at
    once, each in its own process (None: one per CPU core, at most 4)."""
    from ..cost.compiled import dtype_name

    dtype = dtype_name(dtype)
    started = time.perf_counter()
    todo = candidates(base, presets, remats)
    results = [
        Result(Candidate((0,), (), "-", "-"), skipped=SKIP_THREE_AXES)
        for _ in range(three_axis_count(targets.parse(base.target).devices))
    ]
    if not hasattr(base.model, "remat") and remats and set(remats) - {"none"}:
        results += [Result(Candidate((0,), (), "-", r), skipped=SKIP_NO_REMAT) for r in set(remats) - {"none"}]
    stopped = False
    # Each layout with remat full first: when even that does not fit, the same layout without remat (which
    # keeps every block's activations, not only its input) is skipped instead of compiled.
    first: dict[tuple, int] = {}
    for i, c in enumerate(todo):
        first.setdefault((c.mesh, c.axes, c.preset), i)
    order = sorted(
        range(len(todo)), key=lambda i: (first[todo[i].mesh, todo[i].axes, todo[i].preset], todo[i].remat != "full")
    )
    queue = [todo[i] for i in order]
    workers = _workers(base, workers)
    step = _run_serial if workers <= 1 else functools.partial(_run_pool, workers=workers)
    counted = len(results)  # skipped before the queue: progress counts them, as the result does
    if progress is not None and counted:
        progress = functools.partial(_counting, progress, counted)
    stopped = step(queue, base, dtype, stop, results, progress)
    out = Search(
        base,
        dtype,
        base.batch_size * base.model.seq,
        results,
        stopped,
        compiled_layers=tuple(sorted({n for r in results for n in r.compiled_layers if n})),
    )
    if check and not stopped:
        _adopt_full_depth(out, check_layers)
    out.elapsed_s = time.perf_counter() - started
    return out


SMALL_MODEL = 10_000_000  # parameters: below it a compile takes about a second, less than starting a worker


def _workers(base: LabConfig, workers: int | None) -> int:
    """How many processes compile at once: ``workers``, or for None the CPU cores (at most 4) — but one for
    a model under :data:`SMALL_MODEL` parameters (a worker process takes ~4 s to start: more than such a
    compile) and for a family from the user's own module, which a fresh process would not have registered."""
    import os

    if not type(base.family).__module__.startswith("sharding_lab."):
        return 1
    if workers is None and base.family.parameter_count(base.model) < SMALL_MODEL:
        return 1
    return max(1, min(4, os.cpu_count() or 1) if workers is None else int(workers))


def _pruned(candidate: Candidate, base: LabConfig, dtype: str, done: dict) -> Result | None:
    """A remat-none candidate whose remat-full twin does not fit — compiled and refused or over HBM, or ruled
    out by the block inputs it must keep — is skipped, said why: without remat a step keeps every block's
    input too, and the rest of its activations."""
    twin = done.get(dataclasses.replace(candidate, remat="full"))
    if (
        candidate.remat != "none"
        or twin is None
        or twin.fits
        or (twin.skipped is not None and twin.skipped != SKIP_MEMORY_INPUTS)
    ):
        return None
    result = screen(candidate, base, dtype)
    if result.skipped is None:
        result.skipped = SKIP_REMAT_FULL_REFUSED
        result.detail = f"{_label(twin.candidate)}: " + (
            twin.refused or twin.detail or f"{_gb(twin.hbm_per_chip)} per chip"
        )
    return result


def _run_serial(queue, base, dtype, stop, results, progress) -> bool:
    done: dict[Candidate, Result] = {}
    for n, candidate in enumerate(queue):
        if stop is not None and stop.is_set():
            return True
        result = _pruned(candidate, base, dtype, done) or cost_candidate(candidate, base, dtype)
        done[candidate] = result
        results.append(result)
        if progress:
            progress(n + 1, len(queue), result)
    return False


def compile_job(kind: str, config: LabConfig, dtype: str):
    """One of a candidate's compiles, as a worker runs it (:mod:`sharding_lab.search.pool`): ``whole`` as
    ``cost`` compiles it; ``looped`` / ``looped2`` a remat-full step's loop as it runs / unrolled by 2 (the
    two halves of :func:`~sharding_lab.cost.compiled.compile_step`); ``probe`` full depth, unrolled (watched
    only to its memory check); ``layers1`` / ``layers2`` 1 and 2 layers, unrolled, to extend."""
    from ..cost.compiled import _compile_once, canonical
    from ..models.transformer import unrolled_scan

    if kind == "whole":
        return full_depth(config, dtype)
    if kind in ("probe", "layers1", "layers2"):
        return compiled_figures(config if kind == "probe" else _at_layers(config, int(kind[-1])), dtype)
    with unrolled_scan(2 if kind == "looped2" else 1):
        return _compile_once(canonical(config), dtype)


def _first_jobs(config: LabConfig) -> tuple[str, ...]:
    """The compiles a candidate starts with: its loop as it runs (remat full), a probe of its full depth
    (more than 2 layers, unrolled), or the step as ``cost`` compiles it."""
    from ..cost.compiled import loop_layers

    layers = getattr(config.model, "layers", None)
    return ("looped",) if loop_layers(config) else ("probe",) if layers is not None and layers > 2 else ("whole",)


def _run_pool(queue, base, dtype, stop, results, progress, workers: int) -> bool:
    """The queue compiled by ``workers`` processes (:mod:`sharding_lab.search.pool`), each candidate
    screened here first (a skip never leaves this process). Each compile is watched to the compiler's memory
    check: a remat-full step's 2-block compile starts beside its looped one once that one has passed it; a
    full-depth probe of a step without remat that passes it is abandoned (its worker replaced) for 1 and 2
    layers, extended — a refusal is the compiler's own answer at full depth. A remat-none candidate starts
    once its remat-full twin's fit is known (it may be pruned). libtpu in several processes at once:
    :func:`sharding_lab.hardware.targets.quiet_libtpu` allows it."""
    from ..cost.compiled import loop_figures
    from ..hardware.chips import chip as get_chip
    from . import pool as sw

    targets.quiet_libtpu()
    capacity = get_chip(targets.parse(base.target).chip).capacity
    context = sw.context()
    pool = [sw.Worker(context) for _ in range(workers)]
    done: dict[Candidate, Result] = {}
    passed_check: dict[Candidate, bool] = {}  # a remat-full twin that passed the compiler's memory check
    pending: dict[Candidate, Result] = {}
    parts: dict[Candidate, dict] = {}
    checked: set = set()
    jobs: collections.deque = collections.deque()
    waiting = list(queue)
    count = 0

    def record(candidate, result):
        nonlocal count
        done[candidate] = result
        results.append(result)
        count += 1
        if progress:
            progress(count, len(queue), result)

    def enqueue(candidate, kind, urgent=False):
        job = sw.Job((candidate, kind), compile_job, (kind, candidate.config(base), dtype))
        jobs.appendleft(job) if urgent else jobs.append(job)

    def finish(candidate, runs, depths):
        result = pending.pop(candidate)
        parts.pop(candidate, None)
        _fill(result, _prediction_of(candidate.config(base), dtype, runs))
        result.compiled_layers = depths
        with _results_lock:
            _results[(candidate, base, dtype)] = result
        record(candidate, result)

    def on_result(candidate, kind, compiled):
        if candidate not in pending:
            return  # its answer came from another compile (a refused 1-layer compile ends it)
        got = parts.setdefault(candidate, {})
        got[kind] = compiled
        layers = getattr(base.model, "layers", None)
        if kind == "whole" or (kind == "probe" and (compiled.refused or compiled.hbm_needed > capacity)):
            finish(candidate, [compiled], (layers,) if layers else ())
        elif kind == "probe":  # compiled whole before its memory check was seen (a small model): it fits, so
            enqueue(candidate, "layers1", urgent=True)  # extended as when the check is seen (and as in one process)
            enqueue(candidate, "layers2", urgent=True)
        elif kind == "looped":
            passed_check[candidate] = not compiled.refused
            if compiled.refused:
                finish(candidate, [compiled], (layers,))
            elif "looped2" in got:
                finish(candidate, [loop_figures(compiled, got["looped2"], layers)], (layers,))
            elif (candidate, "looped") not in checked:
                enqueue(candidate, "looped2", urgent=True)
        elif kind == "looped2" and "looped" in got:
            finish(candidate, [loop_figures(got["looped"], compiled, layers)], (layers,))
        elif kind == "layers1" and compiled.refused:
            finish(candidate, [compiled], (1,))
        elif kind in ("layers1", "layers2") and {"layers1", "layers2"} <= set(got):
            finish(candidate, [got["layers1"], got["layers2"]], (1, 2))

    def on_memory_check(index, candidate, kind):
        checked.add((candidate, kind))
        if kind == "probe":  # it fits at full depth: abandon the unrolled program before code generation,
            pool[index].kill()  # and compile 1 and 2 layers to extend
            pool[index] = sw.Worker(context)
            enqueue(candidate, "layers1", urgent=True)
            enqueue(candidate, "layers2", urgent=True)
        else:  # the loop as it runs fits: its 2-block twin starts now, beside it
            passed_check[candidate] = True
            enqueue(candidate, "looped2", urgent=True)

    try:
        while waiting or pending:
            if stop is not None and stop.is_set():
                return True
            for candidate in list(waiting):
                twin = dataclasses.replace(candidate, remat="full")
                if candidate.remat == "none" and twin in queue and twin not in done and twin not in passed_check:
                    continue  # its twin's fit first
                waiting.remove(candidate)
                with _results_lock:
                    cached = _results.get((candidate, base, dtype))
                result = cached or _pruned(candidate, base, dtype, done) or screen(candidate, base, dtype)
                if cached or result.skipped is not None:
                    record(candidate, result)
                    continue
                pending[candidate] = result
                for kind in _first_jobs(candidate.config(base)):
                    enqueue(candidate, kind)
            for worker in pool:
                while worker.job is None and jobs:
                    job = jobs.popleft()
                    if job.key[0] in pending:
                        worker.send(job)
            for index, worker in enumerate(pool):
                if worker.job is None:
                    continue
                candidate, kind = worker.job.key
                compiled = worker.result()
                if compiled is not None:
                    on_result(candidate, kind, compiled)
                elif kind in ("looped", "probe") and (candidate, kind) not in checked and worker.memory_checked():
                    on_memory_check(index, candidate, kind)
            time.sleep(0.1)
        return False
    finally:
        for worker in pool:
            worker.kill() if worker.job is not None else worker.stop()


def full_depth(config: LabConfig, dtype: str):
    """The step of ``config`` compiled whole, as ``cost`` compiles it (:func:`~sharding_lab.cost.compiled.
    compile_step`: a loop over layers compiled as it runs and unrolled by 2, its body counted per layer)."""
    from ..cost.compiled import canonical, compile_step

    return compile_step(canonical(config), dtype)


def check_extension(candidate: Candidate, base: LabConfig, dtype: str, layers: int | None = None) -> dict:
    """Compile ``candidate`` at full depth (or ``layers`` layers) as ``cost`` does (:func:`full_depth`), and
    compare each figure extended from 1 and 2 layers with it."""
    layers = min(layers or base.model.layers, base.model.layers)
    if layers <= 2:
        raise ConfigError(f"the extension is checked against a compile of more than 2 layers, not {layers}", "model")
    full = full_depth(_at_layers(candidate.config(base), layers), dtype)
    one, two = (compiled_figures(_at_layers(candidate.config(base), n), dtype) for n in (1, 2))
    if full.refused or one.refused or two.refused:
        return {
            "candidate": _label(candidate),
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
        "candidate": _label(candidate),
        "layers": layers,
        "full_depth": layers == base.model.layers,
        "compile_s": round(full.compile_s, 1),
        "loop": full.loop_note,
        "relative_error": errors,
        "max_relative_error": max(abs(e) for e in errors.values()),
        "extended": {"flops": flops, "hbm_bytes": traffic, "hbm_needed": needed},
        "compiled": {"flops": full.flops, "hbm_bytes": full.hbm_bytes, "hbm_needed": full.hbm_needed},
    }


def _adopt_full_depth(out: Search, check_layers: int | None, tries: int = 3) -> None:
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
        p = _prediction_of(
            best.candidate.config(out.base), out.dtype, [full_depth(best.candidate.config(out.base), out.dtype)]
        )
        _fill(best, p)
        best.compiled_layers = (out.base.model.layers,)
        best.compile_s += p.compile_s
    if checked and out.best is not None and out.best.candidate not in checked and out.best.extended:
        out.extension = {**(out.extension or {}), "unchecked_best": _label(out.best.candidate)}


def _rel(extended: float, compiled: float) -> float:
    return (extended - compiled) / compiled if compiled else (0.0 if extended == 0 else float("inf"))


def _label(c: Candidate) -> str:
    return f"{c.mesh_text} ({', '.join(c.axes)}) {c.preset}, remat {c.remat}"


# --- why ----------------------------------------------------------------------------------------


def _term_name(term: str) -> str:
    return {
        "compute_s": "compute",
        "memory_s": "HBM traffic",
        "comm_s": "communication bandwidth",
        "latency_s": "collective latency",
    }[term]


def why(s: Search) -> str:
    """A paragraph, from the computed figures only: which term bounds the best, how much slower the
    runner-up is and which of its terms costs it, the per-chip batch against the critical batch."""
    from ..cost.roofline import format_seconds

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
        f"The fastest layout that fits is {_label(best.candidate)}: a predicted step of "
        f"{format_seconds(best.step_s)}, {best.bound}-bound (compute {format_seconds(t['compute_s'])}, "
        f"HBM traffic {format_seconds(t['memory_s'])}, communication {format_seconds(t['comm_s'])} + "
        f"latency {format_seconds(t['latency_s'])}), MFU {best.mfu:.0%}, "
        f"{_gb(best.hbm_per_chip)} of HBM per chip."
    ]
    if len(s.fitting) > 1:
        second = s.fitting[1]
        worse = max(second.terms, key=lambda k: second.terms[k] - t[k])
        ratio = second.step_s / best.step_s
        slower = f"{ratio:.1f}× as slow" if ratio >= 2 else f"{ratio - 1:.1%} slower"
        words.append(
            f"The runner-up, {_label(second.candidate)}, is {slower} "
            f"({format_seconds(second.step_s)}, {second.bound}-bound); its {_term_name(worse)} costs it most: "
            f"{format_seconds(second.terms[worse])} against {format_seconds(t[worse])}."
        )
    else:
        words.append("No other candidate fits.")
    words.append(_critical_sentence(s, best))
    refused = [r for r in costed if not r.fits]
    words.append(
        f"{len(s.results)} candidates: {len(s.results) - len(costed)} skipped before compiling, "
        f"{len(costed)} compiled, " + (f"{len(refused)} of them do not fit." if refused else "all of them fit.")
    )
    return " ".join(words)


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB" if value >= 1e8 else f"{value / 1e6:.2f} MB"


def _critical_sentence(s: Search, best: Result) -> str:
    from ..cost.sweep import critical_batch

    config = best.candidate.config(s.base)
    if best.data_ways <= 1 or "data" not in config.mesh.axes:
        return (
            f"Its batch is not split (all {best.per_chip_tokens:,} tokens on every chip), so there is no "
            "data-parallel critical batch to hold it against."
        )
    chip = targets.parse(s.base.target).chip
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


def depth_text(result: Result, s: Search) -> str:
    """How a row's figures were compiled: the whole depth, or 1 and 2 layers extended to it."""
    layers = getattr(s.base.model, "layers", None)
    if result.extended:
        return f"1+2 layers → {layers}"
    return f"{layers} layers" if layers else "whole"


def table(s: Search) -> str:
    """The candidates as a readable table, fastest fitting first, then the others, then the skips."""
    from ..cost.roofline import format_seconds

    rows = sorted(s.costed, key=lambda r: (not r.fits, r.step_s if r.step_s is not None else math.inf))
    head = (
        f"{'mesh':<8} {'axes':<12} {'preset':<11} {'remat':<6} {'HBM/chip':>10} {'fits':<5} {'step':>10} "
        f"{'bound':<14} {'MFU':>6}  {'compiled':<16}"
    )
    lines = [head, "-" * len(head)]
    best = s.best
    for r in rows:
        c = r.candidate
        hbm = f"{r.hbm_per_chip / 1e9:.2f} GB" if r.hbm_per_chip is not None else "refused"
        step = format_seconds(r.step_s) if r.step_s is not None else "-"
        mark = "  ← best" if r is best else ""
        if r.hbm_per_chip is not None and r.hbm_per_chip < 1e8:
            hbm = f"{r.hbm_per_chip / 1e6:.2f} MB"
        lines.append(
            f"{c.mesh_text:<8} {','.join(c.axes):<12} {c.preset:<11} {c.remat:<6} {hbm:>10} "
            f"{'yes' if r.fits else 'no':<5} {step:>10} {r.bound or '-':<14} "
            f"{(f'{r.mfu:.0%}' if r.mfu is not None else '-'):>6}  {depth_text(r, s):<16}{mark}"
        )
    for reason, count in s.skipped().items():
        lines.append(f"skipped {count:>3}: {reason}")
    return "\n".join(lines)
