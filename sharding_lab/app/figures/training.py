"""A run, drawn (Plotly): the loss as it falls, the model's fit (the MLP's curve, the transformer's sequences)
and strategies side by side.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...units import format_bytes, format_count
from .shard_maps import PALETTE


def downsample(values: list[float], limit: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) with at most ``limit`` points: a long curve keeps its shape, drawn fast."""
    y = np.asarray(values, dtype=float)
    x = np.arange(1, len(y) + 1)
    if len(y) <= limit:
        return x, y
    stride = math.ceil(len(y) / limit)
    usable = len(y) // stride * stride
    return x[stride - 1 : usable : stride], y[:usable].reshape(-1, stride).mean(axis=1)


def loss_figure(
    losses: list[float], log_scale: bool = True, total_steps: int | None = None, loss_name: str = "MSE loss"
) -> go.Figure:
    x, y = downsample(losses)
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines", name="loss", line=dict(color="#4C78A8")))
    fig.update_layout(
        height=300,
        margin=dict(l=10, r=10, t=30, b=10),
        xaxis_title="step",
        yaxis_title=loss_name,
        title=dict(text="Training loss", font=dict(size=14)),
    )
    if total_steps:
        fig.update_xaxes(range=[0, total_steps])
    if log_scale:
        # One tick per decade reads well for a loss that falls two or three decades; a diverged run
        # spans thirty, and thirty labels stacked on a 300 px axis: space them to about six.
        shown = y[np.isfinite(y) & (y > 0)]
        decades = math.log10(shown.max() / shown.min()) if shown.size else 0
        dtick = max(1, math.ceil(decades / 6))
        fig.update_yaxes(type="log", dtick=dtick, **({"exponentformat": "power"} if dtick > 1 else {}))
    return fig


def fit_figure(x: np.ndarray, y: np.ndarray, prediction: np.ndarray | None) -> go.Figure:
    fig = go.Figure(go.Scatter(x=x[:, 0], y=y[:, 0], mode="markers", name="data", marker=dict(color="#4C78A8", size=6)))
    if prediction is not None:
        fig.add_trace(
            go.Scatter(x=x[:, 0], y=prediction[:, 0], mode="lines", name="model", line=dict(color="black", width=3))
        )
    fig.update_layout(
        height=300,
        margin=dict(l=10, r=10, t=30, b=10),
        xaxis_title="x",
        yaxis_title="y",
        title=dict(text="Model fit: y = 0.8·x² + 0.1 + noise", font=dict(size=14)),
        legend=dict(orientation="h", y=1.1),
    )
    return fig


def compare_figure(rows: list[dict], metrics: dict[str, str]) -> go.Figure:
    """One bar chart per metric, strategies side by side; ``rows`` carry a ``name`` and each metric."""
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=list(metrics.values()), horizontal_spacing=0.07)
    names = [row["name"] for row in rows]
    for col, key in enumerate(metrics, start=1):
        values = [row.get(key) for row in rows]
        fig.add_trace(
            go.Bar(
                x=names,
                y=[v if v is not None else 0 for v in values],
                marker_color=[PALETTE[i % len(PALETTE)] for i in range(len(rows))],
                text=[_short(v, key) for v in values],
                textposition="auto",
                name=key,
                meta={"metric": key},
            ),
            row=1,
            col=col,
        )
    # SI prefixes on the axes (G, not Plotly's default B for billions: beside bytes it reads as bytes)
    fig.update_yaxes(exponentformat="SI")
    fig.update_layout(showlegend=False, height=340, margin=dict(l=10, r=10, t=40, b=10))
    return fig


BYTE_METRICS = ("params", "optimizer", "comm_bytes")


def _short(value, metric: str = "") -> str:
    """A bar's label: bytes by :func:`sharding_lab.units.format_bytes`, other figures to three digits."""
    if value is None:
        return "—"
    if metric in BYTE_METRICS:
        return format_bytes(value)
    if abs(value) < 1000:
        return f"{value:.3g}"
    return format_count(value)


