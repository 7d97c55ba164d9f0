"""The Plan page's machinery: the search run in a background thread (progress, Stop), the Pareto picture,
and loading a candidate into the sidebar.

The search itself is :mod:`sharding_lab.search.search`; this module only runs it off the script thread (the
thread makes no ``st.*`` call: the page polls its snapshot) and draws what it returns.
"""

from __future__ import annotations

import dataclasses
import math
import threading

import plotly.graph_objects as go

import sharding_lab as sl
from sharding_lab import search
from sharding_lab.app import background, settings
from sharding_lab.units import format_bytes


@dataclasses.dataclass
class PlanJob:
    """One search running in a thread: its progress, its Stop, and its result once done."""

    base: sl.LabConfig
    dtype: str
    presets: tuple[str, ...] | None = None
    remats: tuple[str, ...] | None = None
    done: int = 0
    total: int = 0
    last: str = ""
    result: search.Search | None = None
    error: str | None = None
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> "PlanJob":
        self.thread = threading.Thread(target=self._run, daemon=True, name="sharding-lab-plan")
        background.track(self.thread, self.stop.set)  # its workers killed, the thread joined before exit
        self.thread.start()
        return self

    def _run(self) -> None:
        def progress(done, total, result):
            self.done, self.total = done, total
            c = result.candidate
            self.last = f"{c.mesh_text} {c.preset} remat {c.remat}: " + (
                f"skipped ({result.skipped})" if result.skipped else ("fits" if result.fits else "does not fit")
            )

        try:
            self.total = len(search.candidates(self.base, self.presets, self.remats))
            # workers: one process per core compiles, and Stop ends a compile at once (it kills them)
            self.result = search.search(
                self.base, self.dtype, self.presets, self.remats, progress, self.stop, workers=None
            )
        except sl.ConfigError as error:
            self.error = str(error)
        except Exception as error:  # shown as one line on the page, never a traceback
            self.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


def rows(found: search.Search) -> list[dict]:
    """The table: every compiled candidate, fastest fitting first."""
    from sharding_lab.cost import format_seconds

    ordered = sorted(found.costed, key=lambda r: (not r.fits, r.step_s if r.step_s is not None else float("inf")))
    best = found.best
    return [
        {
            "": "best" if r is best else "",
            "mesh": r.candidate.mesh_text,
            "axes": ",".join(r.candidate.axes),
            "preset": r.candidate.preset,
            "remat": r.candidate.remat,
            "HBM per chip": _bytes(r.hbm_per_chip),
            "fits": bool(r.fits),
            "step": format_seconds(r.step_s) if r.step_s is not None else "refused",
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
    """The candidates the Pareto picture draws (compiled, with a step time), in trace order."""
    return [r for r in found.costed if r.step_s is not None]


def pareto_figure(found: search.Search) -> go.Figure:
    """HBM per chip against the predicted step, one point per compiled candidate, the chip's HBM as a line."""
    from sharding_lab.hardware import targets
    from sharding_lab.hardware.chips import chip as get_chip

    points = plotted(found)
    hbm = get_chip(targets.parse(found.base.target).chip).capacity / 1e9
    best = found.best
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[r.step_s * 1e3 for r in points],
            y=[r.hbm_per_chip / 1e9 for r in points],
            mode="markers",
            marker={
                "size": [16 if r is best else 10 for r in points],
                "color": ["#2ca02c" if r.fits else "#d62728" for r in points],
                "symbol": ["star" if r is best else "circle" for r in points],
            },
            text=[f"{r.candidate.mesh_text} {r.candidate.preset} remat {r.candidate.remat}" for r in points],
            hovertemplate="%{text}<br>step %{x:.3g} ms<br>HBM %{y:.2f} GB<extra></extra>",
            name="candidates",
        )
    )
    steps = [r.step_s * 1e3 for r in points] or [0.0]
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
    heights = [r.hbm_per_chip / 1e9 for r in points if r.hbm_per_chip and r.hbm_per_chip > 0] + [hbm]
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
    batch_max = settings.GENERAL_RANGES["batch"][1]
    if config.batch_size > batch_max:  # the sidebar's batch widget stops there; the plan's batch is in the text
        config = dataclasses.replace(config, batch_size=batch_max)
    return settings.state_from_config(config)
