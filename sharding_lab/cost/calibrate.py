"""Measuring a TPU chip for the calibrated step model (``sharding-lab calibrate``): what the chip's matrix unit
reaches for a grid of matmul shapes and dtypes, what the splash attention kernel reaches per sequence length and
block size, and the HBM bandwidth an elementwise pass gets. Run on a machine whose TPU is attached; the answer is
the JSON the lab ships as ``sharding_lab/cost/calibrations/<chip>.json`` (:mod:`.calibration` reads it).

Every rate is wall clock over whole calls (the median of ``repeats`` calls after a warm-up, blocking on each):
a matmul's rate includes reading its operands from HBM and writing its result, so a skinny product that waits on
memory shows a low rate — which is what the step's own product of that shape will see.
"""

from __future__ import annotations

import datetime
import math
import platform
import statistics
import time

# The grid: rows (tokens per device), contraction and output widths as a transformer's steps have them.
MATMUL_ROWS = (512, 2048, 8192, 32768)
MATMUL_WIDTHS = (128, 512, 2048, 8192, 32768)
MATMUL_MAX_FLOPS = 2.0**42  # ~4.4e12 FLOPs: ~25 ms a call at the bf16 peak
MATMUL_MAX_BYTES = 2.0**31  # no operand or result over 2 GiB
SPLASH_SEQS = (1024, 2048, 4096, 8192)
SPLASH_BLOCKS = (128, 256, 512)
SPLASH_HEADS, SPLASH_HEAD_DIM = 8, 128
HBM_ELEMENTS = 2**28  # 1 GiB of f32 read and 1 GiB written


def _median_s(fn, *args, repeats: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
    precision, as the lab compiles); shapes left when ``budget_s`` runs out are skipped."""
    import jax
    import jax.numpy as jnp

    started = time.perf_counter()
    out: dict[str, list] = {}
    for name in dtypes:
        dtype = {"bf16": jnp.bfloat16, "f32": jnp.float32}[name]
        rows = out.setdefault(name, [])
        dot = jax.jit(jnp.dot)
        for m, k, n in matmul_shapes():
            if time.perf_counter() - started > budget_s * (1 + dtypes.index(name)) / len(dtypes):
                break
            a = jax.random.normal(jax.random.key(0), (m, k), jnp.float32).astype(dtype)
            b = jax.random.normal(jax.random.key(1), (k, n), jnp.float32).astype(dtype)
            seconds = _median_s(dot, a, b, repeats=repeats)
            rows.append([m, k, n, 2.0 * m * k * n / seconds])
            del a, b
    return out


def splash_flops(seq: int, block: int, heads: int, head_dim: int) -> dict:
    """The kernel's FLOPs per call kind for one sequence (:func:`sharding_lab.models.attention.kernel_figures`'
    formula: per visited block pair, 2 / 3 / 4 products of 2·block²·head_dim)."""
    from ..models.attention import SPLASH_MATMULS, causal_blocks

    pairs = causal_blocks(seq, block, block) * heads
    return {kind: n * 2.0 * block * block * head_dim * pairs for kind, n in SPLASH_MATMULS.items()}


def measure_splash(repeats: int = 5, batch: int = 2) -> list[dict]:
    """The splash kernel (causal, bf16, ``SPLASH_HEADS`` heads of ``SPLASH_HEAD_DIM``, ``batch`` sequences) per
    sequence length and block size: forward alone, and forward + backward (jax.grad), as FLOP/s of its formula."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    rows = []
    for seq in SPLASH_SEQS:
        for block in SPLASH_BLOCKS:
            if block > seq:
                continue
            mask = splash.MultiHeadMask([splash.CausalMask((seq, seq)) for _ in range(SPLASH_HEADS)])
            kernel = jax.vmap(
                splash.make_splash_mha(
                    mask, block_sizes=splash.BlockSizes(*(block,) * 8), head_shards=1, q_seq_shards=1
                )
            )
            shape = (batch, SPLASH_HEADS, seq, SPLASH_HEAD_DIM)
            q, k, v = (jax.random.normal(jax.random.key(i), shape, jnp.float32).astype(jnp.bfloat16) for i in range(3))
            forward = jax.jit(kernel)
            both = jax.jit(jax.grad(lambda q, k, v, f=kernel: f(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2)))
            t_fwd = _median_s(forward, q, k, v, repeats=repeats)
            t_all = _median_s(both, q, k, v, repeats=repeats)
            flops = {k: batch * f for k, f in splash_flops(seq, block, SPLASH_HEADS, SPLASH_HEAD_DIM).items()}
            backward = flops["dq"] + flops["dkv"]
            rows.append(
                {
                    "seq": seq,
                    "block": block,
                    "heads": SPLASH_HEADS,
                    "head_dim": SPLASH_HEAD_DIM,
                    "batch": batch,
                    "forward_s": t_fwd,
                    "forward_backward_s": t_all,
                    "forward_flops_per_s": flops["fwd"] / t_fwd,
                    "backward_flops_per_s": backward / max(t_all - t_fwd, 1e-9),
                    "flops_per_s": (flops["fwd"] + backward) / t_all,
                }
            )
    return rows


def measure_hbm(repeats: int = 5) -> dict:
    """Bytes per second of an elementwise pass (read once, write once) over 1 GiB of f32 and of bf16."""
    import jax
    import jax.numpy as jnp

    out = {}
    for name, dtype in (("f32", jnp.float32), ("bf16", jnp.bfloat16)):
        x = jnp.ones((HBM_ELEMENTS,), dtype)
        seconds = _median_s(jax.jit(lambda x: x * 1.5 + 1), x, repeats=repeats)
        out[name] = 2.0 * x.size * x.dtype.itemsize / seconds
        del x
    return {"bytes_per_s": max(out.values()), "by_dtype": out}


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
        "method": "wall clock, median of repeats after a warm-up, blocking on each call (sharding_lab.cost.calibrate)",
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
