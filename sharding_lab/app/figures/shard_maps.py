"""Where arrays live, drawn (Plotly): the mesh, the torus a target places it on, one shard map per array,
memory per device.

Every figure colours device ``d`` with :func:`device_color` ``(d)``, so a device is the same colour
on the mesh picture and on every shard map. A block held by several devices is drawn as stripes,
one per device, so replication is visible at a glance; hovering a stripe names the device, its
mesh coordinates, the index ranges, the shard shape and bytes, and who shares the block.
"""

from __future__ import annotations

import colorsys
import math

import numpy as np
import plotly.graph_objects as go

from ...sharding.layout import ArrayLayout

PALETTE = [
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#E45756",
    "#72B7B2",
    "#B279A2",
    "#EECA3B",
    "#9D755D",
    "#FF9DA6",
    "#BAB0AC",
    "#1F77B4",
    "#17BECF",
    "#8C564B",
    "#BCBD22",
    "#7F7F7F",
    "#D62728",
]
MAX_FACETS = 8
MAX_LABELLED_BLOCKS = 16


def device_color(device: int) -> str:
    if device < len(PALETTE):
        return PALETTE[device]
    hue = (device * 0.618033988749895) % 1.0
    r, g, b = colorsys.hls_to_rgb(hue, 0.55, 0.6)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def _device_list(devices: list[int]) -> str:
    """[0,1,2,3,5] → '0–3, 5'."""
    runs, start = [], None
    for i, d in enumerate(devices):
        if start is None:
            start = d
        if i + 1 == len(devices) or devices[i + 1] != d + 1:
            runs.append(f"{start}" if start == d else f"{start}–{d}")
            start = None
    return ", ".join(runs)


class _Panels:
    """A row of ``n`` panels built as plain data and validated once by ``go.Figure``: plotly's
    incremental ``make_subplots`` / ``add_trace(row=, col=)`` / ``add_annotation`` re-validate on
    every call and made a Layout rerun spend most of its time in plotly (profiled)."""

    def __init__(self, n: int, spacing: float, titles: list[str] | None = None):
        self.n, self.traces, self.annotations, self.layout, self.clickable = n, [], [], {}, []
        width = (1 - spacing * (n - 1)) / n
        for i in range(n):
            x0 = i * (width + spacing)
            self.layout[self._axis("x", i)] = {"domain": [x0, x0 + width], "anchor": self._ref("y", i)}
            self.layout[self._axis("y", i)] = {"anchor": self._ref("x", i)}
            if titles:
                self.annotations.append(
                    dict(
                        text=titles[i],
                        x=x0 + width / 2,
                        y=1.0,
                        xref="paper",
                        yref="paper",
                        xanchor="center",
                        yanchor="bottom",
                        showarrow=False,
                        font=dict(size=12),
                    )
                )

    @staticmethod
    def _axis(kind: str, i: int) -> str:
        return f"{kind}axis{i + 1 if i else ''}"

    @staticmethod
    def _ref(kind: str, i: int) -> str:
        return f"{kind}{i + 1 if i else ''}"

    def axes(self, i: int, x: dict, y: dict) -> None:
        self.layout[self._axis("x", i)].update(x)
        self.layout[self._axis("y", i)].update(y)

    def box(self, i: int, x0, x1, y0, y1, color, label, hover, opacity=0.9, name=None, meta=None) -> None:
        self.traces.append(
            dict(
                type="scatter",
                x=[x0, x1, x1, x0, x0],
                y=[y0, y0, y1, y1, y0],
                fill="toself",
                mode="lines",
                line=dict(color="white", width=1),
                fillcolor=color,
                opacity=opacity,
                hoveron="fills",
                hoverinfo="text",
                text=hover,
                name=name or "",
                meta=meta,
                xaxis=self._ref("x", i),
                yaxis=self._ref("y", i),
            )
        )
        if label:
            self.label(i, (x0 + x1) / 2, (y0 + y1) / 2, label)

    def targets(self, i: int, xs, ys, customdata, size: int = 28, hovers=None) -> None:
        """Near-invisible markers at the given points, so a click selects a device or a block
        (Plotly selects points, not filled shapes); ``customdata`` says what was clicked. With
        ``hovers``, each marker shows the tooltip of what lies under it (the markers sit on top)."""
        self.clickable.append(
            dict(
                type="scatter",
                x=list(xs),
                y=list(ys),
                mode="markers",
                customdata=list(customdata),
                marker=dict(size=size, opacity=0.01, color="black"),
                **({"hoverinfo": "text", "hovertext": list(hovers)} if hovers else {"hoverinfo": "none"}),
                name="click target",
                meta={"targets": True},
                xaxis=self._ref("x", i),
                yaxis=self._ref("y", i),
            )
        )

    def label(self, i: int, x, y, text, **style) -> None:
        self.annotations.append(
            dict(
                x=x,
                y=y,
                text=text,
                showarrow=False,
                font=dict(color="white", size=11),
                xref=self._ref("x", i),
                yref=self._ref("y", i),
                **style,
            )
        )

    def figure(self, **layout) -> go.Figure:
        # Click targets go last, on top: a click lands on the topmost trace under the cursor.
        return go.Figure(
            dict(data=self.traces + self.clickable, layout={**self.layout, "annotations": self.annotations, **layout})
        )


