"""The search: every layout of a model on a target slice, compiled and costed, and the fastest that fits.

A JAX engineer's question — "how should I shard this model on this slice, and what will a step
cost?" — answered by enumerating and letting the compiler decide:

1. **Enumerate.** Mesh shapes are the factorisations of the slice's chip count into one axis
   (``data``) or two (``data`` × ``model``); the model family's presets (its roles are only ``data`` and
   ``model``, so three axes would add nothing a preset could use — counted as skipped, with that
   reason); rematerialisation ``none``, ``full`` or a selective policy where the family has it; the
   attention kinds asked for (the CLI: XLA's and the splash kernel, unless ``--attention`` names one); on a
   multi-slice target, which axis crosses the slices (:func:`~sharding_lab.search.candidates.mesh_shapes`).
   The global batch is given in tokens (``batch_tokens`` ÷ ``seq`` sequences).
2. **Skip what cannot work**, counting why: the plan refuses it (:func:`sharding_lab.training.config.plan`'s
   ``ConfigError``: a batch the data axis does not divide, a preset that needs two axes), more
   tensor-parallel ways than heads, a weight dimension the mesh cannot split (JAX would silently
   replicate it: not the layout the preset names; K/V heads are the exception, replicated on purpose as
   Megatron does when ``model`` exceeds ``kv_heads``) — and what memory already rules out: parameters +
   optimizer state + gradients per chip, from the plan's own layouts, more than the chip's HBM; with
   remat full, those + every block's input (the residual stream a scan keeps for its backward pass,
   :func:`~sharding_lab.search.candidates.kept_inputs_per_chip`). Each layout is tried with remat full
   first: when even that does not fit, the layout without remat (which keeps those inputs and more) is
   skipped, not compiled. And what cannot win (:mod:`sharding_lab.search.bound`): a candidate whose compute
   time is bounded from below — XLA's attention by its compiled splash twin plus the S×S scores the kernel
   skips; a layout whose devices repeat each other's work by its weights' FLOPs — at no less than the step of a
   compiled candidate that fits is skipped; such candidates are compiled after the rest, so that one is there.
3. **Compile and cost** each remaining candidate for the target (:mod:`sharding_lab.cost`): the
   roofline of the TPU compiler's program, ``fits`` the compiler's memory answer. ``workers`` processes
   compile at once (the CLI: one per core), each compile watched to the compiler's memory check
   (:mod:`sharding_lab.search.pool`), so that the next compile can start, or a probe be abandoned,
   before code generation (40–100 s per block of a real model).

**Depth.** A step with remat full runs its blocks as a ``lax.scan``: its compile takes the same time at
any depth (the loop's body is one block), so it is compiled at full depth exactly as ``cost`` compiles it
(the loop as it runs, once, read with its trip count: :func:`sharding_lab.cost.compiled.compile_step`). A
step without remat is unrolled, and compiling a real depth unrolled takes minutes: it is probed at full depth
only to the compiler's memory check (a refusal or a total over HBM is exact and ends it), and, should it fit,
compiled with 1 and 2 layers and every figure — FLOPs, HBM traffic, HBM needed, each collective's bytes and
count — extended linearly: ``f(L) = f(1) + (L − 1)·(f(2) − f(1))``
(in one process, ``workers=1``, it is not probed). :func:`~sharding_lab.search.depth.check_extension`
compiles an extended best at full depth as ``cost`` does and reports each figure's relative error; the best
then carries the full-depth figures — ``cost``'s own — and, should it no longer fit or lead, the next is
checked (:func:`~sharding_lab.search.depth.adopt_full_depth`). A model of at most 2 layers is compiled as
it is (nothing extended).

Results are cached per candidate (:func:`~sharding_lab.search.costing.cost_candidate`), a
``threading.Event`` stops the search between candidates, and a callback reports progress.
:func:`~sharding_lab.search.verdict.why` writes the verdict from the computed figures only.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import time
from typing import Callable

from ..training.config import LabConfig
from .candidates import (
    SKIP_FLOOR,
    SKIP_NO_REMAT,
    SKIP_OTHER,
    SKIP_THREE_AXES,
    Candidate,
    Result,
    candidates,
    remat_rank,
    screen,
    splash_twin,
    three_axis_count,
)
from .depth import adopt_full_depth
from .scheduler import run_pool, run_serial
from .underway import Activity
from .verdict import why


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
    first: list[Result] = dataclasses.field(default_factory=list)  # the first ranking (.first), before compiling
    first_s: float | None = None  # seconds from the start to the first ranking

    @property
    def costed(self) -> list[Result]:
        return [r for r in self.results if r.skipped is None]

    @property
    def fitting(self) -> list[Result]:
        return sorted((r for r in self.costed if r.fits), key=lambda r: r.step_s)

    @property
    def best(self) -> Result | None:
        return self.fitting[0] if self.fitting else None

    @property
    def floored(self) -> list[Result]:
        """The steps that fit but were answered at the compiler's memory check, their program priced before code
        generation no faster than a compiled step's (:data:`~sharding_lab.search.candidates.SKIP_FLOOR`), by floor."""
        return sorted((r for r in self.results if r.skipped == SKIP_FLOOR), key=lambda r: r.step_floor_s)

    def skipped(self) -> dict[str, int]:
        """Why candidates were not compiled, and how many each (those answered at their memory check are not)."""
        return dict(collections.Counter(r.skipped for r in self.results if r.skipped and not r.compiled))

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
            "answered_at_memory_check": len(self.floored),
            "skipped_candidates": [r.to_json() for r in self.results if r.skipped],
            "why": why(self),
            "extension_check": self.extension,
            "first_ranking": [{k: v for k, v in r.to_json().items() if k in FIRST_FIELDS} for r in self.first],
            "first_ranking_s": round(self.first_s, 2) if self.first_s is not None else None,
            "stopped": self.stopped,
            "elapsed_s": round(self.elapsed_s, 1),
            "candidates_per_s": round(len(self.results) / self.elapsed_s, 3) if self.elapsed_s else None,
        }


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
    attentions: tuple[str, ...] | None = None,
    first: Callable[[list[Result], float], None] | None = None,
    activity: Activity | None = None,
    price_every_fit: bool = False,
) -> Search:
    """Every candidate of ``base`` on its target, screened, compiled and costed; the extension checked
    against one compile of the best (``check``) at full depth, or at ``check_layers`` (> 2) layers when a
    full-depth unrolled compile would take too long. ``workers`` > 1 compiles that many candidates at
    once, each in its own process (None: one per CPU core). ``attentions`` (e.g. :data:`~sharding_lab.search.
    candidates.ATTENTIONS`) searches those attention kinds too; None: the model's own. Before any compile every
    candidate is screened and the survivors ranked by the book's count (:mod:`.first`): ``first`` gets that
    ranking and the seconds it took, and the answer keeps it. ``activity`` is kept told what is screened and
    compiled at each moment (:mod:`.underway`: the command line and the Plan page say it between candidates).
    In workers, a remat step that fits but whose program, priced before code generation, cannot beat a compiled
    step that fits is answered at its memory check (:mod:`sharding_lab.cost.floor`); ``price_every_fit`` has every
    one compiled to the end instead (minutes each on a large model)."""
    from ..cost.compiled import dtype_name

    dtype = dtype_name(dtype)
    started = time.perf_counter()
    todo = candidates(base, presets, remats, attentions)
    results = _skipped_before(base, remats)
    queue = _leanest_first(todo)
    ranked = first_ranking(queue, base, dtype, stop, activity)
    first_s = time.perf_counter() - started
    if first is not None:
        first(ranked, first_s)
    workers = compile_workers(base, workers)
    step = functools.partial(run_serial, activity=activity)
    if workers > 1:
        step = functools.partial(run_pool, workers=workers, activity=activity, floors=not price_every_fit)
    if progress is not None and results:
        progress = _report_skipped(progress, results, len(queue))
    stopped = step(queue, base, dtype, stop, results, progress)
    for r in results:  # each compile's times, from the search's start
        if r.timeline:
            r.timeline = {k: [None if t is None else round(t - started, 1) for t in v] for k, v in r.timeline.items()}
    out = Search(
        base,
        dtype,
        base.batch_size * base.model.seq,
        results,
        stopped,
        compiled_layers=tuple(sorted({n for r in results for n in r.compiled_layers if n})),
        first=ranked,
        first_s=first_s,
    )
    if check and not stopped:
        if activity is not None:
            activity.doing("compiling the best at full depth, to check the figures extended from 1 and 2 layers")
        adopt_full_depth(out, check_layers)
    out.elapsed_s = time.perf_counter() - started
    return out


