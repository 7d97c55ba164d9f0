"""Model families: what a model must declare so that every page, the trainer and the export work.

A family lives in one file (:mod:`.mlp` is the worked example) and gives:

- ``Spec``: a frozen dataclass of its sizes, with ``validate()`` (sizes → :class:`ConfigError`);
- ``logical_axes``: its logical axis names, each with a one-line meaning — the rules table, the
  presets and the links are built from them;
- ``presets``: rule sets written with *roles* (``data``, ``model``) that :func:`bind_preset` binds
  to a mesh's axes;
- ``Model``: the ``nnx.Module``. Its ``__init__(spec, shard, rngs)`` creates every parameter with
  :func:`param`, which records the parameter's logical axes and rule name as metadata and asks
  ``shard(rule_name, *logical_axes)`` for its ``PartitionSpec``. Nothing else declares the
  parameters: :meth:`ModelFamily.parameters` traces the constructor abstractly and reads them back;
- ``batch(spec, batch_size)``: the arrays of one batch (``x``, ``y``) with shapes, logical axes, dtypes;
- ``activations(spec, batch_size)``: arrays the forward pass constrains with :func:`constrain`
  (empty for the MLP), so they are planned and drawn like parameters;
- ``make_dataset(spec, seed)``: the host dataset ``(X, Y)`` a batch's rows are drawn from;
- ``loss(model, x, y)``; ``probe(model, X)``: what the Train page draws while it learns;
- ``export_objects``: the functions and classes the exported script copies, source and all;
- optionally ``named_sizes``: public models' shapes (``--size llama3-8b``), each with its source.

Families from outside this package: :mod:`.plugins` imports a module named by ``--family``, by
``SHARDING_LAB_FAMILIES`` or by an installed package's ``sharding_lab.models`` entry point; each
registers its families with :func:`register` on import (docs/own-model.md).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import itertools
import math
from typing import Callable, ClassVar, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..errors import ConfigError

Shard = Callable[..., P]  # shard(rule_name, *logical_axes) -> PartitionSpec


@dataclasses.dataclass(frozen=True)
class Expect:
    """One collective the textbook strategy runs: which ops may do it, what it carries
    (weights, gradients or activations), in which pass, over the mesh axis playing ``role``."""

    ops: tuple[str, ...]
    carries: str
    phase: str
    role: str  # "data", "model", "stage" or "expert"


# What each strategy communicates on paper (the scaling book's training chapter — data parallelism,
# FSDP, Megatron tensor parallelism — and Korthikanti et al. 2022 for sequence parallelism). The
# Communication and Compare pages hold the compiled step against these (sharding_lab.program.textbook).
REPLICATED_TEXTBOOK: tuple[Expect, ...] = ()  # every device computes the whole step: nothing to send
DP_TEXTBOOK = (Expect(("all-reduce",), "gradients", "backward", "data"),)
FSDP_TEXTBOOK = (
    Expect(("all-gather",), "weights", "forward", "data"),
    Expect(("reduce-scatter",), "gradients", "backward", "data"),
)
MEGATRON_TEXTBOOK = (
    Expect(("all-reduce",), "activations", "forward", "model"),
    Expect(("all-reduce",), "activations", "backward", "model"),
)
# Megatron-SP: each sublayer's all-reduce becomes an all-gather of the sequence-split residual
# before it and a reduce-scatter after it, in both passes.
SEQUENCE_TEXTBOOK = (
    Expect(("all-gather",), "activations", "forward", "model"),
    Expect(("reduce-scatter",), "activations", "forward", "model"),
    Expect(("all-gather",), "activations", "backward", "model"),
    Expect(("reduce-scatter",), "activations", "backward", "model"),
)
# Pipeline parallelism (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021): each stage sends its
# microbatch's activations to the next stage and, in the backward pass, their gradients to the
# previous one — point to point, never all-to-all; the data axis all-reduces gradients as DP does.
PIPELINE_TEXTBOOK = (
    Expect(("collective-permute",), "activations", "forward", "stage"),
    Expect(("collective-permute",), "activations", "backward", "stage"),
    Expect(("all-reduce",), "gradients", "backward", "data"),
)


# Expert parallelism (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021): each token
# goes to its experts' devices and comes back — an all-to-all of activations over the expert axis before
# the experts and one after, in both passes; the replicated weights' gradients all-reduced as DP's.
EXPERT_TEXTBOOK = (
    Expect(("all-to-all",), "activations", "forward", "expert"),
    Expect(("all-to-all",), "activations", "backward", "expert"),
    Expect(("all-reduce",), "gradients", "backward", "data"),
)


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    title: str
    explanation: str
    logical: dict  # logical axis → role ("data"/"model"), tuple of roles, or None
    overrides: tuple = ()
    needs_two_axes: bool = False
    textbook: tuple[Expect, ...] | None = None  # what it communicates on paper (None: no textbook strategy)


@dataclasses.dataclass(frozen=True)
class SizeField:
    """One size of a model, as the sidebar and the command line ask for it."""

    label: str
    low: int
    high: int
    flag: str  # the command-line option, e.g. --width
    help: str = ""


@dataclasses.dataclass(frozen=True)
class ChoiceField:
    """One option of a model that is a word, not a number (the transformer's MLP kind, its
    rematerialisation), asked for as a select in the sidebar and ``--flag {a,b}`` on the command line.
    The Spec's default is one of ``choices``."""

    label: str
    choices: tuple[str, ...]
    flag: str
    help: str = ""