def _row_axis_label(panels: _Panels, name: str) -> None:
    """The rows' axis named left of the first panel, upright, with an arrow pointing down: rows are drawn top
    to bottom, so that is the way their index grows. Not as the y axis's title: Plotly turns a y title a
    quarter turn anticlockwise, which made "data →" point up and "data ↓" point right."""
    panels.annotations.append(
        dict(
            text=f"{name} ↓",
            textangle=0,
            x=0,
            y=0.5,
            xref="x domain",
            yref="y domain",
            xanchor="right",
            yanchor="middle",
            xshift=-18,  # clear of the row numbers
            showarrow=False,
            font=dict(size=13),
        )
    )


def _row_label_margin(name: str | None) -> int:
    """Room left of the plot for :func:`_row_axis_label` (an annotation gets no automatic margin)."""
    return 10 if not name else 30 + 8 * (len(name) + 2)


def mesh_figure(
    device_ids: list, axes: tuple[str, ...], highlight: set[int] | None = None, owners: dict[int, int] | None = None
) -> go.Figure:
    """The mesh as a grid of coloured devices; a 3-axis mesh is drawn as one grid per first index.
    With ``owners`` (device → JAX process) each box also names the process that owns it."""
    grid = np.array(device_ids)
    if grid.ndim == 1:
        grid = grid[None, :]
        row_axis, col_axis, facets = None, axes[0], [grid]
    elif grid.ndim == 2:
        row_axis, col_axis, facets = axes[0], axes[1], [grid]
    else:
        row_axis, col_axis, facets = axes[1], axes[2], list(grid)
    panels = _Panels(len(facets), 0.06, [f"{axes[0]}={i}" for i in range(len(facets))] if len(facets) > 1 else None)
    big = grid.size > 16  # past 16 devices a box is too small for its coordinates: the id alone
    for f, facet in enumerate(facets):
        panels.targets(
            f,
            [c + 0.46 for (r, c), _ in np.ndenumerate(facet)],
            [r + 0.46 for (r, c), _ in np.ndenumerate(facet)],
            [int(d) for d in facet.ravel()],
        )
        for (r, c), device in np.ndenumerate(facet):
            coords = ((f,) if len(facets) > 1 else ()) + ((r,) if row_axis else ()) + (c,)
            dim = highlight is not None and int(device) not in highlight
            owner = None if owners is None else owners.get(int(device))
            where = "" if owner is None else f"<br>process {owner}"
            panels.box(
                f,
                c,
                c + 0.92,
                r,
                r + 0.92,
                device_color(int(device)),
                f"<b>{device}</b>"
                if big and owner is None
                else f"<b>{device}</b><br>{coords}"
                if owner is None
                else f"<b>{device}</b><br>process {owner}",
                f"device {device}<br>mesh coords {dict(zip(axes, coords))}{where}",
                opacity=0.25 if dim else 0.95,
                name=f"device {device}",
                meta={"device": int(device)} if owner is None else {"device": int(device), "process": owner},
            )
        panels.axes(
            f,
            dict(
                title=dict(text=f"{col_axis} →"),
                tickvals=[i + 0.46 for i in range(facet.shape[1])],
                ticktext=[str(i) for i in range(facet.shape[1])],
                showgrid=False,
                zeroline=False,
            ),
            dict(
                autorange="reversed",
                tickvals=[i + 0.46 for i in range(facet.shape[0])],
                ticktext=[str(i) for i in range(facet.shape[0])] if row_axis else [""],
                showgrid=False,
                zeroline=False,
                scaleanchor=f"x{f + 1 if f else ''}",
            ),
        )
    if row_axis:
        _row_axis_label(panels, row_axis)
    return panels.figure(
        showlegend=False,
        height=90 + (70 if not big else 42) * facets[0].shape[0],
        margin=dict(l=_row_label_margin(row_axis), r=10, t=30, b=10),
        plot_bgcolor="rgba(0,0,0,0)",
    )


