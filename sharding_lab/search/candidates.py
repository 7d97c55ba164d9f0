"""The search's candidates: what it enumerates (meshes × presets × remat × attention; on a multi-slice target also
which mesh axis crosses the slices), what a candidate and its result hold, and the screening that skips what
cannot work or cannot fit before anything is compiled (:mod:`sharding_lab.search.search` says why in order)."""

from __future__ import annotations

import dataclasses
import functools
import math

from ..errors import ConfigError, Named
from ..hardware import targets
from ..models import family_of
from ..sharding.mesh import MeshSpec
from ..sharding.rules import DCN_AXIS
from ..training.config import LabConfig
from ..training.config import plan as make_plan
from ..training.run_settings import family_defaults

BATCH_TOKENS = Named("Batch (tokens)", "--batch-tokens", "{flag}")  # the Plan page's box, the plan command's option

# The remat options searched unless told (the family's others on request, --remats): none, full, and the
# selective policy that keeps the q/k/v projections (sharding_lab.models.remat).
REMATS = ("none", "full", "save_qkv_proj")

# The attention kinds the CLI's plan searches when no --attention is given (a family with that option): XLA's,
# which materialises the S×S scores, and the Pallas splash kernel real TPU runs use (MaxText's default on TPU).
ATTENTIONS = ("xla", "splash")

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
    "a leaner step of the same layout (remat full or a selective policy, or the splash kernel's attention) does "
    "not fit (compiled, or by the block inputs it keeps), and this one keeps more (it recomputes less, or "
    "materialises the scores)"
)

SKIP_BOUND = (
    "cannot be faster than a compiled candidate that fits: a lower bound on its compute time is already no less "
    "than that candidate's step (XLA's attention: its splash twin's + the scores the kernel skips; devices that "
    "repeat each other's work: the weights' FLOPs; sharding_lab.search.bound)"
)

