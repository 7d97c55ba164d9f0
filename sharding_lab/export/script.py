"""Export: a standalone script that reproduces a configuration with plain JAX and Flax.

The script reads top to bottom like Flax's ``10_fsdp_and_optimizer.py`` — devices, mesh, rules,
model, optimizer, create under ``jit``, data, the training loop — on today's names, and imports
nothing from Sharding Lab. It is not a second copy kept by hand: the model, its data and its loss
are the model family's own source (``ModelFamily.export_objects``, read with
:func:`sharding_lab.export.source.source_of`), and
the step is the trainer's (:func:`sharding_lab.training.step.make_train_step`): loss, gradients,
update, outputs pinned to the layout they were born with. Run, it prints every array's
per-device slices as ``layout <path> device <id>: <start>:<stop> ...`` lines and, last,
``final_loss=<float>``.
"""

from __future__ import annotations

import re
import textwrap

from .. import models
from ..errors import ConfigError
from ..models import ops
from ..sharding.rules import target_text
from ..stacks import stacks_text
from ..training.config import LabConfig
from ..training.config import plan as make_plan
from ..training.optimizer import SGD, SGDState
from .maxtext import CHECKED, maxtext
from .source import source_of

_HEADER = '''"""Sharding Lab export — {title} on a {label} mesh.

Preset: {preset}; optimizer: {optimizer} (lr {lr}, decay {decay}); batch {batch}; {steps} steps.
Rules (what RULES and OVERRIDES below hold): {rules_text}.
Runs unchanged, with the same output, on {stacks} (CPU: simulated devices).
{maxtext}
"""
from __future__ import annotations

import os

# {devices} simulated CPU devices; XLA flags of your own are kept
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count={devices}"

import jax

jax.config.update("jax_num_cpu_devices", {devices})

import functools
import itertools
import types

import jax.numpy as jnp
import numpy as np
{optax_import}from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

# 1. The mesh: {label}, {axis_type} axes (jax.make_mesh's default is Explicit). On simulated CPU devices it lays
#    them row-major; on TPUs and GPUs it orders them by the chips' topology.
mesh = jax.make_mesh({shape}, {axes}, axis_types=(AxisType.{axis_type},) * {ndim}, devices=jax.devices()[:{size}])

# 2. Rules: logical axis -> mesh axis (the seed's MeshRules), then per-parameter overrides.
RULES = {rules}
OVERRIDES = {overrides}
ACTIVATIONS = {activations}


def shard(name, *logical_axes):
    """The PartitionSpec of one array: its override, else its logical axes through RULES."""
    if name in OVERRIDES:
        return P(*OVERRIDES[name])
    return P(*(RULES.get(axis) if axis else None for axis in logical_axes))


def constrain(x, name):
    """Lay an activation out as ACTIVATIONS says (a constraint under Auto axes; a reshard under
    Explicit axes, where a constraint may only assert what already is)."""
    return constrain_to(x, ACTIVATIONS[name]) if name in ACTIVATIONS else x


def constrain_to(x, spec):
    """Lay an array out as ``spec`` (also the loop over layers' stacked weights, as each layer's is stored)."""
    sharding = NamedSharding(mesh, spec)
    if AxisType.Explicit in mesh.axis_types:
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)

'''

_SEED_OPTIMIZER = """
def make_optimizer(model):
    return SGD(model, lr=LR, decay=DECAY)

"""

_OPTAX = """
# TX_NAME through nnx.Optimizer, whose state is sharded like the parameters.
def make_optimizer(model):
    return nnx.Optimizer(model, TX, wrt=nnx.Param)

"""

