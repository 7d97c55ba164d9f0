"""The Plotly figures draw blocks per device for any rank, with consistent device colours."""

from jax.sharding import PartitionSpec as P

import sharding_lab as sl
from sharding_lab.app import figures
from sharding_lab.sharding.layout import planned_layout
from sharding_lab.sharding.mesh import device_ids, mesh_coords


def _stripes(fig):
    return [t for t in fig.data if t.meta and "ranges" in t.meta]


def test_rank3_array_gets_one_panel_per_leading_slice():
    mesh = sl.build_mesh(sl.MeshSpec((2, 4), ("data", "model")))
    layout = planned_layout("act", (4, 6, 8), mesh, P("data", None, "model"), P("data", None, "model"))
    fig = figures.shard_map_figure(layout, mesh_coords(mesh), ("data", "model"))
    stripes = _stripes(fig)
    assert sorted(t.meta["device"] for t in stripes) == list(range(8))
    assert {tuple(t.meta["ranges"][0]) for t in stripes} == {(0, 2), (2, 4)}
    assert len(fig.layout.annotations) >= 2 + 8  # two panel titles, one label per block


def test_large_dimensions_draw_blocks_not_cells():
    mesh = sl.build_mesh(sl.MeshSpec((1, 8), ("data", "model")))
    layout = planned_layout("w", (4096, 16384), mesh, P(None, "model"), P(None, "model"))
    fig = figures.shard_map_figure(layout, mesh_coords(mesh), ("data", "model"))
    assert len(_stripes(fig)) == 8


def test_scalar_and_replicated_blocks_are_striped_per_device():
    mesh = sl.build_mesh(sl.MeshSpec((2, 4), ("data", "model")))
    layout = planned_layout("opt/count", (), mesh, P(), P())
    stripes = _stripes(figures.shard_map_figure(layout, mesh_coords(mesh), ("data", "model")))
    assert len(stripes) == 8 and all(t.meta["shared_with"] == list(range(8)) for t in stripes)
    assert "replicated on devices 0–7" in stripes[0].text


def test_device_colours_match_between_mesh_and_maps():
    mesh = sl.build_mesh(sl.MeshSpec((2, 4), ("data", "model")))
    picture = figures.mesh_figure(device_ids(mesh), ("data", "model"))
    layout = planned_layout("b1", (32,), mesh, P("model"), P("model"))
    stripes = _stripes(figures.shard_map_figure(layout, mesh_coords(mesh), ("data", "model")))
    mesh_colour = {t.meta["device"]: t.fillcolor for t in picture.data if "device" in t.meta}
    assert all(mesh_colour[t.meta["device"]] == t.fillcolor for t in stripes)
    assert len(set(mesh_colour.values())) == 8


def test_three_axis_mesh_picture_has_a_panel_per_first_index():
    mesh = sl.build_mesh(sl.MeshSpec((2, 2, 2), ("x", "y", "z")))
    picture = figures.mesh_figure(device_ids(mesh), ("x", "y", "z"))
    assert sorted(t.meta["device"] for t in picture.data if "device" in t.meta) == list(range(8))
    assert [a.text for a in picture.layout.annotations][:2] == ["x=0", "x=1"]


def test_long_loss_curves_are_downsampled():
    x, y = figures.downsample(list(range(10_000)), limit=1000)
    assert len(x) == len(y) <= 1000 and x[-1] == 10_000


def test_a_whole_shard_map_block_is_its_click_target():
    """Issue 23: a block was clickable only on its small centre label, not on the block that shows
    the tooltip. Every stripe must have click targets (of its own block) spread over all of it,
    each showing the hover of the stripe under it."""
    mesh = sl.build_mesh(sl.MeshSpec((2, 4), ("data", "model")))
    layout = planned_layout("params/w1", (32, 64), mesh, P("data", None), P("data", None))  # 2 blocks, 4 copies
    fig = figures.shard_map_figure(layout, mesh_coords(mesh), ("data", "model"))
    points = [p for t in fig.data if t.meta and t.meta.get("targets") for p in zip(t.x, t.y, t.customdata, t.hovertext)]
    for stripe in _stripes(fig):
        x0, x1, y0, y1 = min(stripe.x), max(stripe.x), min(stripe.y), max(stripe.y)
        inside = [(x, y, c, h) for x, y, c, h in points if x0 < x < x1 and y0 < y < y1]
        assert inside and all(c[1] == ",".join(map(str, stripe.meta["shared_with"])) for _, _, c, _ in inside)
        assert all(h == stripe.text for *_, h in inside)
        # the targets reach every part of the stripe: its left and right, top and bottom quarters
        xs, ys = [x for x, *_ in inside], [y for _, y, *_ in inside]
        assert min(xs) < x0 + (x1 - x0) / 4 + 1e-9 or len(set(xs)) == 1
        assert max(ys) - min(ys) >= (y1 - y0) / 2