def torus_figure(
    chips: dict[int, tuple[tuple[int, ...], tuple[int, ...]]],
    torus: tuple[int, ...],
    axes: tuple[str, ...],
    highlight: set[int] | None = None,
) -> go.Figure:
    """A TPU slice's chips at their torus coordinates (x →, y ↓; one grid per z on a 3-D slice), each box
    the device id in the mesh's colours, its hover the torus and mesh coordinates. ``chips``: device id →
    (torus coordinates, mesh coordinates)."""
    depth = torus[2] if len(torus) > 2 else 1
    panels = _Panels(depth, 0.06, [f"z={z}" for z in range(depth)] if depth > 1 else None)
    big = len(chips) > 16
    by_z: dict[int, list] = {}
    for device, (where, mesh_at) in chips.items():
        by_z.setdefault(where[2] if len(where) > 2 else 0, []).append((device, where, mesh_at))
    for z in range(depth):
        placed = by_z.get(z, [])
        panels.targets(
            z, [w[0] + 0.46 for _, w, _ in placed], [w[1] + 0.46 for _, w, _ in placed], [d for d, _, _ in placed]
        )
        for device, where, mesh_at in placed:
            dim = highlight is not None and device not in highlight
            panels.box(
                z,
                where[0],
                where[0] + 0.92,
                where[1],
                where[1] + 0.92,
                device_color(device),
                f"<b>{device}</b>" if big else f"<b>{device}</b><br>{tuple(mesh_at)}",
                f"device {device}<br>torus (x, y{', z' if len(where) > 2 else ''}) {tuple(where)}"
                f"<br>mesh coords {dict(zip(axes, mesh_at))}",
                opacity=0.25 if dim else 0.95,
                name=f"device {device}",
                meta={"device": device},
            )
        panels.axes(
            z,
            dict(
                title=dict(text="torus x →"),
                tickvals=[i + 0.46 for i in range(torus[0])],
                ticktext=[str(i) for i in range(torus[0])],
                showgrid=False,
                zeroline=False,
            ),
            dict(
                autorange="reversed",
                tickvals=[i + 0.46 for i in range(torus[1])],
                ticktext=[str(i) for i in range(torus[1])],
                showgrid=False,
                zeroline=False,
                scaleanchor=f"x{z + 1 if z else ''}",
            ),
        )
    _row_axis_label(panels, "torus y")
    return panels.figure(
        showlegend=False,
        height=90 + (70 if not big else 30) * torus[1],
        margin=dict(l=_row_label_margin("torus y"), r=10, t=30, b=10),
        plot_bgcolor="rgba(0,0,0,0)",
    )