@dataclasses.dataclass(frozen=True)
class NamedSize:
    """A size with a name (``--size llama3-8b``): the Spec fields it sets (the rest keep their
    defaults), and, for a public model, its card's parameter count and where that came from."""

    title: str
    fields: dict
    card_parameters: float | None = None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """One array a run holds: its shape, the logical name of each dimension, the name its rules
    go by (overrides are per rule name), and its dtype."""

    shape: tuple[int, ...]
    logical_axes: tuple[str | None, ...]
    rule_name: str
    dtype: str = "float32"


class ModelSpec(Protocol):
    """What every family's ``Spec`` is (the MLP's :class:`.mlp.MLPSpec`, the transformer's
    :class:`.transformer_spec.TransformerSpec`): a frozen dataclass of sizes — plain data, so it keys caches
    and links — that names its family and checks itself (sizes → :class:`ConfigError`)."""

    family: ClassVar[str]

    def validate(self) -> None: ...


def param(value: jax.Array, shard: Shard, rule_name: str, *logical_axes: str | None) -> nnx.Param:
    """A parameter born sharded (``out_sharding=``, the blog's ``sharding=``), carrying its logical
    axes and rule name as metadata so the planner can read them back."""
    return nnx.Param(
        value,
        out_sharding=shard(rule_name, *logical_axes),
        logical_axes=logical_axes,
        rule_name=rule_name,
        created=next(_creation_order),
    )


_creation_order = itertools.count()  # nnx sorts attributes by name; plans list parameters as created


def forget_creation_order(*nodes) -> None:
    """Drop each variable's ``created`` stamp (what plans order parameters by) from a model a run trains. Flax
    keeps a variable's metadata in its pytree structure, and the stamp counts every parameter this process ever
    built: a state built after a retrace (``jax.clear_caches``, a jit cache evicted) would no longer match the
    out_shardings a cached chunk was built with, and JAX refuses the call ("different pytree metadata")."""
    for _, node in nnx.iter_graph(nodes):
        if isinstance(node, nnx.Variable) and "created" in node.get_metadata():
            node.del_metadata("created")


# The activation_rules entered, innermost last — per thread (and per asyncio task): a job's, a search's, a precompile's
# and a page's threads trace at once, each under its own layout (a module-global stack let one thread's trace read
# another's rules, and pop them). Nothing traces on a thread other than the one that entered the rules.
_entered: contextvars.ContextVar[tuple[activation_rules, ...]] = contextvars.ContextVar("activation_rules", default=())


