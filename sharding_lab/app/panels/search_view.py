"""The Plan page's machinery: the search run in a background thread (progress, Stop), the Pareto picture,
and loading a candidate into the sidebar.

The search itself is :mod:`sharding_lab.search.search`, run by the server (:mod:`sharding_lab.server.searches`:
one search per question, shared by the tabs that ask it, queued behind a limit); this module holds a tab's
wait on it (the page polls its progress) and draws what it returns.
"""

from __future__ import annotations

import dataclasses
import math
import time

import plotly.graph_objects as go

import sharding_lab as sl
from sharding_lab import search
from sharding_lab.app.state import config_state
from sharding_lab.search import eta
from sharding_lab.search.search import compile_workers, ranked_layouts
from sharding_lab.server.page_compiles import waiting_sentence
from sharding_lab.server.searches import SEARCHES, SharedSearch, max_searches
from sharding_lab.units import format_bytes

# The question the page opens on for a small transformer: the four textbook strategies (data, fully
# sharded, tensor, both), without remat, on the slice's meshes — 10 compiles of the lab's 2-layer model on
# v5e-8: about 25 s of CPU on 2 cores. Every preset and remat both ways was 32 compiles, 109 s.
SMALL_PRESETS = ("dp", "fsdp", "tp", "fsdp_tp")
SMALL_REMATS = ("none",)


def counted(base: sl.LabConfig, presets, remats) -> int:
    """How many candidates the search reports for this question (its progress total, its result's count): the
    meshes × presets × remats, the three-axis meshes it counts as skipped, and the remats a family lacks."""
    on = base.on
    lacking = 0 if "remat" in base.family.step_only_fields or not remats else len(set(remats) - {"none"})
    return len(search.candidates(base, presets, remats)) + search.three_axis_count(on.devices, on.slices) + lacking


@dataclasses.dataclass
class Estimate:
    """Before Run: how many candidates, how many the compiler will see, and how long one takes here."""

    candidates: int
    to_compile: int | None  # None: not screened before Run (a large model's screening alone takes seconds)
    seconds_each: float | None  # measured on this server; None: not yet (a large model's compile takes minutes)
    measured_on: str = ""
    prior: eta.Progress | None = None  # a large model: the estimate from its size and the cores (search.eta)
    workers: int = 1  # processes the search will compile in (search.compile_workers)
    layouts: int | None = None  # a large model: the layouts the screens keep (the first ranking's)
    floors: bool = False  # steps that cannot win are answered at their memory check (search.eta.floors)

    @property
    def in_flight(self) -> float:
        """Compiles under way at once on average (search.eta's share of the workers; one process: 1)."""
        return eta.Progress(0, 0, workers=self.workers).in_flight

    @property
    def seconds(self) -> float | None:
        """The search's time from Run: the compiles but the one timed (the search takes it from its cache), over
        those under way at once — each slower beside the others by the square root of their number (search.eta)."""
        if self.seconds_each is None or self.to_compile is None:
            return None
        if self.floors:  # one round of whole compiles, then mostly memory checks (search.eta.CHECK_SHARE)
            rounds = (self.to_compile - 1) / self.in_flight
            return self.seconds_each * (1 + eta.CHECK_SHARE * max(0.0, rounds - 1)) if self.to_compile > 1 else 0.0
        return (self.to_compile - 1) * self.seconds_each / math.sqrt(self.in_flight)


def estimate(base: sl.LabConfig, dtype: str, presets, remats, compile_one: bool = True) -> Estimate:
    """For a model under ``search.SMALL_MODEL`` parameters: screen every candidate (no compile) and compile the
    first that needs it, timed (the search then takes that result from its cache) — unless ``compile_one`` is
    False (``SHARDING_LAB_PAGE_COMPILES=off``: the count only). A larger model: no compile (one takes minutes),
    each layout screened once for the estimate's count (the first ranking's screens: llama3-8b's 55 layouts in 4 s
    on 2 cores; the search then finds them remembered)."""
    total = counted(base, presets, remats)
    parameters = base.family.parameter_count(base.model)
    if parameters >= search.SMALL_MODEL:
        workers = compile_workers(base, None)
        _, variants = eta.question(base, presets, remats)
        layouts = ranked_layouts(base, dtype, presets, remats)  # the screens the search starts with
        return Estimate(
            total,
            None,
            None,
            prior=eta.Progress(
                parameters,
                eta.to_compile(None, layouts, total, variants=variants),
                workers=workers,
                floors=eta.floors(base, remats, workers),
            ),
            layouts=layouts,
        )
    todo = [c for c in search.candidates(base, presets, remats) if search.screen(c, base, dtype).skipped is None]
    timed = search.cost_candidate(todo[0], base, dtype) if todo and compile_one else None
    if timed is None or not timed.compile_s:
        return Estimate(total, len(todo), None)
    workers = compile_workers(base, None)
    floors = eta.floors(base, remats, workers)
    return Estimate(total, len(todo), timed.compile_s, _name(timed), workers=workers, floors=floors)