def _skipped_before(base: LabConfig, remats: tuple[str, ...] | None) -> list[Result]:
    """What is skipped before the queue, with its reason: the three-axis meshes of the target's chips, and the remat
    choices a family without the option was asked for."""
    on = base.on
    results = [
        Result(Candidate((0,), (), "-", "-"), skipped=SKIP_THREE_AXES)
        for _ in range(three_axis_count(on.devices, on.slices))
    ]
    if "remat" not in base.family.step_only_fields and remats and set(remats) - {"none"}:
        results += [Result(Candidate((0,), (), "-", r), skipped=SKIP_NO_REMAT) for r in set(remats) - {"none"}]
    return results


def _leanest_first(todo: list[Candidate]) -> list[Candidate]:
    """The queue. Each layout's leanest step first (remat full, then a selective policy, then none): when one does
    not fit, the same layout's steps that keep more are skipped instead of compiled. XLA's attention after every
    splash step: its splash twin then bounds it (scheduler.bounded), and when that twin does not fit neither does it
    (it materialises the scores)."""
    layout_at: dict[tuple, int] = {}
    searched = set(todo)
    for i, c in enumerate(todo):
        layout_at.setdefault((c.mesh, c.axes, c.preset), i)
    order = sorted(
        range(len(todo)),
        key=lambda i: (
            splash_twin(todo[i]) in searched,
            layout_at[todo[i].mesh, todo[i].axes, todo[i].preset],
            remat_rank(todo[i].remat),
        ),
    )
    return [todo[i] for i in order]