def recording_activations() -> bool:
    """True while a program records its activations to check their layout (``activation_rules``
    with ``record``): a model then skips rematerialisation, since a value made inside
    ``nnx.remat`` cannot be returned from outside it. The forward pass computes the same."""
    entered = _entered.get()
    return bool(entered and entered[-1]._record)


def constrain(x: jax.Array, name: str) -> jax.Array:
    """Lay out the activation ``name`` as the rules say (inside the training step; a no-op when no
    rules are active, e.g. while tracing shapes)."""
    entered = _entered.get()
    return entered[-1]._fn(x, name) if entered else x


def constrain_to(x: jax.Array, spec: P | None) -> jax.Array:
    """Lay out ``x`` as ``spec`` on the active rules' mesh, as :func:`constrain` lays out a named activation
    (a no-op outside any :class:`activation_rules`, or without a spec)."""
    entered = _entered.get()
    if spec is None or not entered:
        return x
    from .data import place

    return place(x, NamedSharding(entered[-1]._layout[0], spec))


def activation_layout(name: str) -> tuple | None:
    """``(mesh, PartitionSpec)`` the active rules give the activation ``name`` (None outside any
    :class:`activation_rules`, or when the rules do not lay it out): for code that must place its work
    itself, as a custom kernel under ``shard_map`` does (:func:`sharding_lab.models.attention.splash_attention`)."""
    entered = _entered.get()
    if not entered or name not in entered[-1]._layout[1]:
        return None
    mesh, specs = entered[-1]._layout
    return mesh, specs[name]


class activation_rules:  # noqa: N801  (a context manager, used like a function)
    """Inside ``with activation_rules(plan):`` :func:`constrain` applies the plan's activation
    shardings (a constraint under Auto axes, a reshard under Explicit ones). With ``record`` (a
    list), each constrained activation is also appended as ``(name, value)``, so a program can
    return them and their live layout can be checked against the plan."""

    def __init__(self, mesh, specs: dict[str, P], record: list | None = None):
        from .data import place

        def fn(x, name):
            if name not in specs:
                return x
            x = place(x, NamedSharding(mesh, specs[name]))
            if record is not None:
                record.append((name, x))
            return x

        self._fn = fn
        self._record = record is not None
        self._layout = (mesh, specs)

    def __enter__(self):
        _entered.set((*_entered.get(), self))

    def __exit__(self, *exc):
        _entered.set(_entered.get()[:-1])


