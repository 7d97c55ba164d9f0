"""Measuring a TPU chip for the calibrated step model (``sharding-lab calibrate``): what the chip's matrix unit
reaches for a grid of matmul shapes and dtypes, what the splash attention kernel reaches per sequence length and
block size, and the HBM bandwidth an elementwise pass gets. Run on a machine whose TPU is attached; the answer is
the JSON the lab ships as ``sharding_lab/cost/<chip>.calibration.json`` (:mod:`.calibration` reads it).

Every rate is the chip's own time for the program (JAX's profiler, :mod:`.device_times`: the median of ``repeats``
calls after a warm-up, no call from Python inside it): a matmul's rate includes reading its operands from HBM and
writing its result, so a skinny product that waits on memory shows a low rate — which is what the step's own
product of that shape will see. The splash kernel is timed call by call (forward, dq, dkv) at multi-head and at
grouped-query attention.
"""

from __future__ import annotations

import datetime
import math
import platform
import time

# The grid: rows (tokens per device), contraction and output widths as a transformer's steps have them.
MATMUL_ROWS = (512, 2048, 8192, 32768)
MATMUL_WIDTHS = (128, 512, 2048, 8192, 32768)
MATMUL_MAX_FLOPS = 2.0**42  # ~4.4e12 FLOPs: ~25 ms a call at the bf16 peak
MATMUL_MAX_BYTES = 2.0**31  # no operand or result over 2 GiB
SPLASH_SEQS = (1024, 2048, 4096, 8192)
SPLASH_BLOCKS = (128, 256, 512)
SPLASH_HEADS, SPLASH_HEAD_DIM = 16, 128
SPLASH_TOKENS = 8192  # sequences a call: as many as make this many tokens (one at 8,192)
BATCH_BYTES = 2**32  # operands held at once while the matmul grid runs
HBM_ELEMENTS = 2**28  # 1 GiB of f32 read and 1 GiB written


def _named(fn, name: str):
    """``fn`` jitted under a program name of its own (the trace tells programs apart by name)."""
    import jax

    fn.__name__ = fn.__qualname__ = name
    return jax.jit(fn)


def matmul_shapes() -> list[tuple[int, int, int]]:
    """(rows, contraction, columns) of the grid, each within the FLOP and byte caps."""
    out = []
    for m in MATMUL_ROWS:
        for k in MATMUL_WIDTHS:
            for n in MATMUL_WIDTHS:
                big = max(m * k, k * n, m * n) * 4
                if 2.0 * m * k * n <= MATMUL_MAX_FLOPS and big <= MATMUL_MAX_BYTES:
                    out.append((m, k, n))
    return out


def measure_matmuls(dtypes=("bf16", "f32"), repeats: int = 5, budget_s: float = 150.0) -> dict:
    """{dtype: [[m, k, n, FLOP/s], ...]} over :func:`matmul_shapes` (bf16 in, bf16 out; f32 at JAX's default
    precision, as the lab compiles), each product timed by the chip (:mod:`.device_times`); shapes left when
    ``budget_s`` runs out are skipped. Shapes are run in batches of at most ``BATCH_BYTES`` of operands."""
    import jax
    import jax.numpy as jnp

    from .device_times import timed_programs

    started = time.perf_counter()
    out: dict[str, list] = {}
    for name in dtypes:
        dtype = {"bf16": jnp.bfloat16, "f32": jnp.float32}[name]
        rows = out.setdefault(name, [])
        shapes = matmul_shapes()
        while shapes and time.perf_counter() - started < budget_s * (1 + dtypes.index(name)) / len(dtypes):
            batch, held = [], 0
            while shapes and held < BATCH_BYTES:
                m, k, n = shapes.pop(0)
                a = jax.random.normal(jax.random.key(0), (m, k), jnp.float32).astype(dtype)
                b = jax.random.normal(jax.random.key(1), (k, n), jnp.float32).astype(dtype)
                batch.append((f"{m},{k},{n}", _named(lambda a, b: a @ b, f"mm_{name}_{m}_{k}_{n}"), (a, b)))
                held += (m * k + k * n + m * n) * a.dtype.itemsize
            for label, timed in timed_programs(batch, repeats).items():
                m, k, n = (int(x) for x in label.split(","))
                rows.append([m, k, n, 2.0 * m * k * n / timed.median_s])
            del batch
    return out


