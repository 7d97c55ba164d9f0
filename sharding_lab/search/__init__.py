"""The layout search: for a model, a slice and a batch, every mesh × preset × remat candidate, screened,
compiled for the target and ranked by its predicted step time.

- :mod:`.search` — the search itself (:func:`search`) and its answer (:class:`Search`);
- :mod:`.candidates` — what is enumerated, a candidate's :class:`Result`, and the screening that skips
  what cannot work or cannot fit before compiling;
- :mod:`.costing` — one candidate compiled for the target and priced, cached;
- :mod:`.bound` — a lower bound on a step from a compiled twin: what cannot win is not compiled;
- :mod:`.scheduler` — the queue run in this process or by worker processes (:mod:`.pool`, the mechanism);
- :mod:`.depth` — an extended best checked against a full-depth compile;
- :mod:`.first` — the first ranking: the book's count for every screened candidate, before compiling;
- :mod:`.verdict` — the why and the table, from the computed figures;
- :mod:`.underway` — what the search screens and compiles at this moment (said while no candidate is answered).

Use it as ``from sharding_lab import search``: ``search.search(...)``, ``search.Candidate``, …
"""

from .bound import bounded, defer, repeated_work_bound, xla_attention_excess
from .candidates import (
    ATTENTIONS,
    REMATS,
    SKIP_BATCH,
    SKIP_BOUND,
    SKIP_FLOOR,
    SKIP_HEADS,
    SKIP_INDIVISIBLE,
    SKIP_MEMORY,
    SKIP_MEMORY_INPUTS,
    SKIP_NO_REMAT,
    SKIP_OTHER,
    SKIP_REMAT_FULL_REFUSED,
    SKIP_THREE_AXES,
    SKIP_TWO_AXES,
    Candidate,
    Result,
    base_config,
    candidates,
    data_ways,
    kept_inputs_per_chip,
    label,
    leaner,
    mesh_shapes,
    model_ways,
    remat_rank,
    screen,
    splash_twin,
    state_bytes_per_chip,
    three_axis_count,
)
from .costing import compile_job, compiled_figures, cost_candidate, extend, full_depth, prediction, prediction_of
from .depth import check_extension
from .scheduler import pruned
from .search import SMALL_MODEL, Search, first_ranking, search
from .underway import Activity
from .verdict import depth_text, first_table, ordered, table, why

__all__ = [
    "Activity",
    "ATTENTIONS",
    "REMATS",
    "SKIP_BATCH",
    "SKIP_BOUND",
    "SKIP_FLOOR",
    "SKIP_HEADS",
    "SKIP_INDIVISIBLE",
    "SKIP_MEMORY",
    "SKIP_MEMORY_INPUTS",
    "SKIP_NO_REMAT",
    "SKIP_OTHER",
    "SKIP_REMAT_FULL_REFUSED",
    "SKIP_THREE_AXES",
    "SKIP_TWO_AXES",
    "SMALL_MODEL",
    "Candidate",
    "Result",
    "Search",
    "base_config",
    "bounded",
    "candidates",
    "check_extension",
    "compile_job",
    "compiled_figures",
    "cost_candidate",
    "data_ways",
    "defer",
    "depth_text",
    "extend",
    "first_ranking",
    "first_table",
    "full_depth",
    "kept_inputs_per_chip",
    "label",
    "leaner",
    "mesh_shapes",
    "ordered",
    "model_ways",
    "prediction",
    "prediction_of",
    "pruned",
    "remat_rank",
    "repeated_work_bound",
    "screen",
    "search",
    "splash_twin",
    "state_bytes_per_chip",
    "table",
    "three_axis_count",
    "why",
    "xla_attention_excess",
]
