"""Export: a standalone script that reproduces a configuration with plain JAX and Flax.

The script reads top to bottom like Flax's ``10_fsdp_and_optimizer.py`` — devices, mesh, rules,
model, optimizer, create under ``jit``, data, the training loop — on today's names, and imports
nothing from Sharding Lab. Run, it prints every array's per-device slices as
``layout <path> device <id>: <start>:<stop> ...`` lines and, last, ``final_loss=<float>``.
"""

from __future__ import annotations

import re

import math

from .config import LabConfig, plan as make_plan

_HEADER = '''"""Sharding Lab export — {label}.

Preset: {preset}; optimizer: {optimizer} (lr {lr}, decay {decay}); batch {batch}; {steps} steps.
Runs on jax==0.10.2, jaxlib==0.10.2, flax==0.12.8, optax==0.2.8 (CPU: simulated devices).
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count={devices}"

import jax

jax.config.update("jax_num_cpu_devices", {devices})

import jax.numpy as jnp
import numpy as np
{optax_import}from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

# 1. The mesh: {label}, devices laid row-major.
mesh = Mesh(np.array(jax.devices()[:{size}]).reshape({shape}), {axes},
            axis_types=(AxisType.{axis_type},) * {ndim})

# 2. Rules: logical axis -> mesh axis (the seed's MeshRules), then per-parameter overrides.
RULES = {rules}
OVERRIDES = {overrides}


def spec(name, *logical_axes):
    """The PartitionSpec of one array: its override, else its logical axes through RULES."""
    if name in OVERRIDES:
        return P(*OVERRIDES[name])
    return P(*(RULES[axis] if axis else None for axis in logical_axes))

'''

_MATMUL_AUTO = '''
def matmul(h, w):
    return h @ w  # Auto axes: the compiler decides every sharding, as in the seed


def like_columns(b, h):
    return b

'''

_MATMUL_EXPLICIT = '''
def _names(target):
    return () if target is None else (target,) if isinstance(target, str) else tuple(target)


def _spec_of(x):
    spec = tuple(jax.typeof(x).sharding.spec)
    return spec + (None,) * (x.ndim - len(spec))


def matmul(h, w):
    """Explicit axes: shardings are types. Gather a weight split over the batch's axis (FSDP), and
    say how the output is split: rows like the batch, columns like the weight."""
    rows = _spec_of(h)[0]
    w_spec = tuple(None if set(_names(t)) & set(_names(rows)) else t for t in _spec_of(w))
    if w_spec != _spec_of(w):
        w = jax.sharding.reshard(w, P(*w_spec))
    cols = None if set(_names(w_spec[1])) & set(_names(rows)) else w_spec[1]
    return jnp.matmul(h, w, out_sharding=P(rows, cols))


def like_columns(b, h):
    """Explicit axes: the bias must be laid out like h's columns before h + b."""
    target = _spec_of(h)[1]
    return b if _spec_of(b)[0] == target else jax.sharding.reshard(b, P(target))

'''

_MODEL = '''
# 3. The model: the seed's MLP, every parameter born sharded (out_sharding=, the blog's sharding=).
class MLP(nnx.Module):
    def __init__(self, din, dmid, dout, hidden_layers, rngs):
        init = nnx.initializers.lecun_normal()
        self.w1 = nnx.Param(init(rngs.params(), (din, dmid)), out_sharding=spec("w1", "embed", "mlp"))
        self.b1 = nnx.Param(jnp.zeros((dmid,)), out_sharding=spec("b1", "mlp"))
        self.layers = [("w1", "b1")]
        for i in range(1, hidden_layers + 1):
            setattr(self, f"wh{i}", nnx.Param(init(rngs.params(), (dmid, dmid)),
                                             out_sharding=spec(f"wh{i}", "embed", "mlp")))
            setattr(self, f"bh{i}", nnx.Param(jnp.zeros((dmid,)), out_sharding=spec(f"bh{i}", "mlp")))
            self.layers.append((f"wh{i}", f"bh{i}"))
        self.w2 = nnx.Param(init(rngs.params(), (dmid, dout)), out_sharding=spec("w2", "embed", "mlp"))

    def __call__(self, x):
        h = x
        for w, b in self.layers:
            z = matmul(h, getattr(self, w)[...])
            h = nnx.relu(z + like_columns(getattr(self, b)[...], z))
        return matmul(h, self.w2[...])

'''

_SEED_SGD = '''
# 4. The optimizer: the seed's momentum SGD. Each buffer is created from its parameter's value and
#    metadata, so it inherits the parameter's sharding. (The blog's nnx.Object is now nnx.Pytree.)
class SGDState(nnx.Variable):
    pass


class SGD(nnx.Pytree):
    def __init__(self, model, lr, decay):
        self.lr, self.decay = lr, decay
        params = nnx.state(model, nnx.Param)
        self.momentum = nnx.data(jax.tree.map(
            lambda p: SGDState(jnp.zeros_like(p[...]), **p.get_metadata()), params,
            is_leaf=lambda x: isinstance(x, nnx.Variable)))

    def update(self, model, grads):
        def step(param, momentum, grad):
            momentum[...] = self.decay * momentum[...] + (1 - self.decay) * grad[...]
            param[...] = param[...] - self.lr * momentum[...]

        jax.tree.map(step, nnx.state(model, nnx.Param), self.momentum, grads,
                     is_leaf=lambda x: isinstance(x, nnx.Variable))


def make_optimizer(model):
    return SGD(model, lr=LR, decay=DECAY)

'''