def splash_flops(seq: int, block: int, heads: int, head_dim: int) -> dict:
    """The kernel's FLOPs per call kind for one sequence (:func:`sharding_lab.models.attention.kernel_figures`'
    formula: per visited block pair, 2 / 3 / 4 products of 2·block²·head_dim)."""
    from ..models.attention import SPLASH_MATMULS, causal_blocks

    pairs = causal_blocks(seq, block, block) * heads
    return {kind: n * 2.0 * block * block * head_dim * pairs for kind, n in SPLASH_MATMULS.items()}


def splash_cases() -> list[tuple[int, int, int, int]]:
    """(seq, block, heads, K/V heads) the kernel is timed at: multi-head attention at every block size, and
    grouped-query attention (4 query heads a K/V head) at the block the lab compiles for each length."""
    from ..models.attention import splash_block

    cases = [(seq, block, SPLASH_HEADS, SPLASH_HEADS) for seq in SPLASH_SEQS for block in SPLASH_BLOCKS if block <= seq]
    return cases + [(seq, splash_block(seq), SPLASH_HEADS, SPLASH_HEADS // 4) for seq in SPLASH_SEQS]


def measure_splash(repeats: int = 5) -> list[dict]:
    """The splash kernel (causal, bf16, ``SPLASH_HEADS`` query heads of ``SPLASH_HEAD_DIM``, sequences enough for
    ``SPLASH_TOKENS`` tokens) per sequence length, block size and K/V heads: forward alone, and forward +
    backward (jax.grad), each kernel call (fwd, dq, dkv) timed by the chip."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    from .device_times import timed_programs

    rows = []
    for seq, block, heads, kv_heads in splash_cases():
        batch = max(1, SPLASH_TOKENS // seq)
        mask = splash.MultiHeadMask([splash.CausalMask((seq, seq)) for _ in range(heads)])
        kernel = jax.vmap(
            splash.make_splash_mha(mask, block_sizes=splash.BlockSizes(*(block,) * 8), head_shards=1, q_seq_shards=1)
        )
        keys = jax.random.split(jax.random.key(seq + block + kv_heads), 3)
        q, k, v = (
            jax.random.normal(key, (batch, h, seq, SPLASH_HEAD_DIM), jnp.float32).astype(jnp.bfloat16)
            for key, h in zip(keys, (heads, kv_heads, kv_heads))
        )
        name = f"splash_{seq}_{block}_{heads}_{kv_heads}"
        forward = _named(lambda q, k, v, f=kernel: f(q, k, v), name + "_fwd")
        both = _named(
            jax.grad(lambda q, k, v, f=kernel: f(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2)), name + "_all"
        )
        timed = timed_programs([("fwd", forward, (q, k, v)), ("all", both, (q, k, v))], repeats)
        flops = {kind: batch * f for kind, f in splash_flops(seq, block, heads, SPLASH_HEAD_DIM).items()}
        calls = {}
        for kind in ("fwd", "dq", "dkv"):  # each kernel call's seconds in the forward + backward program
            spent = [s for op, (_, s) in timed["all"].per_call().items() if op.startswith(f"splash_mha_{kind}")]
            if spent:
                calls[kind] = sum(spent)
        t_fwd, t_all = timed["fwd"].median_s, timed["all"].median_s
        backward = flops["dq"] + flops["dkv"]
        rows.append(
            {
                "seq": seq,
                "block": block,
                "heads": heads,
                "kv_heads": kv_heads,
                "head_dim": SPLASH_HEAD_DIM,
                "batch": batch,
                "device_timed": timed["all"].device,
                "forward_s": t_fwd,
                "forward_backward_s": t_all,
                "kernel_s": calls,
                "forward_flops_per_s": flops["fwd"] / t_fwd,
                "backward_flops_per_s": backward / max(t_all - t_fwd, 1e-9),
                "flops_per_s": (flops["fwd"] + backward) / t_all,
            }
        )
        del q, k, v
    return rows


def measure_hbm(repeats: int = 5) -> dict:
    """Bytes per second of an elementwise pass (read once, write once) over 1 GiB of f32 and of bf16."""
    import jax.numpy as jnp

    from .device_times import timed_programs

    out = {}
    for name, dtype in (("f32", jnp.float32), ("bf16", jnp.bfloat16)):
        x = jnp.ones((HBM_ELEMENTS,), dtype)
        timed = timed_programs([(name, _named(lambda x: x * 1.5 + 1, f"hbm_{name}"), (x,))], repeats)[name]
        out[name] = 2.0 * x.size * x.dtype.itemsize / timed.median_s
        del x
    return {"bytes_per_s": max(out.values()), "by_dtype": out, "device_timed": timed.device}


def calibrate(repeats: int = 5, budget_s: float = 240.0) -> dict:
    """Everything :mod:`.calibration` needs, measured on the attached TPU: the JSON written to the data file."""
    import jax

    device = jax.devices()[0]
    if device.platform != "tpu":
        from ..errors import ConfigError

        raise ConfigError(
            f"calibrate measures a TPU chip; this machine's JAX sees {device.platform} devices only — run it where "
            "a TPU is attached (JAX_PLATFORMS unset or tpu)",
            "calibrate",
        )
    started = time.perf_counter()
    hbm = measure_hbm(repeats)
    splash_rows = measure_splash(repeats)
    matmuls = measure_matmuls(repeats=repeats, budget_s=max(30.0, budget_s - (time.perf_counter() - started)))
    return {
        "chip": _chip_id(device.device_kind),
        "device_kind": device.device_kind,
        "date": datetime.date.today().isoformat(),
        "jax": jax.__version__,
        "libtpu": _libtpu_version(),
        "python": platform.python_version(),
        "repeats": repeats,
        "method": "the chip's own times from JAX's profiler (sharding_lab.cost.device_times), median of repeats "
        "after a warm-up; the wall clock of each call where the trace has no device plane",
        "hbm": hbm,
        "matmul": {"columns": ["m", "k", "n", "flops_per_s"], **matmuls},
        "splash": splash_rows,
        "seconds": time.perf_counter() - started,
    }


def _chip_id(kind: str) -> str:
    text = kind.lower()
    if "v5 lite" in text or "v5e" in text:
        return "tpu-v5e"
    if "v5p" in text or text.strip() == "tpu v5":
        return "tpu-v5p"
    if "v6" in text:
        return "tpu-v6e"
    return "tpu-" + "".join(c for c in text if c.isalnum())


def _libtpu_version() -> str | None:
    import importlib.metadata

    for name in ("libtpu", "libtpu-nightly"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def geometric_mean(values) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0


def write_calibration(out: str | None = None, repeats: int = 5, budget_s: float = 240.0) -> int:
    """``sharding-lab calibrate``: measure the attached TPU and write its calibration (by default the package's own
    ``<chip>.calibration.json``, which every later cost on that chip then prices with)."""
    import json
    from pathlib import Path

    result = calibrate(repeats=repeats, budget_s=budget_s)
    result["script"] = "sharding-lab calibrate (sharding_lab/cost/calibrate.py)"
    path = Path(out) if out else Path(__file__).parent / f"{result['chip']}.calibration.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"{result['device_kind']} measured in {result['seconds']:.0f} s: written to {path}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(write_calibration(*(sys.argv[1:2] or [None])))