_TRAIN = '''
# 5. Create model and optimizer inside jit, under the mesh, so every array is born sharded.
@nnx.jit
def create():
    model = MODEL(spec, shard, rngs=nnx.Rngs(SEED))
    return model, make_optimizer(model)


with jax.set_mesh(mesh):
    model, optimizer = create()
graphdef, state = nnx.split((model, optimizer))

# 6. The data: batches of rows of (X, Y), each batch split as the rules say.
<<DATASET_SOURCE>>

X, Y = DATASET(spec, SEED)
batch_shardings = (NamedSharding(mesh, shard("x", *X_AXES)), NamedSharding(mesh, shard("y", *Y_AXES)))
rng = np.random.default_rng(SEED)


# 7. The jitted step: loss, gradients, update. JAX inserts the communication the layout needs.
<<LOSS_SOURCE>>

def train_step(state, x, y):
    model, optimizer = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(LOSS)(model, x, y)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), loss


# With Auto axes, jit may hand results back in a layout of its choosing (the seed's loop lets w2
# drift to row-split); pinning every output to the layout it was born with keeps the plan.
born_with = jax.tree.map(lambda a: a.sharding, state)
step = jax.jit(train_step, out_shardings=(born_with, NamedSharding(mesh, P())), donate_argnums=0)


def show_layout(state, x, y):
    """Which slice of every array each device holds, read from the live arrays."""
    model_state, optimizer_state = nnx.state(nnx.merge(graphdef, state)[0], nnx.Param), state[1]
    arrays = {"params/" + "/".join(map(str, path)): v[...] for path, v in nnx.to_flat_state(model_state)}
    for path, v in nnx.to_flat_state(optimizer_state):
        parts = list(path)
        if parts[:1] == ["opt_state"]:  # optax's state: drop the chain index
            parts = parts[2:] if len(parts) > 1 and isinstance(parts[1], int) else parts[1:]
        arrays["opt/" + "/".join(map(str, parts))] = v[...]
    arrays.update({"batch/x": x, "batch/y": y})
    for name, array in arrays.items():
        print(f"{name} {array.shape} {array.sharding.spec}")
        for piece in sorted(array.addressable_shards, key=lambda s: s.device.id):
            ranges = " ".join(f"{s.start or 0}:{n if s.stop is None else s.stop}"
                              for s, n in zip(piece.index, array.shape))
            print(f"layout {name} device {piece.device.id}: {ranges}")


losses = []
with jax.set_mesh(mesh):
    for i in range(STEPS):
        rows = rng.choice(len(X), size=BATCH)
        x, y = jax.device_put((X[rows], Y[rows]), batch_shardings)
        state, loss = step(state, x, y)
        losses.append(float(loss))
        if i % 1000 == 0:
            print(f"step {i}: loss {losses[-1]:.5f}")
    show_layout(state, x, y)

print(f"final_loss={np.mean(losses[-100:]):.6f}")
'''


def _fill(template: str, **values) -> str:
    """Put literal values into a template's UPPERCASE placeholders (whole words only)."""
    return re.sub(r"\b(" + "|".join(values) + r")\b", lambda m: str(values[m.group(1)]), template)


def _source(*objects) -> str:
    """The source of functions and classes, as written in Sharding Lab."""
    return "\n\n\n".join(textwrap.dedent(source_of(obj)).strip() for obj in objects) + "\n"


# Sharding Lab records a forward pass's activations to check their layout, and a model then skips
# rematerialisation (models.recording_activations); this script never records.
_NOT_RECORDING = '''def recording_activations():
    """This script never records activations (Sharding Lab's layout check does)."""
    return False


'''


def _model_section(model_class, helpers=(), preamble: str = "") -> str:
    code = preamble + _source(
        models.param,
        ops.explicit_axes,
        ops.spec_of,
        ops.mesh_axes_of,
        ops.matmul,
        ops.like_columns,
        *helpers,
        model_class,
    )
    stub = _NOT_RECORDING if "recording_activations()" in code else ""
    return (
        "\n# 3. The model, copied from Sharding Lab's model family: every parameter is born sharded\n"
        "#    (out_sharding=, the blog's sharding=); under Explicit axes the matmuls say their layouts.\n"
        "_creation_order = itertools.count()\n\n\n" + stub + code + "\n"
    )