def _name(result: search.Result) -> str:
    c = result.candidate
    return f"{c.mesh_text} {c.preset} remat {c.remat}"


class SearchJob:
    """A tab's wait on the server's search for its question (:mod:`sharding_lab.server.searches`): every tab that
    asks the same question follows the same search, its progress and its answer."""

    def __init__(
        self, base: sl.LabConfig, dtype: str, presets=None, remats=None, to_compile: int = 0, searches=None, open_=None
    ):
        self.base, self.dtype, self.presets, self.remats = base, dtype, presets, remats
        self.open_ = open_  # whether this tab is still open (None: not known)
        self.to_compile = to_compile
        self.searches = searches or SEARCHES
        self.watcher = self.searches.watcher()
        self.search: SharedSearch | None = None
        self.shared = False  # another tab was waiting for this search when this one asked
        self.left = False  # this tab stopped while other tabs still wait: the search goes on for them

    @property
    def question(self) -> tuple:
        return question(self.base, self.presets, self.remats)

    def start(self) -> "SearchJob":
        total = counted(self.base, self.presets, self.remats)
        self.search = self.searches.ask(
            self.watcher, self.base, self.dtype, self.presets, self.remats, self.to_compile, total, self.open_
        )
        answered = self.search.finished.is_set() and self.search.result is not None
        self.shared = len(self.search.watchers) > 1 or answered
        return self

    def cancel(self) -> None:
        """Stop: this tab leaves the search; the search stops when no other tab waits for it."""
        self.searches.leave(self.watcher, self.search)
        self.left = not self.search.stop.is_set()

    @property
    def running(self) -> bool:
        return not self.left and self.search is not None and self.search.running

    @property
    def place(self) -> int:
        """0 while the search runs, else this search's place in the server's queue."""
        return self.searches.place(self.search) if self.search is not None else 0

    def wait(self, timeout: float | None = None) -> None:
        if self.search is not None:
            self.search.wait(timeout)

    @property
    def result(self) -> search.Search | None:
        return None if self.left else self.search.result

    @property
    def error(self) -> str | None:
        return None if self.left else self.search.error

    def __getattr__(self, name):  # the search's progress: done, total, compiled, last, started, first, first_s
        if name in ("done", "total", "compiled", "last", "started", "first", "first_s"):
            return getattr(self.__dict__["search"], name)
        raise AttributeError(name)

    def progress_text(self) -> str:
        """'5 of 13 candidates — 4 compiled, 1 skipped — last: … — 31 s, about 40 s left'; once every candidate
        is done, what the search still does (the best compiled at full depth to check its extension)."""
        found = self.search
        place = self.place
        if place:
            ahead = place - 1
            return (
                f"Queued: {'no search' if not ahead else f'{ahead} search' + 'es' * (ahead > 1)} ahead of this one "
                f"(the server runs {max_searches()} at a time, first come, first served) — waiting "
                f"{time.monotonic() - found.asked:.0f} s"
            )
        elapsed = time.monotonic() - (found.started or found.asked)
        if found.compile_ahead is not None:  # started, waiting for a turn of the server's compile queue
            return f"{waiting_sentence(found.compile_ahead)} Waiting {elapsed:.0f} s."
        if found.total and found.done >= found.total:
            return (
                f"All {found.total} candidates done in {elapsed:.0f} s; compiling the best at full depth to check "
                "the figures extended from 1 and 2 layers…"
            )
        text = (
            f"{found.done} of {found.total} candidates — {found.compiled} compiled, {found.done - found.compiled} "
            f"skipped — last: {found.last or '…'} — {elapsed:.0f} s"
        )
        now = found.activity.sentence()
        return text + time_left(found, elapsed) + (f". Now {now}." if now else "")


