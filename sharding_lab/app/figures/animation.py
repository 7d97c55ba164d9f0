"""See a collective move: a Plotly animation of its ring steps over one group of devices.

One row per device of the group (in ring order), one column per block of the array. A cell is
coloured like the device whose block it is — the device that owns it at the start of an
all-gather, the one that ends up holding its sum in a reduce-scatter — as on the shard maps; a
cell's text says how many devices' contributions it sums (``3/4``). Arrows show each step's sends.
The schedule itself is :func:`sharding_lab.program.ring.schedule` (data, tested); this only draws it.
"""

from __future__ import annotations

import plotly.graph_objects as go

from sharding_lab.app.figures import device_color
from sharding_lab.program.ring import RING_OPS, Chain, schedule


def _cells(held, group: list[int], op: str):
    xs, ys, colors, texts, hovers = [], [], [], [], []
    n = len(group)
    for d, row in enumerate(held):
        for b, sources in enumerate(row):
            xs.append(b)
            ys.append(d)
            owner = group[b]
            if not sources:
                colors.append("rgba(0,0,0,0.04)")
                texts.append("")
                hovers.append(f"device {group[d]}: block {b} not held")
                continue
            colors.append(device_color(owner))
            if op == "all-gather":
                texts.append(f"{group[next(iter(sources))]}")
                hovers.append(f"device {group[d]} holds block {b} (device {owner}'s)")
            else:
                texts.append(f"{len(sources)}/{n}")
                hovers.append(
                    f"device {group[d]}: block {b} summed over devices "
                    + ", ".join(str(group[s]) for s in sorted(sources))
                )
    return xs, ys, colors, texts, hovers


def arrow(tail: tuple, head: tuple, faint: bool = False, hovertext: str | None = None) -> dict:
    """A Plotly annotation drawn as an arrow from ``tail`` to ``head`` (data coordinates); ``faint`` for the one
    that closes a ring or cycle, grey so the eye follows the dark ones first."""
    return dict(
        x=head[0],
        y=head[1],
        ax=tail[0],
        ay=tail[1],
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        showarrow=True,
        arrowhead=3,
        arrowsize=1.2,
        arrowwidth=2,
        arrowcolor="#999" if faint else "#333",
        text="",
        hovertext=hovertext,
    )


def _arrows(step) -> list[dict]:
    """One arrow per send, from the sender's row to the receiver's, in the block's column. The ring
    closes from the last device back to the first: that arrow is drawn beside the column, in grey."""
    arrows = []
    for send in step.sends:
        wraps = send.receiver < send.sender
        x = send.block + (0.38 if wraps else 0)
        arrows.append(
            arrow(
                (x, send.sender + (0.3 if not wraps else -0.3)),
                (x, send.receiver - (0.3 if not wraps else -0.3)),
                faint=wraps,
                hovertext=f"ring closes: device position {send.sender} → {send.receiver}" if wraps else None,
            )
        )
    return arrows


def ring_animation(op: str, group: list[int], block_bytes: int) -> go.Figure:
    """The ring steps of ``op`` over ``group`` (device ids, in ring order); ``block_bytes`` is one
    block's size, so each step's caption can say what every device sends."""
    if op not in RING_OPS:
        raise ValueError(f"{op} has no ring animation")
    steps = schedule(op, len(group))
    n = len(group)
    titles = _step_titles(op, steps, block_bytes)

    def trace(step):
        return _blocks(*_cells(step.held, group, op), size=46)

    frames = [
        go.Frame(data=[trace(step)], name=str(i), layout=go.Layout(annotations=_arrows(step), title_text=titles[i]))
        for i, step in enumerate(steps)
    ]
    fig = go.Figure(data=[trace(steps[0])], frames=frames)
    # Controls stacked under the plot, placed in pixels (Plotly takes paper fractions, so convert):
    # ▶/❚❚ on one row, the slider on the next with its "step N" on the right — side by side, the
    # slider's label ran under the pause button. The modebar is off where the chart is drawn
    # (``CHART_CONFIG``): it sat on the step's title.
    top, bottom, height = 70, 170, 230 + 60 * n
    below = lambda px: -px / (height - top - bottom)  # noqa: E731  (pixels under the plot area)
    fig.update_layout(
        title_text=titles[0],
        title_font_size=13,
        height=height,
        margin=dict(l=10, r=10, t=top, b=bottom),
        xaxis=dict(
            title="block of the array", tickvals=list(range(n)), range=[-0.6, n - 0.2], showgrid=False, zeroline=False
        ),
        yaxis=dict(
            title="device (ring order)",
            tickvals=list(range(n)),
            ticktext=[f"dev {d}" for d in group],
            autorange="reversed",
            showgrid=False,
            zeroline=False,
        ),
        plot_bgcolor="rgba(0,0,0,0)",
        showlegend=False,
        updatemenus=[_play_pause(below(50))],
        sliders=[_step_slider(len(steps), below(90))],
    )
    return fig


def _step_titles(op: str, steps: list, block_bytes: int) -> list[str]:
    """Each frame's title: what every device holds at the start, what each step sends, and what the last leaves."""
    start = (
        "each device holds its own block"
        if op == "all-gather"
        else "each device holds its own partial sum of every block"
    )
    titles = ["start: " + start] + [
        f"step {i}/{len(steps) - 1} ({step.phase}): every device sends one block ({block_bytes:,} bytes) to the next"
        for i, step in enumerate(steps)
        if i > 0
    ]
    if len(steps) > 1:
        titles[-1] += "<br>done: " + (
            "every device holds every block"
            if op != "reduce-scatter"
            else "each device holds its block, summed over all"
        )
    return titles