_OPTAX = '''
# 4. The optimizer: TX_NAME through nnx.Optimizer, whose state is sharded like the parameters.
def make_optimizer(model):
    return nnx.Optimizer(model, TX, wrt=nnx.Param)

'''

_TRAIN = '''
# 5. Create model and optimizer inside jit, under the mesh, so every array is born sharded.
@nnx.jit
def create():
    model = MLP(DIN, DMID, DOUT, HIDDEN, rngs=nnx.Rngs(SEED))
    return model, make_optimizer(model)


with jax.set_mesh(mesh):
    model, optimizer = create()
# With Auto axes, jit may hand results back in a layout of the compiler's choosing (the seed's loop
# lets w2 drift to row-split); pinning every output to the layout it was born with keeps the plan.
born_with = jax.tree.map(lambda a: a.sharding, nnx.state((model, optimizer)))

# 6. The data: y = 0.8·x² + 0.1 + noise; each batch is split along the data axis.
rng = np.random.default_rng(SEED)
X = np.linspace(-2, 2, 100, dtype=np.float32)[:, None]
Y = (0.8 * X**2 + 0.1 + rng.normal(0, 0.1, size=X.shape)).astype(np.float32)
X, Y = np.repeat(X, DIN, axis=1), np.repeat(Y, DOUT, axis=1)
batch_sharding = NamedSharding(mesh, spec("x", "data", None))


# 7. The jitted step: loss, gradients, update. JAX inserts the communication the layout needs.
@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((y - model(x)) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    nnx.update((model, optimizer), jax.lax.with_sharding_constraint(nnx.state((model, optimizer)), born_with))
    return loss


def show_layout(x, y):
    """Which slice of every array each device holds, read from the live arrays."""
    arrays = {f"params/{name}": v[...] for (name,), v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    for path, v in nnx.to_flat_state(nnx.state(optimizer)):
        name = "/".join(str(p) for p in path if not isinstance(p, int) and p != "opt_state")
        arrays["opt/" + name] = v[...]
    arrays.update({"batch/x": x, "batch/y": y})
    for name, array in arrays.items():
        print(f"{name} {array.shape} {array.sharding.spec}")
        for shard in sorted(array.addressable_shards, key=lambda s: s.device.id):
            ranges = " ".join(f"{s.start or 0}:{n if s.stop is None else s.stop}"
                              for s, n in zip(shard.index, array.shape))
            print(f"layout {name} device {shard.device.id}: {ranges}")


losses = []
with jax.set_mesh(mesh):
    for step in range(STEPS):
        idx = rng.choice(len(X), size=BATCH)
        x, y = jax.device_put((X[idx], Y[idx]), batch_sharding)
        losses.append(float(train_step(model, optimizer, x, y)))
        if step % 1000 == 0:
            print(f"step {step}: loss {losses[-1]:.5f}")
    show_layout(x, y)

print(f"final_loss={np.mean(losses[-100:]):.6f}")
'''


def _fill(template: str, **values) -> str:
    """Put literal values into a template's UPPERCASE placeholders (whole words only)."""
    return re.sub(r"\b(" + "|".join(values) + r")\b", lambda m: str(values[m.group(1)]), template)


def export_script(config: LabConfig) -> str:
    """The standalone script for ``config`` (validated first: what cannot run is not exported)."""
    plan = make_plan(config)
    rules, mesh, model = plan.rules, config.mesh, config.model
    optax_tx = {"sgd": f"optax.sgd({config.lr!r}, momentum={config.decay!r})",
                "adamw": f"optax.adamw({config.lr!r})"}
    parts = [_HEADER.format(
        label=mesh.label(), preset=config.preset or "custom rules", optimizer=config.optimizer,
        lr=config.lr, decay=config.decay, batch=config.batch_size, steps=config.steps,
        devices=max(8, mesh.size), optax_import="import optax\n" if config.optimizer in optax_tx else "",
        size=mesh.size, shape=tuple(mesh.shape), axes=tuple(mesh.axes), ndim=len(mesh.shape),
        axis_type="Explicit" if mesh.axis_type == "explicit" else "Auto",
        rules="{" + ", ".join(f"{k!r}: {v!r}" for k, v in rules.logical().items()) + "}",
        overrides="{" + ", ".join(f"{n!r}: {tuple(d)!r}" for n, d in rules.overrides) + "}")]
    parts.append(_MODEL)
    parts.append(_MATMUL_EXPLICIT if mesh.axis_type == "explicit" else _MATMUL_AUTO)
    if config.optimizer in optax_tx:
        parts.append(_fill(_OPTAX, TX_NAME=f"optax {config.optimizer}", TX=optax_tx[config.optimizer]))
    else:
        parts.append(_fill(_SEED_SGD, LR=repr(config.lr), DECAY=repr(config.decay)))
    parts.append(_fill(_TRAIN, DIN=model.din, DMID=model.dmid, DOUT=model.dout, HIDDEN=model.hidden_layers,
                       SEED=config.seed, STEPS=config.steps, BATCH=config.batch_size))
    return "".join(parts)


def script_name(config: LabConfig) -> str:
    shape = "x".join(map(str, config.mesh.shape))
    return f"sharding_lab_{shape}_{config.preset or 'custom'}.py"


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