def time_left(found: SharedSearch, elapsed: float) -> str:
    """How long the search still needs (:mod:`sharding_lab.search.eta`): from the model's size and the cores until
    the first compiles are in, then from their compile times — over the workers compiling at once."""
    at_once = f"{found.workers} at once in worker processes" if found.workers > 1 else "one at a time"
    left = progress_of(found)
    return f", about {format_seconds_left(left.seconds_left)} left (from {left.basis}; {at_once})"


def progress_of(found: SharedSearch) -> eta.Progress:
    """The estimate's view of a running search: screened before Run (a small model), else the first ranking's
    layouts, else the question's layouts (before the first ranking is out)."""
    layouts, variants = eta.question(found.base, found.presets, found.remats)
    ranked = len(found.first) if found.first is not None else layouts
    return eta.Progress(
        found.base.family.parameter_count(found.base.model),
        eta.to_compile(found.to_compile, ranked, found.total, found.done, variants),
        found.compiled,
        found.compile_s,
        found.workers,
        wall_s=time.monotonic() - found.started if found.started is not None else 0.0,
        floors=eta.floors(found.base, found.remats, found.workers),
        checked=found.checked,
        checked_s=found.checked_s,
    )


format_seconds_left = eta.format_seconds_left


def first_rows(ranked: list[search.Result]) -> list[dict]:
    """The first ranking as the page shows it while the compiles run: the book's step per candidate."""
    from sharding_lab.cost import format_seconds

    return [
        {
            "mesh": r.candidate.mesh_text,
            "axes": ",".join(r.candidate.axes),
            "preset": r.candidate.preset,
            "remat": r.candidate.remat,
            **({"attention": r.candidate.attention} if r.candidate.attention else {}),
            "step (book)": format_seconds(r.book["step_s"]),
            "bound (book)": r.book["bound"],
            "compute": format_seconds(r.book["compute_s"]),
            "network": format_seconds(r.book["comm_s"]),
        }
        for r in ranked
    ]


def question(base: sl.LabConfig, presets, remats) -> tuple:
    """What a search answers: its results belong to it, and stay on the page only while the boxes ask it."""
    return (base, tuple(presets or ()), tuple(remats or ()))


def stopped_text(found: search.Search, total: int) -> str:
    """A stopped search: what it got to, and what its table therefore is not — or, stopped before any compile was
    done, that nothing was compiled and what the screens alone got through (the page then shows no table)."""
    if not found.costed:
        screened = (
            f"of the {total} candidates, {len(found.results)} were screened and skipped (why, below) and the other "
            f"{total - len(found.results)} not compiled"
            if found.results
            else f"none of the {total} candidates was screened or compiled"
        )
        return (
            f"Stopped after {found.elapsed_s:.0f} s, before any candidate was compiled: {screened} — so no table "
            "and no verdict."
        )
    text = (
        f"Stopped after {len(found.results)} of {total} candidates ({found.elapsed_s:.0f} s): the table holds "
        "those only."
    )
    if found.best is None:
        text += f" None of the {len(found.costed)} compiled so far fits; the others were not looked at."
    return text


def rows(found: search.Search) -> list[dict]:
    """The table: every compiled candidate, fastest fitting first."""
    from sharding_lab.cost import format_seconds

    ordered = search.ordered(found)
    best = found.best
    return [
        {
            "": "best" if r is best else "",
            "mesh": r.candidate.mesh_text,
            "axes": ",".join(r.candidate.axes),
            "preset": r.candidate.preset,
            "remat": r.candidate.remat,
            **({"attention": r.candidate.attention} if r.candidate.attention else {}),
            **({"across slices": r.candidate.across} if r.candidate.across else {}),
            "HBM per chip": "not generated" if r.skipped else _bytes(r.hbm_per_chip),
            "fits": bool(r.fits),
            "step": (
                f"≥ {format_seconds(r.step_floor_s)}"
                if r.skipped
                else format_seconds(r.step_s)
                if r.step_s is not None
                else "refused"
            ),
            "bound": r.bound or "-",
            "MFU": f"{r.mfu:.0%}" if r.mfu is not None else "-",
            "HFU": f"{r.hfu:.0%}" if r.hfu is not None else "-",
            "compiled": search.depth_text(r, found),
        }
        for r in ordered
    ]