def _view_2d(layout: ArrayLayout):
    """(rows, cols, per-device (facet key, row range, col range)) for any rank."""
    shape = layout.shape
    if len(shape) == 0:
        return 1, 1, {d: ((), (0, 1), (0, 1)) for d in layout.devices}
    if len(shape) == 1:
        return 1, shape[0], {d: ((), (0, 1), r[0]) for d, r in layout.devices.items()}
    return shape[-2], shape[-1], {d: (tuple(r[:-2]), r[-2], r[-1]) for d, r in layout.devices.items()}


def shard_map_figure(
    layout: ArrayLayout,
    coords: dict[int, tuple[int, ...]],
    axes: tuple[str, ...],
    title: str | None = None,
    height: int = 230,
    owners: dict[int, int] | None = None,
    highlight: set[int] | None = None,
) -> go.Figure:
    """Which block of ``layout``'s array each device holds, drawn in array coordinates.

    Rank 1 is a single row; rank ≥ 3 gets one panel per distinct slice of the leading dimensions.
    Blocks are rectangles, whatever the array's size. With ``owners`` (device → JAX process), the
    hover says which process owns each shard — the only one that can address it. With
    ``highlight``, other devices' stripes are dimmed. Each block has a click target whose
    customdata is ``[path, "ids of the devices holding it", its ranges]``.
    """
    rows, cols, view = _view_2d(layout)
    blocks: dict[tuple, list[int]] = {}
    for device, key in sorted(view.items()):
        blocks.setdefault(key, []).append(device)
    facets = sorted({key[0] for key in blocks})[:MAX_FACETS]
    panels = _Panels(len(facets), 0.04, [_facet_title(f) for f in facets] if len(facets) > 1 else None)
    per_facet = {f: sum(1 for key in blocks if key[0] == f) for f in facets}
    for (facet, rows_of, cols_of), group in blocks.items():
        if facet not in facets:
            continue
        panel = facets.index(facet)
        block = _Block(layout, group, rows_of, cols_of)
        stripes = [_stripe(panels, panel, block, i, coords, axes, owners, highlight) for i in range(len(group))]
        if per_facet[facet] <= MAX_LABELLED_BLOCKS:  # past that, labels overlap into a smear: hover instead
            label = ("dev " if len(group) == 1 else "devs ") + _device_list(group)
            panels.label(panel, (block.c0 + block.c1) / 2, (block.r0 + block.r1) / 2, label, bgcolor="rgba(0,0,0,0.35)")
        _click_targets(panels, panel, block, stripes, rows, cols)
    _map_axes(panels, layout, len(facets), rows, cols)
    if len(facets) > 1:  # the panel titles: which slice of the leading dimensions each shows
        for annotation in panels.annotations[: len(facets)]:
            annotation["font"] = dict(size=10)
    return panels.figure(
        title=dict(text=title or layout.path, font=dict(size=14)),
        showlegend=False,
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        plot_bgcolor="rgba(0,0,0,0.04)",
    )


class _Block:
    """One block of the array on the map: the devices holding it (one stripe each, side by side), its rows
    ``r0:r1`` and columns ``c0:c1`` in the drawn two dimensions, and its ranges in every dimension."""

    def __init__(self, layout: ArrayLayout, group: list[int], rows_of: tuple, cols_of: tuple):
        self.layout, self.group = layout, group
        (self.r0, self.r1), (self.c0, self.c1) = rows_of, cols_of
        self.ranges = layout.devices[group[0]]
        self.where = ", ".join(f"{a}:{b}" for a, b in self.ranges) or "the scalar"
        self.width = (self.c1 - self.c0) / len(group)  # one stripe's