def test_a_diverged_loss_curve_gets_a_readable_log_axis():
    """Issue 23: lr 10 — the loss climbs 30 decades and one tick per decade stacked ~30 labels."""
    import math

    import numpy as np

    diverged = list(np.logspace(-1, 30, 200)) + [float("inf"), float("nan")]
    axis = figures.loss_figure(diverged).layout.yaxis
    assert axis.type == "log" and math.log10(1e30 / 1e-1) / axis.dtick <= 7
    assert figures.loss_figure([1.0, 0.1, 0.01]).layout.yaxis.dtick == 1  # a normal run: every decade


def test_batch_sweep_axis_reads_in_time_units_and_every_line_is_named():
    """Issue 23: the sweep's axis said "µs per step" with ticks "10µ, 100µ, 0.001", and its dotted
    line (the scaling book's critical batch) had no label."""
    from sharding_lab.app.panels.cost_view import sweep_figure

    rows = [
        {"strategy": s, "per_device_batch": b, "compute_s": 2e-8 * b, "comm_s": 3e-6}
        for s in ("dp", "fsdp")
        for b in (8, 32, 128, 512)
    ]
    fig = sweep_figure(rows, {"rows_per_device": 240})
    axis = fig.layout.yaxis
    assert "µs" not in (axis.title.text or "")
    assert list(axis.ticktext) == ["100 ns", "1 µs", "10 µs", "100 µs"][: len(axis.ticktext)]
    assert all(
        min(t) >= axis.tickvals[0] and max(t) <= axis.tickvals[-1]
        for t in ([r["compute_s"] for r in rows], [r["comm_s"] for r in rows])
    )
    dotted = [t for t in fig.data if t.line.dash == "dot"]
    assert len(dotted) == 1 and "240 rows" in dotted[0].name and dotted[0].showlegend is not False


def test_the_latency_caveat_cites_the_chip_s_own_links():
    """A TPU's step was told about NVLink, NCCL and the 8×H100 all-reduce; each chip now gets its own α."""
    from sharding_lab.app.panels.cost_view import latency_caveat
    from tests.support import made_prediction

    small = [{"count": 3, "bytes": 3000.0, "latency_s": 3e-6}]
    tpu = latency_caveat(made_prediction("tpu-v5e", collectives=small))
    gpu = latency_caveat(made_prediction("h100", collectives=small))
    assert "TPU ICI" in tpu and "NVLink" not in tpu and "H100" not in tpu and "3 collectives" in tpu
    assert "NVLink 3.5 µs" in gpu and "TPU ICI" not in gpu and "8×H100 all-reduce" in gpu


ARROWS = {"→": (1, 0), "↓": (0, 1), "←": (-1, 0), "↑": (0, -1)}  # in the text's own frame, y down


def _screen_arrows(fig, name: str) -> list[tuple[int, int]]:
    """Where each arrow drawn beside ``name`` points on the screen (y down): an annotation turned by its
    textangle (clockwise degrees), a y axis title by Plotly's quarter turn anticlockwise (−90°)."""
    layout = fig.to_dict()["layout"]
    texts = [(a["text"], a.get("textangle", 0)) for a in layout.get("annotations", [])]
    texts += [(v["title"]["text"], -90) for k, v in layout.items() if k.startswith("yaxis") and "title" in v]
    out = []
    for text, angle in texts:
        for arrow, (x, y) in ARROWS.items():
            if arrow in text and text.startswith(name + " "):
                turn = {0: (1, 0), 90: (0, 1), -90: (0, -1), 180: (-1, 0)}[int(angle)]  # (cos, sin)
                out.append((x * turn[0] - y * turn[1], x * turn[1] + y * turn[0]))
    return out


def test_the_row_axis_arrow_points_the_way_the_row_numbers_grow():
    """Issue 36: the mesh picture's rows are numbered downward, but its "data →" y title (turned a quarter
    anticlockwise by Plotly) pointed up, and "data ↓" then pointed right."""
    mesh = sl.build_mesh(sl.MeshSpec((2, 4), ("data", "model")))
    picture = figures.mesh_figure(device_ids(mesh), ("data", "model"))
    assert picture.layout.yaxis.autorange == "reversed"  # row 0 on top: the index grows downward
    assert _screen_arrows(picture, "data") == [(0, 1)]
    assert _screen_arrows(picture, "model") == [] and picture.layout.xaxis.title.text == "model →"
    chips = {d: ((d % 4, d // 4), (d // 4, d % 4)) for d in range(8)}  # device → (torus x, y), mesh coords
    torus = figures.torus_figure(chips, (4, 2), ("data", "model"))
    assert torus.layout.yaxis.autorange == "reversed" and _screen_arrows(torus, "torus y") == [(0, 1)]