def _bytes(value: float | None) -> str:
    if value is None:
        return "refused"
    return format_bytes(value)


def plotted(found: search.Search) -> list[search.Result]:
    """The candidates the Pareto picture draws (compiled, with a step time), the best first, then by step."""
    best = found.best
    return sorted((r for r in found.costed if r.step_s is not None), key=lambda r: (r is not best, r.step_s))


def name(result: search.Result) -> str:
    """A candidate as the picture and the "Or pick one" box name it: '2x4 tp remat none'."""
    return _name(result)


def points(found: search.Search) -> list[list[search.Result]]:
    """The picture's points: candidates with the same predicted step and HBM per chip share one (the same
    program on different meshes: replicated on 8, 2x4 or 4x2), listed together, in :func:`plotted`'s order."""
    groups: dict[tuple, list] = {}
    for r in plotted(found):
        groups.setdefault((r.step_s, r.hbm_per_chip), []).append(r)
    return list(groups.values())


def pareto_figure(found: search.Search) -> go.Figure:
    """HBM per chip against the predicted step, one point per distinct (step, HBM) — its candidates named in
    its hover, their count beside it — and the chip's HBM as a line."""
    from sharding_lab.hardware.chips import chip as get_chip

    groups = points(found)
    hbm = get_chip(found.base.on.chip).capacity / 1e9
    best = found.best
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[g[0].step_s * 1e3 for g in groups],
            y=[g[0].hbm_per_chip / 1e9 for g in groups],
            mode="markers+text",
            marker={
                "size": [16 if best in g else 10 for g in groups],
                "color": ["#2ca02c" if g[0].fits else "#d62728" for g in groups],
                "symbol": ["star" if best in g else "circle" for g in groups],
            },
            text=[f"×{len(g)}" if len(g) > 1 else "" for g in groups],
            textposition="middle right",
            customdata=["<br>".join(name(r) for r in g) for g in groups],
            hovertemplate="%{customdata}<br>step %{x:.3g} ms<br>HBM %{y:.2f} GB<extra></extra>",
            name="candidates",
        )
    )
    drawn = [r for g in groups for r in g]
    steps = [r.step_s * 1e3 for r in drawn] or [0.0]
    # The chip's HBM as a line trace (a shape's annotation on a log axis would be placed at 10^y)
    fig.add_trace(
        go.Scatter(
            x=[min(steps), max(steps)],
            y=[hbm, hbm],
            mode="lines+text",
            line={"dash": "dash", "color": "#555"},
            text=[f"usable HBM per chip: {hbm:.1f} GB", ""],
            textposition="top right",
            hoverinfo="skip",
            name="HBM",
        )
    )
    heights = [r.hbm_per_chip / 1e9 for r in drawn if r.hbm_per_chip and r.hbm_per_chip > 0] + [hbm]
    decades = math.log10(max(heights) / min(heights))
    # over more than two decades Plotly's log axis labels 2 and 5 of every decade too, and they crowd
    # ("2, 10, 5, 2, 1, 5"): then only the powers of ten are labelled
    fig.update_layout(
        xaxis_title="predicted step (ms)",
        yaxis_title="HBM per chip (GB, log)",
        height=420,
        yaxis={"type": "log", **({"dtick": 1} if decades > 2 else {})},
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        showlegend=False,
        clickmode="event+select",
    )
    return fig


def candidate_state(found: search.Search, result: search.Result) -> dict:
    """The session-state keys that put ``result``'s layout into the sidebar (its target, mesh, preset,
    remat, model, optimizer and batch)."""
    config = result.candidate.config(found.base)
    batch_max = config_state.value_range("batch_size")[1]
    if config.batch_size > batch_max:  # the sidebar's batch widget stops there; the plan's batch is in the text
        config = dataclasses.replace(config, batch_size=batch_max)
    return config_state.state_from_config(config)
