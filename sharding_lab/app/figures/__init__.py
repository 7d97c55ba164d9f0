"""Figures (Plotly): where arrays live (:mod:`.shard_maps`: the mesh, shard maps, memory) and how a run goes
(:mod:`.training`: loss, model fit, comparisons). One colour per device everywhere (:func:`device_color`).
"""

from .shard_maps import (
    MAX_FACETS,
    MAX_LABELLED_BLOCKS,
    PALETTE,
    device_color,
    memory_figure,
    mesh_figure,
    shard_map_figure,
    torus_figure,
)
from .training import compare_figure, downsample, fit_figure, loss_figure, sequence_figure

__all__ = [
    "MAX_FACETS",
    "MAX_LABELLED_BLOCKS",
    "PALETTE",
    "compare_figure",
    "device_color",
    "downsample",
    "fit_figure",
    "loss_figure",
    "memory_figure",
    "mesh_figure",
    "sequence_figure",
    "shard_map_figure",
    "torus_figure",
]