def _stripe(panels, panel: int, block: _Block, i: int, coords, axes, owners, highlight) -> str:
    """The ``i``-th holder's stripe of ``block`` in its device's colour (dimmed where ``highlight`` leaves it
    out), with what it holds and, with ``owners``, which process owns it; returns its hover text."""
    group, layout, device = block.group, block.layout, block.group[i]
    shared = f"<br>replicated on devices {_device_list(group)}" if len(group) > 1 else ""
    hover = (
        f"<b>device {device}</b> mesh coords {dict(zip(axes, coords.get(device, ())))}"
        f"<br>holds [{block.where}]<br>shard shape {layout.shard_shape}, {layout.bytes_per_device:,} bytes{shared}"
    )
    meta = {"device": device, "ranges": [list(r) for r in block.ranges], "shared_with": group}
    if owners is not None and device in owners:
        hover += f"<br>owned by process {owners[device]}: only it can address this shard"
        meta["process"] = owners[device]
    panels.box(
        panel,
        block.c0 + i * block.width,
        block.c0 + (i + 1) * block.width,
        block.r0,
        block.r1,
        device_color(device),
        None,
        hover,
        name=f"device {device}",
        meta=meta,
        opacity=0.12 if highlight is not None and device not in highlight else 0.9,
    )
    return hover


def _click_targets(panels, panel: int, block: _Block, stripes: list[str], rows: int, cols: int) -> None:
    """The whole block is the click target, not only its centre: a grid of markers about 25 px apart on a typical
    map (24 across the array's width, 6 down its height), each carrying the hover of the stripe under it. The
    devices as "0,1,2,3": Streamlit hands a nested list back as a dict."""
    c0, c1, r0, r1 = block.c0, block.c1, block.r0, block.r1
    nx, ny = max(2, math.ceil(24 * (c1 - c0) / cols)), max(2, math.ceil(6 * (r1 - r0) / rows))
    xs = [c0 + (c1 - c0) * (k + 0.5) / nx for k in range(nx)]
    ys = [r0 + (r1 - r0) * (k + 0.5) / ny for k in range(ny)]
    grid = [(x, y) for y in ys for x in xs]
    panels.targets(
        panel,
        [x for x, _ in grid],
        [y for _, y in grid],
        [[block.layout.path, ",".join(map(str, block.group)), block.where]] * len(grid),
        size=24,
        hovers=[stripes[min(len(block.group) - 1, int((x - c0) / block.width))] for x, _ in grid],
    )


def _map_axes(panels, layout: ArrayLayout, facets: int, rows: int, cols: int) -> None:
    """Each panel's axes in array coordinates: columns across, rows down; with many (narrow) panels, fewer ticks
    and the axis titles once (else they overlap)."""
    many = facets > 2
    for f in range(facets):
        x_title = f"dim {len(layout.shape) - 1} (size {cols})" if layout.shape else ""
        panels.axes(
            f,
            dict(
                range=[0, cols],
                dtick=max(1, math.ceil(cols / (2 if many else 4))),
                title=dict(text=x_title if not many or f == 0 else "", font=dict(size=11)),
                showgrid=False,
                zeroline=False,
            ),
            dict(
                range=[rows, 0],
                dtick=max(1, math.ceil(rows / 4)),
                title=dict(
                    text=f"dim {len(layout.shape) - 2} ({rows})" if len(layout.shape) > 1 and f == 0 else "",
                    font=dict(size=11),
                ),
                showgrid=False,
                zeroline=False,
                showticklabels=len(layout.shape) > 1 and (f == 0 or not many),
            ),
        )


def _facet_title(ranges: tuple) -> str:
    """The leading dimensions' ranges of one panel, e.g. [0:32, 1:2] (the last two are whole)."""
    return "[" + ", ".join(f"{a}:{b}" for a, b in ranges) + "]"


def memory_figure(per_device: dict[int, dict[str, int]]) -> go.Figure:
    """Stacked bars: bytes of params, optimizer state and batch on each device."""
    devices = sorted(per_device)
    fig = go.Figure()
    for part, color in (("params", "#4C78A8"), ("optimizer", "#F58518"), ("batch", "#54A24B")):
        fig.add_trace(
            go.Bar(
                x=[f"dev {d}" for d in devices], y=[per_device[d][part] for d in devices], name=part, marker_color=color
            )
        )
    fig.update_layout(
        barmode="stack",
        height=260,
        yaxis_title="bytes",
        margin=dict(l=10, r=10, t=10, b=10),
        legend=dict(orientation="h", y=1.12),
    )
    return fig