SKIP_FLOOR = (
    "fits (it passed the compiler's memory check) but cannot be faster than a compiled candidate that fits: its "
    "program, priced op by op before code generation, already takes no less than that candidate's step "
    "(sharding_lab.cost.floor); its code generation was not finished"
)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One layout to try: a mesh, a preset, a rematerialisation, an attention kind (None: the model's own);
    on a multi-slice target ``across`` names the mesh axis that crosses slices (over DCN), the axis
    :func:`sharding_lab.hardware.targets.slice_axis` gives that mesh."""

    mesh: tuple[int, ...]
    axes: tuple[str, ...]
    preset: str
    remat: str
    attention: str | None = None
    across: str | None = None

    @property
    def mesh_text(self) -> str:
        return "x".join(map(str, self.mesh))

    def config(self, base: LabConfig) -> LabConfig:
        model = base.family.with_step_options(base.model, remat=self.remat, attention=self.attention)
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
    step_s: float | None = None  # the calibrated step where the chip has a calibration, else the roofline's
    roofline_step_s: float | None = None  # the published-peak roofline (a lower bound)
    calibration: str | None = None  # which calibration priced step_s (None: the roofline)
    bound: str | None = None
    mfu: float | None = None  # model FLOPs utilisation (the model's own FLOPs: sharding_lab.models.flops)
    hfu: float | None = None  # hardware FLOPs utilisation (the compiled program's FLOPs)
    links: dict | None = None  # mesh axis → its link, bandwidth and where it runs (hardware.placement)
    terms: dict | None = None  # compute_s, memory_s, comm_s, latency_s
    per_chip_tokens: int | None = None
    data_ways: int = 1
    compile_s: float = 0.0
    compiled_layers: tuple[int, ...] = ()  # the depths compiled: (L,) as it is, (1, 2) extended to L
    extension: dict | None = None  # the check of its extension, once made (check_extension)
    book: dict | None = None  # the first ranking's figures: the scaling book's count before compiling (.first)
    step_floor_s: float | None = None  # before code generation, its program priced: the step is no less (cost.floor)
    # each compile of it in a worker: kind → [sent, memory check passed (or None), answered], seconds from the start
    timeline: dict | None = None

    @property
    def extended(self) -> bool:
        return len(self.compiled_layers) > 1

    @property
    def compiled(self) -> bool:
        """Whether the compiler answered it: compiled to the end, or to its memory check when its program already
        showed it cannot win (:data:`SKIP_FLOOR`)."""
        return self.skipped is None or self.skipped == SKIP_FLOOR

    @property
    def at_memory_check(self) -> bool:
        """Whether the compiler answered it at its memory check: refused there, or fitting but unable to win
        (:data:`SKIP_FLOOR`) — the others it answered generated their code (search.eta counts them apart)."""
        return self.compiled and (self.skipped is not None or bool(self.refused))

    def to_json(self) -> dict:
        c = self.candidate
        return {
            "mesh": c.mesh_text,
            "axes": list(c.axes),
            "preset": c.preset,
            "remat": c.remat,
            "attention": c.attention,
            "across_slices": c.across,
            "hbm_per_chip": self.hbm_per_chip,
            "fits": self.fits,
            "step_s": self.step_s,
            "roofline_step_s": self.roofline_step_s,
            "calibration": self.calibration,
            "bound": self.bound,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "links": self.links,
            "skipped": self.skipped,
            "why_skipped": self.detail or None,
            "refused": self.refused,
            "terms": self.terms,
            "per_chip_tokens": self.per_chip_tokens,
            "compile_s": round(self.compile_s, 2),
            "compiled_layers": list(self.compiled_layers) or None,
            "book": self.book,
            "step_floor_s": self.step_floor_s,
            "timeline": self.timeline,
        }


def mesh_shapes(chips: int, slices: int = 1) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """One axis (``data``: all chips) and every two-axis factorisation ``data × model`` with both > 1.

    On ``slices`` > 1 slices one mesh axis crosses them — the first whose size the slice count divides
    (:func:`sharding_lab.hardware.targets.slice_axis`; MaxText's ``dcn_*_parallelism``) — and the search tries
    each choice: ``data`` across slices (FSDP or data parallelism over ICI and DCN together: those of the meshes
    above whose ``data`` size the slices divide); a ``dcn`` axis of one chip per slice before every mesh of one
    slice (pure data parallelism across slices, the book's "pure data parallelism over the DCN axis and FSDP
    within a pod"; a pipeline preset puts its stages there); ``model`` across slices, one way per slice
    (tensor parallelism over DCN)."""
    shapes = [((chips,), ("data",))]
    shapes += [((a, chips // a), ("data", "model")) for a in range(2, chips) if chips % a == 0]
    if slices <= 1:
        return shapes
    within = chips // slices
    data = [(shape, axes) for shape, axes in shapes if shape[0] % slices == 0]
    dcn = [((slices, *shape), (DCN_AXIS, *axes)) for shape, axes in mesh_shapes(within)] if within > 1 else []
    return data + dcn + [((slices, within), ("model", "data"))]


def three_axis_count(chips: int, slices: int = 1) -> int:
    """How many 3-axis factorisations (every size > 1) there are: skipped, no preset has a third role — but for
    the ``dcn`` × data × model meshes of a multi-slice target (:func:`mesh_shapes`), which the search tries."""
    return sum(
        1
        for a in range(2, chips)
        for b in range(2, chips)
        if chips % (a * b) == 0 and chips // (a * b) > 1 and (slices <= 1 or a != slices)
    )


def base_config(model, on: targets.Target, batch_tokens: int, optimizer: str = "adamw", lr: float = 0.003) -> LabConfig:
    """The search's starting configuration on the target ``on``: ``batch_tokens`` ÷ the model's ``seq`` sequences a
    step."""
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
            (
                BATCH_TOKENS,
                f" must be a multiple of the sequence length {seq}, got {batch_tokens}: "
                f"e.g. {seq * max(1, (batch_tokens or 0) // seq) or seq}",
            ),
            "batch",
        )
    return LabConfig(
        mesh=MeshSpec((on.devices,), ("data",)),
        preset=None,
        model=model,
        optimizer=optimizer,
        lr=lr,
        batch_size=batch_tokens // seq,
        # A search prices one step; a run of the layout it finds (the Plan page's script, "Load into the sidebar")
        # trains the family's number of steps — 1 here made the downloaded script train one step.
        steps=family_defaults(family_of(model))["steps"],
        chunk=1,
        target=on.name,
    )


def has_experts(model) -> bool:
    """Whether the model's MLP is a mixture of experts (a dense one has none to split)."""
    return bool(getattr(model, "experts", 0))


def splits_experts(preset) -> bool:
    """An expert-parallel preset (ep, ep_dp, ep_tp): it names the ``expert`` role."""
    return "expert" in preset.logical


def pipelines(preset) -> bool:
    """A pipeline preset (pp, pp_tp): the layers on the ``stage`` role."""
    return preset.logical.get("layers") == "stage"


def offered_presets(family, model) -> tuple[str, ...]:
    """The presets a search can be asked for with ``model``: the family's, less expert parallelism for a dense model
    (it splits experts the model has none of: every such candidate would be refused)."""
    return tuple(n for n, p in family.presets.items() if has_experts(model) or not splits_experts(p))


def default_presets(family, model) -> tuple[str, ...]:
    """The presets a search tries unless told which (``--presets``, the Plan page's Presets): those offered, and for a
    dense model no pipelines either — on a slice's two-axis meshes the plan refuses most of them (stages that do not
    divide the layers; pp_tp needs a third axis): llama3-8b on v5e-256 had 96 such refusals among 264 candidates,
    and the same 37 to compile without them (docs/search.md). A pipeline is searched when asked for by name."""
    return tuple(n for n in offered_presets(family, model) if has_experts(model) or not pipelines(family.presets[n]))


def candidates(
    base: LabConfig,
    presets: tuple[str, ...] | None = None,
    remats: tuple[str, ...] | None = None,
    attentions: tuple[str, ...] | None = None,
) -> list[Candidate]:
    """Meshes × presets × remat × attention (None: the model's own only), in that order; ``presets`` None: the
    model's :func:`default_presets`."""
    on = base.on
    presets = tuple(presets or default_presets(base.family, base.model))
    options = base.family.step_only_fields  # the step options the model family declares
    remats = tuple(remats or (REMATS if "remat" in options else ("none",)))
    kinds = tuple(attentions) if attentions and "attention" in options else (None,)
    out = []
    for shape, axes in mesh_shapes(on.devices, on.slices):
        across = axes[targets.slice_axis(on, shape)] if on.slices > 1 else None
        out += [
            Candidate(shape, axes, preset, remat, kind, across)
            for preset in presets
            for remat in remats
            for kind in kinds
        ]
    return out


# What each remat option keeps for the backward pass, least first: ``full`` each block's input; a selective policy
# (sharding_lab.models.remat) that and the tensors it names; ``none`` every residual autodiff saves — a superset.
SELECTIVE = ("save_qkv_proj", "minimal", "save_dots")


def remat_rank(remat: str) -> int:
    """0 for remat full, 1 for a selective policy, 2 for none: the order in which a layout's steps keep more."""
    return 0 if remat == "full" else 2 if remat == "none" else 1


def leaner(candidate: Candidate) -> list[Candidate]:
    """The same layout's candidates that keep no more than ``candidate`` does: remat full (it keeps only each
    block's input), for a step without remat also each selective policy (it keeps the tensors it names, which a
    step without remat keeps too, and recomputes the rest) and, instead of XLA's attention, the splash kernel (it
    never writes the S×S scores). A candidate waits for them, and is skipped when one of them does not fit
    (:mod:`.scheduler`)."""
    remats = dict.fromkeys((candidate.remat, "full", *(SELECTIVE if candidate.remat == "none" else ())))
    kinds = dict.fromkeys((candidate.attention, "splash") if candidate.attention == "xla" else (candidate.attention,))
    return [
        dataclasses.replace(candidate, remat=r, attention=a)
        for r in remats
        for a in kinds
        if (r, a) != (candidate.remat, candidate.attention)
    ]


def splash_twin(candidate: Candidate) -> Candidate | None:
    """For a candidate with XLA's attention, the same layout and remat with the splash kernel's (None otherwise):
    the step whose compiled compute time bounds XLA's from below (:func:`sharding_lab.search.bound.bounded`)."""
    return dataclasses.replace(candidate, attention="splash") if candidate.attention == "xla" else None


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
    """Plan the candidate; a Result with ``skipped`` set when it cannot work or cannot fit, else with the book's
    count (:func:`sharding_lab.search.first.book_estimate`). Remembered: the first ranking screens every
    candidate before the compiles start, and the queue asks again (each asker gets its own copy)."""
    return dataclasses.replace(_screen(candidate, base, dtype))


@functools.lru_cache(maxsize=4096)  # a server's plan searches: a few hundred candidates each
def _screen(candidate: Candidate, base: LabConfig, dtype: str) -> Result:
    from ..hardware.chips import chip as get_chip
    from .first import book_estimate

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
    hbm = get_chip(base.on.chip).capacity
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
            f"block inputs ({config.model.layers} × the residual stream's {gb(kept / config.model.layers)}) "
            f"per chip > {hbm / 1e9:.1f} GB usable"
        )
        return result
    result.book = book_estimate(plan, dtype)
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


def label(c: Candidate) -> str:
    return (
        f"{c.mesh_text} ({', '.join(c.axes)}) {c.preset}, remat {c.remat}"
        + (f", attention {c.attention}" if c.attention else "")
        + (f", {c.across} across slices" if c.across else "")
    )


def gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB" if value >= 1e8 else f"{value / 1e6:.2f} MB"