class ModelFamily:
    """The interface (see the module docstring). Subclasses set the class attributes and methods."""

    name: ClassVar[str]
    title: ClassVar[str]
    Spec: ClassVar[type[ModelSpec]]
    Model: ClassVar[type]
    logical_axes: ClassVar[dict[str, str]]
    presets: ClassVar[dict[str, Preset]]
    default_preset: ClassVar[str]
    export_objects: ClassVar[tuple] = ()
    export_helpers: ClassVar[tuple] = ()  # more functions/classes the exported model needs (before it)
    export_preamble: ClassVar[str] = ""  # imports and constants those need, as source (before them)
    probe_rows: ClassVar[int | None] = None  # the probe runs on the first rows of the dataset (None: all)
    # Spec fields that change how a step computes but not which parameters the model has (the transformer: remat,
    # attention): parameters() traces the constructor once for all their values (a 32-layer trace is seconds).
    step_only_fields: ClassVar[tuple[str, ...]] = ()
    explicit_refusal: ClassVar[str | None] = None  # why this family cannot run under Explicit axes
    train_defaults: ClassVar[dict] = {}  # optimizer / lr / steps that suit it (else the seed's)
    size_fields: ClassVar[dict[str, SizeField | ChoiceField]] = {}  # Spec field → how it is asked for
    named_sizes: ClassVar[dict[str, NamedSize]] = {}  # --size NAME → the fields it sets

    def named_spec(self, name: str):
        """The Spec of the named size ``name`` (ConfigError naming the sizes there are)."""
        if name not in self.named_sizes:
            known = ", ".join(self.named_sizes) or "none"
            raise ConfigError(f"unknown size {name!r} for the {self.name} model: choose one of {known}", "model")
        return self.Spec(**self.named_sizes[name].fields)

    def size_name(self, spec) -> str | None:
        """The name of the named size ``spec`` is, if it is one (remat aside: it is not a size)."""
        for name in self.named_sizes:
            named = self.named_spec(name)
            if all(getattr(named, f) == getattr(spec, f) for f in self.size_fields if f != "remat"):
                return name
        return None

    # -- the step options a family may declare (step_only_fields): read through these, never off the Spec ---------
    def remat_of(self, spec) -> str:
        """How ``spec``'s step rematerialises its blocks: its ``remat`` where the family declares that option,
        else ``"none"``."""
        return spec.remat if "remat" in self.step_only_fields else "none"

    def attention_of(self, spec) -> str | None:
        """The attention kind of ``spec``'s step where the family declares that option (None: it has none)."""
        return spec.attention if "attention" in self.step_only_fields else None

    def with_step_options(self, spec, **options):
        """``spec`` with the step options given (``remat=…``, ``attention=…``; None keeps a value) that the family
        declares; an option it does not declare is not set."""
        chosen = {k: v for k, v in options.items() if v is not None and k in self.step_only_fields}
        return dataclasses.replace(spec, **chosen) if chosen else spec

    def model_flops(self, spec, batch_size: int):
        """One training step's model FLOPs over the whole batch, for MFU (a :class:`~.flops.ModelFlops`): PaLM's
        6·N per token for the weights plus 6·L·H·Q·T for causal attention
        (half PaLM's 12·L·H·Q·T), the MLP's matmuls exactly (:mod:`.flops`).
        A family of its own overrides this; None: no count (the lab then reports HFU only)."""
        from .flops import model_flops

        return model_flops(self, spec, batch_size)

    def parameter_count(self, spec) -> int:
        """How many numbers the model's parameters hold, from their abstract shapes."""
        return sum(math.prod(a.shape) for a in self.parameters(spec).values())

    # -- declared by the model -------------------------------------------------------------
    def parameters(self, spec) -> dict[str, ArraySpec]:
        """Parameter path (``w1``, ``blocks/0/q``) → its :class:`ArraySpec`, in creation order,
        read from the model's own constructor traced on abstract values (nothing allocated)."""
        if self.step_only_fields:
            spec = dataclasses.replace(spec, **{f: getattr(type(spec)(), f) for f in self.step_only_fields})
        return dict(_traced_parameters(type(self), spec))

    def batch(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        raise NotImplementedError

    def activations(self, spec, batch_size: int) -> dict[str, ArraySpec]:
        return {}

    def activation_bytes(self, spec, batch_size: int) -> int:
        """Bytes of activations one step keeps for the backward pass (summed over the batch)."""
        raise NotImplementedError

    def make_dataset(self, spec, seed: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def loss(self, model, x: jax.Array, y: jax.Array) -> jax.Array:
        raise NotImplementedError

    def probe_set(self, spec, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the dataset the Train page probes and draws (the first ``probe_rows``)."""
        x, y = self.make_dataset(spec, seed)
        return (x, y) if self.probe_rows is None else (x[: self.probe_rows], y[: self.probe_rows])

    def probe(self, model, x: jax.Array) -> jax.Array:
        """What the Train page draws while training (default: the model's output)."""
        return model(x)

    def build(self, spec, shard: Shard, rngs: nnx.Rngs) -> nnx.Module:
        return self.Model(spec, shard, rngs)

    def refusal(self, spec, platform: str, pipelined: bool) -> str | None:
        """Why ``spec`` cannot be compiled for devices of ``platform`` (``cpu``, ``tpu``, ``gpu``) — or in
        pipeline stages, when ``pipelined`` — as a sentence that says what to choose instead; None when it can.
        A TPU kernel, say, compiles for TPU targets only (:func:`sharding_lab.training.config.plan` asks)."""
        return None


def _no_sharding(rule_name, *logical_axes):
    return None


class _CountedKeys:
    """Where the lab's own models take their keys (``rngs.params()``), a stand-in for ``nnx.Rngs`` whose counter
    is a Python int: traced, each ``nnx.Rngs`` counter update makes Flax ask the tracer for its sharding, and JAX
    answers with an error message that walks the whole trace so far — quadratic in the model's size (reading
    Llama 3 70B's parameters: 13-22 s; 2-4 s so). The keys are traced all the same; only shapes are read."""

    def __init__(self, key):
        self.key, self.count = key, 0

    def __call__(self):
        self.count += 1
        return jax.random.fold_in(self.key, self.count)

    def __getattr__(self, stream: str):  # rngs.params(), or any other stream
        return self


@functools.lru_cache(maxsize=256)
def _traced_parameters(family_type: type, spec) -> tuple[tuple[str, ArraySpec], ...]:
    family = family_type()
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):
        if family_type.__module__.startswith("sharding_lab."):
            model = nnx.eval_shape(lambda key: family.build(spec, _no_sharding, _CountedKeys(key)), jax.random.key(0))
        else:  # a family from another module: everything traced (its constants may be big)
            model = nnx.eval_shape(lambda: family.build(spec, _no_sharding, nnx.Rngs(0)))
    found = []
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        meta = variable.get_metadata()
        found.append(
            (
                meta["created"],
                "/".join(map(str, path)),
                ArraySpec(
                    tuple(variable.get_value().shape),
                    tuple(meta["logical_axes"]),
                    meta["rule_name"],
                    str(jnp.dtype(variable.get_value().dtype)),
                ),
            )
        )
    return tuple((path, array) for _, path, array in sorted(found, key=lambda item: item[0]))


FAMILIES: dict[str, ModelFamily] = {}


def register(family_type: type) -> type:
    """Class decorator: make a :class:`ModelFamily` subclass a model of the lab (the picker,
    ``--model``, links). A name another family already has is refused (ConfigError)."""
    taken = FAMILIES.get(family_type.name)
    if taken is not None and (type(taken).__module__, type(taken).__qualname__) != (
        family_type.__module__,
        family_type.__qualname__,
    ):  # the same class imported again is no clash
        raise ConfigError(
            f"model family name {family_type.name!r} is taken by {type(taken).__module__}: "
            f"give {family_type.__module__}.{family_type.__qualname__} another name",
            "model",
        )
    FAMILIES[family_type.name] = family_type()
    return family_type


def family(name: str) -> ModelFamily:
    if name not in FAMILIES:
        raise ConfigError(f"unknown model {name!r}: choose one of {', '.join(FAMILIES)}", "model")
    return FAMILIES[name]


def family_of(spec) -> ModelFamily:
    """The family a model spec belongs to (each Spec class names its family)."""
    return family(type(spec).family)


# The lab's own families register themselves when imported; they import this module's interface first.
from . import mlp, transformer  # noqa: E402,F401

__all__ = [
    "forget_creation_order",
    "ArraySpec",
    "ModelSpec",
    "ChoiceField",
    "NamedSize",
    "recording_activations",
    "DP_TEXTBOOK",
    "EXPERT_TEXTBOOK",
    "Expect",
    "FSDP_TEXTBOOK",
    "MEGATRON_TEXTBOOK",
    "PIPELINE_TEXTBOOK",
    "REPLICATED_TEXTBOOK",
    "SEQUENCE_TEXTBOOK",
    "FAMILIES",
    "ModelFamily",
    "Preset",
    "SizeField",
    "activation_layout",
    "activation_rules",
    "constrain",
    "family",
    "family_of",
    "param",
    "register",
]