def _report_skipped(progress: Callable, results: list[Result], queued: int) -> Callable:
    """Skipped before the queue: progress counts them, as the result does, and reports them first, one report a
    reason (the three-axis meshes, the remats a family lacks) — the count starts where the progress does (it started
    at 2/7 after one three-axis mesh, never reported). Returns the progress the queue's answers are told to."""
    counted = len(results)
    reasons = collections.Counter(r.skipped for r in results)
    reported = 0
    for reason, n in reasons.items():
        reported += n
        progress(reported, counted + queued, next(r for r in results if r.skipped == reason))
    return functools.partial(_counting, progress, counted)


FIRST_FIELDS = ("mesh", "axes", "preset", "remat", "attention", "across_slices", "per_chip_tokens", "book")


def ranked_layouts(base: LabConfig, dtype: str, presets=None, remats=None, attentions=None) -> int:
    """How many layouts the first ranking keeps — the screens the search starts with, no compile (llama3-8b on
    v5e-256: 10 of 55, 4 s on 2 cores; remembered, so the search then screens at once)."""
    from ..cost.compiled import dtype_name

    dtype = dtype_name(dtype)
    return len(first_ranking(_leanest_first(candidates(base, presets, remats, attentions)), base, dtype))


def first_ranking(
    queue: list[Candidate], base: LabConfig, dtype: str, stop=None, activity: Activity | None = None
) -> list[Result]:
    """Each layout (mesh, axes, preset) screened once, no compile — by its leanest variant that passes (the queue
    holds each layout's variants the leanest first: remat full, splash; XLA's attention at its end) — and ranked
    by the book's step (:func:`~sharding_lab.search.first.book_estimate`), fastest first. A skip that rules out
    the layout (a batch or heads the mesh cannot split, memory) ends it; one that rules out only the variant (the
    plan refuses the splash kernel inside pipeline stages) tries the next. One screen a layout, not one a
    candidate: the llama3-8b question has 6 variants of each."""
    ranked, done = [], set()
    layouts = len({(c.mesh, c.axes, c.preset) for c in queue})
    for c in queue:
        if activity is not None:
            activity.screening(len(done), layouts)
        layout = (c.mesh, c.axes, c.preset)
        if layout in done:
            continue
        if stop is not None and stop.is_set():
            break
        r = screen(c, base, dtype)
        if r.skipped is None and r.book:
            ranked.append(r)
        if r.skipped != SKIP_OTHER:
            done.add(layout)
    return sorted(ranked, key=lambda r: r.book["step_s"])


SMALL_MODEL = 10_000_000  # parameters: below it a compile takes seconds (the Plan page times one before Run)
TINY_MODEL = 1_000_000  # parameters: below it a compile takes about a second, less than starting a worker


def compile_workers(base: LabConfig, workers: int | None, cores: int | None = None) -> int:
    """How many processes compile at once: ``workers``, or for None every CPU core there is (the llama3-8b
    example on a 13-core machine: 175 s with 4 workers, docs/plan-physics-measured.md) — but one for a model
    under :data:`TINY_MODEL` parameters (a worker process takes ~4 s to start: more than such a compile) and for
    a family from the user's own module, which a fresh process would not have registered (``cores``: another
    machine's, for an estimate replayed from its run; None: this one's). Why not more: an
    8-layer 256-wide transformer (6.6M parameters, 8–25 s a compile) took 496 s in one process and 352 s in two
    workers on the 2-core machine, 117 s in 13 workers on the TPU machine's 13 cores where one process left 12 of
    them idle (docs/measurements.md)."""
    import os

    if not type(base.family).__module__.startswith("sharding_lab."):
        return 1
    if workers is None and base.family.parameter_count(base.model) < TINY_MODEL:
        return 1
    return max(1, (cores or os.cpu_count() or 1) if workers is None else int(workers))


def _counting(progress, counted: int, done: int, total: int, result: Result) -> None:
    progress(counted + done, counted + total, result)