def _play_pause(y: float) -> dict:
    """▶ play and ❚❚ pause, side by side at ``y`` (paper fraction) under the plot."""
    return dict(
        type="buttons",
        direction="left",
        x=0,
        y=y,
        xanchor="left",
        yanchor="top",
        buttons=[
            dict(
                label="▶ play",
                method="animate",
                args=[None, dict(frame=dict(duration=900, redraw=True), fromcurrent=True)],
            ),
            dict(label="❚❚ pause", method="animate", args=[[None], dict(mode="immediate", frame=dict(duration=0))]),
        ],
    )


def _step_slider(count: int, y: float) -> dict:
    """A slider over the ``count`` frames at ``y`` (paper fraction), its 'step N' on the right."""
    return dict(
        active=0,
        x=0,
        y=y,
        len=1,
        xanchor="left",
        yanchor="top",
        currentvalue=dict(prefix="step ", xanchor="right"),
        steps=[
            dict(
                label=str(i),
                method="animate",
                args=[[str(i)], dict(mode="immediate", frame=dict(duration=0, redraw=True))],
            )
            for i in range(count)
        ],
    )


# How the app draws these figures: no modebar (zoom and pan mean nothing here, and it covered the title).
CHART_CONFIG = {"displayModeBar": False}


def permute_figure(chains: list[Chain], block: str, block_bytes: int) -> go.Figure:
    """A collective-permute as what it is: one op in which each source sends its block to its
    target, all at once. Rows are devices, chain by chain (``chains`` in device ids); left, the
    block each device sends (its own colour); right, the block it holds after (the sender's
    colour). One arrow per (source, target) pair; the arrow that closes a cycle is grey."""
    rows = [d for chain in chains for d in chain.members]
    row = {d: i for i, d in enumerate(rows)}
    target = {}
    for chain in chains:
        pairs = list(zip(chain.members, chain.members[1:]))
        target.update(pairs + ([(chain.members[-1], chain.members[0])] if chain.closed else []))
    source = {t: s for s, t in target.items()}
    xs, ys, colors, texts, hovers = [], [], [], [], []
    for d in rows:
        sends, gets = d in target, source.get(d)
        xs += [0, 1]
        ys += [row[d]] * 2
        colors += [
            device_color(d) if sends else "rgba(0,0,0,0.04)",
            device_color(gets) if gets is not None else "rgba(0,0,0,0.04)",
        ]
        texts += [str(d) if sends else "", str(gets) if gets is not None else ""]
        hovers += [
            f"device {d} sends its {block} block to device {target[d]}" if sends else f"device {d} sends nothing",
            f"device {d} now holds device {gets}'s {block} block"
            if gets is not None
            else f"device {d} receives nothing (XLA fills its result with zeros)",
        ]
    arrows = []
    for s, t in target.items():
        back = row[t] < row[s]  # the pair that closes a cycle runs upwards
        arrows.append(arrow((0.22, row[s]), (0.78, row[t]), faint=back))
    fig = go.Figure(_blocks(xs, ys, colors, texts, hovers, size=40))
    fig.update_layout(
        annotations=arrows,
        height=140 + 48 * len(rows),
        margin=dict(l=10, r=10, t=50, b=10),
        showlegend=False,
        title=dict(
            text=f"one collective-permute: {len(target)} sends of one {block} block ({block_bytes:,} bytes), "
            "all at once",
            font_size=13,
        ),
        xaxis=dict(
            tickvals=[0, 1],
            ticktext=["block it sends", "block it holds after"],
            range=[-0.4, 1.4],
            side="top",
            showgrid=False,
            zeroline=False,
        ),
        yaxis=dict(
            tickvals=list(range(len(rows))),
            ticktext=[f"dev {d}" for d in rows],
            autorange="reversed",
            showgrid=False,
            zeroline=False,
        ),
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return fig


def pairs_figure(op: str, group: list[int]) -> go.Figure:
    """Before/after for an all-to-all: every device sends a block to every other."""
    n = len(group)
    fig = go.Figure(
        go.Scatter(
            x=[0] * n + [1] * n,
            y=list(range(n)) * 2,
            mode="markers+text",
            text=[str(d) for d in group] * 2,
            textfont=dict(color="white"),
            marker=dict(symbol="square", size=40, color=[device_color(d) for d in group] * 2),
        )
    )
    links = [(i, j) for i in range(n) for j in range(n) if i != j]
    fig.update_layout(
        annotations=[arrow((0, i), (1, j)) for i, j in links],
        xaxis=dict(tickvals=[0, 1], ticktext=["before", "after"], range=[-0.4, 1.4]),
        yaxis=dict(visible=False, autorange="reversed"),
        height=120 + 50 * n,
        margin=dict(l=10, r=10, t=30, b=10),
        showlegend=False,
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return fig


def _blocks(xs, ys, colors, texts, hovers, size: int) -> go.Scatter:
    """Devices' blocks as labelled squares (a ring step's and a pair picture's), their hover saying what each holds."""
    return go.Scatter(
        x=xs,
        y=ys,
        mode="markers+text",
        text=texts,
        hovertext=hovers,
        hoverinfo="text",
        marker=dict(symbol="square", size=size, color=colors, line=dict(color="#999", width=1)),
        textfont=dict(color="white", size=12),
    )