def export_script(config: LabConfig, dtype: str = "mixed", size: str | None = None, hf=None) -> str:
    """The standalone script for ``config`` (validated first: what cannot run is not exported); its docstring ends
    with the same layout as MaxText's command (:func:`sharding_lab.export.maxtext.maxtext` of ``dtype``, ``size``
    and ``hf``), or the sentence saying why MaxText has none."""
    plan = make_plan(config)
    rules, mesh, family = plan.rules, config.mesh, config.family
    refusal = getattr(family, "export_refusal", None)
    if refusal:
        raise ConfigError(refusal, "rules")
    optax_tx = {"sgd": f"optax.sgd({config.lr!r}, momentum={config.decay!r})", "adamw": f"optax.adamw({config.lr!r})"}
    model_class, dataset, loss = family.export_objects
    sizes = ", ".join(f"{f}={getattr(config.model, f)!r}" for f in family.size_fields)
    parts = [
        _HEADER.format(
            title=family.title,
            label=mesh.label(),
            preset=config.preset or "custom rules",
            optimizer=config.optimizer,
            lr=config.lr,
            decay=config.decay,
            batch=config.batch_size,
            steps=config.steps,
            stacks=stacks_text(),
            devices=max(8, mesh.size),
            optax_import="import optax\n" if config.optimizer in optax_tx else "",
            size=mesh.size,
            shape=tuple(mesh.shape),
            axes=tuple(mesh.axes),
            ndim=len(mesh.shape),
            axis_type="Explicit" if mesh.axis_type == "explicit" else "Auto",
            rules_text=rules_text(rules, family.logical_axes),
            rules="{" + ", ".join(f"{a!r}: {rules.target(a)!r}" for a in family.logical_axes) + "}",
            overrides="{" + ", ".join(f"{n!r}: {tuple(d)!r}" for n, d in rules.overrides) + "}",
            activations="{" + ", ".join(f"{n!r}: P{tuple(s)!r}" for n, s in plan.activation_specs().items()) + "}",
            maxtext=_maxtext_lines(config, dtype, size, hf),
        )
    ]
    parts.append(_model_section(model_class, family.export_helpers, family.export_preamble))
    parts.append(f"spec = types.SimpleNamespace({sizes})\n\n")
    if config.optimizer in optax_tx:
        parts.append(
            "# 4. The optimizer: "
            + _fill(_OPTAX, TX_NAME=f"optax {config.optimizer}", TX=optax_tx[config.optimizer]).lstrip("\n# ")
        )
    else:
        parts.append(
            "# 4. The optimizer: the seed's momentum SGD. Each buffer is created from its parameter's\n"
            "#    value and metadata, so it inherits the parameter's sharding (nnx.Object is now nnx.Pytree).\n"
            + _source(SGDState, SGD)
            + _fill(_SEED_OPTIMIZER, LR=repr(config.lr), DECAY=repr(config.decay))
        )
    batch = family.batch(config.model, config.batch_size)
    # The family's own names for its model, dataset and loss (a family need not call them ours).
    train = _fill(
        _TRAIN,
        MODEL=model_class.__name__,
        LOSS=loss.__name__,
        DATASET=dataset.__name__,
        SEED=config.seed,
        STEPS=config.steps,
        BATCH=config.batch_size,
        X_AXES=repr(batch["x"].logical_axes),
        Y_AXES=repr(batch["y"].logical_axes),
    )
    parts.append(
        train.replace("<<DATASET_SOURCE>>", _source(dataset).strip()).replace(
            "<<LOSS_SOURCE>>", _source(loss).strip() + "\n"
        )
    )
    return "".join(parts)


def _maxtext_lines(config: LabConfig, dtype: str, size: str | None, hf) -> str:
    """The docstring's last paragraph: the layout in MaxText, as the app's "Run this layout in MaxText" gives it."""
    run = maxtext(config, dtype, size, hf)
    if run.command is None:
        return f"\nIn MaxText: no command — {run.notes[0]}."
    return f"\nIn MaxText ({CHECKED}):\n    {run.command}" + "".join(f"\n  {note}." for note in run.notes)


def rules_text(rules, logical_axes) -> str:
    """The rules as the header states them, read off the same object as the script's RULES: 'embed -> data,
    mlp -> replicated', then the arrays an override lays out its own way."""
    text = ", ".join(f"{axis} -> {target_text(rules.target(axis))}" for axis in logical_axes)
    if rules.overrides:
        text += "; overridden: " + ", ".join(
            f"{name} -> ({', '.join(target_text(t) for t in dims)})" for name, dims in rules.overrides
        )
    return text


def script_name(config: LabConfig) -> str:
    shape = "x".join(map(str, config.mesh.shape))
    return f"sharding_lab_{config.family.name}_{shape}_{config.preset or 'custom'}.py"


def script_sections(config: LabConfig) -> dict[int, str]:
    """The exported script cut at its numbered comments: step number → that step's code."""
    sections: dict[int, list[str]] = {0: []}
    current = 0
    for line in export_script(config).splitlines():
        match = re.match(r"^# (\d+)\. ", line)
        if match:
            current = int(match.group(1))
            sections[current] = []
        sections[current].append(line)
    return {step: "\n".join(lines).strip() + "\n" for step, lines in sections.items()}