def sequence_figure(x: np.ndarray, y: np.ndarray, prediction: np.ndarray | None, rows: int = 8) -> go.Figure:
    """The transformer's task, learnt or not. Top: the first ``rows`` sequences, each cell at the
    position of the token it shows — the given first half in grey, then in the second half the
    model's guess for that token (made one position earlier, from what came before), green when
    right, red when wrong. Bottom: how often each position is guessed right over all probed rows."""
    x, y = np.asarray(x), np.asarray(y)
    shown, seq = min(rows, len(x)), x.shape[1]
    guessed = np.zeros_like(y, dtype=bool)  # position t+1 holds the guess made at t for token t+1
    guessed[:, 1:] = y[:, :-1] >= 0
    fig = make_subplots(
        rows=2,
        cols=1,
        row_heights=[0.68, 0.32],
        shared_xaxes=True,
        vertical_spacing=0.1,
        subplot_titles=[
            f"{shown} sequences: given tokens (grey), then the model's guesses",
            f"right guesses per position ({len(x)} sequences)",
        ],
    )
    guess, z, text, hover = _sequence_cells(x, guessed, shown, prediction)
    fig.add_trace(
        go.Heatmap(
            z=z,
            text=text,
            texttemplate="%{text}" if seq <= 64 else None,
            textfont=dict(size=9, color="white"),
            hovertext=hover,
            hoverinfo="text",
            colorscale=[[0, "#E45756"], [0.5, "#BAB0AC"], [1, "#54A24B"]],
            zmin=0,
            zmax=1,
            showscale=False,
            xgap=1,
            ygap=1,
            name="tokens",
        ),
        row=1,
        col=1,
    )
    fig.update_yaxes(autorange="reversed", title_text="sequence", row=1, col=1)
    if guess is not None:
        _accuracy_bars(fig, x, guess, guessed)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", row=2, col=1)
    fig.update_xaxes(range=[-0.5, seq - 0.5], row=1, col=1)
    fig.update_xaxes(title_text="position", range=[-0.5, seq - 0.5], row=2, col=1)
    for annotation in fig.layout.annotations:
        annotation.font = dict(size=12)
    fig.update_layout(
        height=420,
        margin=dict(l=10, r=10, t=50, b=10),
        showlegend=False,
        title=dict(text="Task: repeat the sequence reversed", font=dict(size=14)),
    )
    return fig


def _sequence_cells(x: np.ndarray, guessed: np.ndarray, shown: int, prediction: np.ndarray | None):
    """(guess per position or None, colour value, text, hover) of the first ``shown`` sequences' cells: a given
    token grey (0.5), a guess green (1) when right, red (0) when wrong — blank before a model has guessed."""
    if prediction is None:
        guess = None
        z = np.where(guessed[:shown], np.nan, 0.5)
        text = np.where(guessed[:shown], "", x[:shown].astype(str))
    else:
        guess = np.full_like(x, -1)
        guess[:, 1:] = np.asarray(prediction).astype(int)[:, :-1]
        right = guess == x
        z = np.where(guessed[:shown], right[:shown].astype(float), 0.5)
        text = np.where(guessed[:shown], guess[:shown].astype(str), x[:shown].astype(str))
    hover = [
        [
            f"sequence {r}, position {t}: token {x[r, t]}"
            + ("" if not guessed[r, t] else " (to guess)" if guess is None else f"<br>model guessed {guess[r, t]}")
            for t in range(x.shape[1])
        ]
        for r in range(shown)
    ]
    return guess, z, text, hover


def _accuracy_bars(fig: go.Figure, x: np.ndarray, guess: np.ndarray, guessed: np.ndarray) -> None:
    """Under the cells: per guessed position, the share of all probed sequences guessed right."""
    positions = np.flatnonzero(guessed.any(axis=0))
    if not len(positions):
        return
    accuracy = [float(np.mean(guess[guessed[:, t], t] == x[guessed[:, t], t])) for t in positions]
    fig.add_trace(
        go.Bar(
            x=positions,
            y=accuracy,
            marker_color="#4C78A8",
            name="accuracy",
            hovertemplate="position %{x}: %{y:.0%} right<extra></extra>",
        ),
        row=2,
        col=1,
    )
