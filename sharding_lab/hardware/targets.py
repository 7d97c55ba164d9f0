"""Compile targets: the machine a layout is compiled for — the simulated host, a TPU slice or a GPU node.

Every collective, memory figure and verdict the lab shows comes from a compiled program, and the
compiler that makes it matters: for the same sharded step XLA:CPU, the TPU compiler (libtpu) and
the GPU compiler (JAX's CUDA plugin) partition and schedule differently. Both accelerator compilers
install on a CPU-only machine and compile for devices that are not there:
``jax.experimental.topologies.get_topology_desc`` describes a TPU slice (its chips, with their
coordinates on the torus) or a GPU node from a target description, and ``jax.jit(...).lower(<abstract
arrays sharded over a Mesh of those devices>).compile()`` returns that compiler's program — HLO,
``cost_analysis()`` and ``memory_analysis()`` — without allocating anything (MaxText's
``train_compile.py`` does the same to catch out-of-memory configurations before renting chips).

Targets are named as the clouds name them:

- ``cpu``: this machine's simulated host devices (``SHARDING_LAB_DEVICES``); the only target that trains
  (besides accelerators JAX really sees);
- ``v5e-N`` / ``v6e-N``: N chips on a 2-D torus (8 = 2×4 … 256 = 16×16);
- ``v5p-N``: N TensorCores = N/2 chips (megacore: one JAX device per chip) on a 3-D torus;
- ``v5e-256x2`` (any TPU slice, ``x`` and 2–64): that many slices joined over the data-centre network
  (``get_topology_desc(num_slices=…)``; the devices carry ``slice_index``, :func:`slice_axis` says which mesh axis
  crosses them);
- ``h100-8`` / ``h200-8`` (and ``-16``, ``-32``…): 8 GPUs a node over NVLink, nodes over the network.

This module is the only one that knows topology names, imports libtpu's or the CUDA plugin's
machinery, or sets their environment; the mesh asks it for devices (:func:`devices`,
:func:`device_grid`), everything else passes the target's name along like the mesh.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import re
import warnings

from ..errors import ConfigError

CPU = "cpu"
TPU_FAMILIES = {"v5e": "tpu-v5e", "v5p": "tpu-v5p", "v6e": "tpu-v6e"}  # target prefix → chips.py id
GPU_FAMILIES = {"h100": "h100", "h200": "h200"}
COMPILER_NAMES = ("XLA:CPU", "XLA:TPU", "XLA:GPU")
GPU_NODE = 8  # GPUs per node (HGX/DGX H100 and H200)

# Slice shapes as Google Cloud lays them out (cloud.google.com/tpu/docs/v5e, /v6e, /v5p: "topology"
# columns); v5e/v6e: chips → x×y; v5p: chips (half the TensorCores in the name) → x×y×z.
TORUS_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)}
TORUS_3D = {
    4: (2, 2, 1),
    8: (2, 2, 2),
    16: (2, 2, 4),
    32: (2, 4, 4),
    64: (4, 4, 4),
    128: (4, 4, 8),
    256: (4, 8, 8),
    512: (8, 8, 8),
}
GPU_NODES = (1, 2, 4, 8, 16, 32)  # nodes of 8 GPUs a target may have

LIBTPU_INSTALL = "pip install 'sharding-lab[tpu]'  (libtpu to match jaxlib, Linux x86_64, ~700 MB)"
CUDA_INSTALL = "pip install 'sharding-lab[gpu]'  (JAX's CUDA plugin to match jaxlib + NVIDIA wheels, ~5 GB)"
# JAX's CUDA plugins (distribution, module, the NVIDIA wheel that holds its compiler): CUDA 12 up to JAX 0.12.0,
# CUDA 13 for JAX 0.12.1 (the registry has no CUDA 12 plugin of that version).
CUDA_PLUGINS = (
    ("jax-cuda12-plugin", "jax_plugins.xla_cuda12", "nvidia.cuda_nvcc"),
    ("jax-cuda13-plugin", "jax_plugins.xla_cuda13", "nvidia.cu13"),
)


@dataclasses.dataclass(frozen=True)
class Target:
    """A named compile target: how many devices a mesh on it has and where they sit."""

    name: str
    kind: str  # "cpu", "tpu" or "gpu"
    chip: str | None = None  # the chips.py id whose figures the cost uses
    devices: int = 0  # devices a mesh must use (0 for cpu: any number up to the simulated count)
    torus: tuple[int, ...] = ()  # TPU: one slice's physical shape; GPU: (nodes, GPUs per node)
    slices: int = 1  # TPU: slices joined by the data-centre network (``v5e-256x2``: 2)

    @property
    def compile_only(self) -> bool:
        return self.kind != CPU

    @property
    def short(self) -> str:
        """The compiler's short name, the subject of every sentence about what was compiled."""
        return dict(zip(("cpu", "tpu", "gpu"), COMPILER_NAMES))[self.kind]

    @property
    def compiler(self) -> str:
        return {"cpu": "XLA:CPU", "tpu": "the TPU compiler (libtpu)", "gpu": "the GPU compiler (XLA:GPU)"}[self.kind]

    def label(self) -> str:
        if self.kind == "tpu" and self.slices > 1:
            return (
                f"{self.name} ({self.devices} chips: {self.slices} slices of {'×'.join(map(str, self.torus))}, "
                "joined over the data-centre network)"
            )
        if self.kind == "tpu":
            chips = f"{self.devices} chip{'s' if self.devices != 1 else ''}"
            return f"{self.name} ({chips}, {'×'.join(map(str, self.torus))} torus)"
        if self.kind == "gpu":
            nodes = self.torus[0]
            return f"{self.name} ({self.devices} GPUs, {nodes} node{'s' if nodes > 1 else ''} of {GPU_NODE})"
        return "cpu (simulated host devices)"

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "chip": self.chip,
            "devices": self.devices,
            "torus": list(self.torus),
            "slices": self.slices,
            "compiler": self.compiler,
        }


CPU_TARGET = Target(CPU, CPU)  # the simulated host: what a configuration is compiled for unless told


def _names() -> list[str]:
    names = [CPU]
    for family in ("v5e", "v6e"):
        names += [f"{family}-{n}" for n in TORUS_2D]
    names += [f"v5p-{2 * n}" for n in TORUS_3D]
    for family in GPU_FAMILIES:
        names += [f"{family}-{GPU_NODE * n}" for n in GPU_NODES]
    return names


TARGET_NAMES = tuple(_names())


MAX_SLICES = 64  # slices a multi-slice target may join
_COUNT = re.compile(r"[0-9]{1,5}\Z")  # a chip or slice count: ASCII digits (str.isdigit() takes '²'), bounded


def parse(name: str | None) -> Target:
    """'v5e-8' → Target; 'v5e-256x4' → four v5e-256 slices joined over the data-centre network (what
    ``get_topology_desc(num_slices=4)`` describes); a clear ConfigError naming the choices for anything else."""
    text = (name or CPU).strip().lower()
    if len(text) > 40:  # no target's name is that long; the error quotes the start of it
        name = f"{text[:40]}…"
    if text == CPU:
        return Target(CPU, CPU)
    base, times, slices = text.partition("x")
    if times and "-" in base:
        if not _COUNT.match(slices) or not 2 <= int(slices) <= MAX_SLICES:
            raise ConfigError(
                f"unknown target {name!r}: a multi-slice target is a TPU slice, 'x' and 2 to {MAX_SLICES} slices, "
                "e.g. v5e-256x2 or v5p-1024x4",
                "target",
            )
        one = parse(base)
        if one.kind != "tpu":
            raise ConfigError(
                f"unknown target {name!r}: only TPU slices join over the data-centre network (e.g. v5e-256x2)", "target"
            )
        return dataclasses.replace(one, name=text, devices=one.devices * int(slices), slices=int(slices))
    family, _, count = text.partition("-")
    if not _COUNT.match(count) or (family not in TPU_FAMILIES and family not in GPU_FAMILIES):
        raise ConfigError(
            f"unknown target {name!r}: choose cpu, a TPU slice (v5e-8 … v5e-256, v6e-8 … v6e-256, "
            f"v5p-8 … v5p-1024) or a GPU node (h100-8, h200-8, h100-16 …)",
            "target",
        )
    n = int(count)
    if family in ("v5e", "v6e"):
        if n not in TORUS_2D:
            raise ConfigError(
                f"{family} slices have {', '.join(map(str, TORUS_2D))} chips, not {n}: e.g. {family}-8 or {family}-256",
                "target",
            )
        return Target(text, "tpu", TPU_FAMILIES[family], n, TORUS_2D[n])
    if family == "v5p":
        if n % 2 or n // 2 not in TORUS_3D:
            raise ConfigError(
                f"v5p slices are named by TensorCores (2 per chip): "
                f"{', '.join(str(2 * c) for c in TORUS_3D)}, not {n}: e.g. v5p-8 (4 chips)",
                "target",
            )
        return Target(text, "tpu", TPU_FAMILIES[family], n // 2, TORUS_3D[n // 2])
    if n % GPU_NODE or n // GPU_NODE not in GPU_NODES:
        raise ConfigError(
            f"{family} targets are whole {GPU_NODE}-GPU nodes: "
            f"{', '.join(str(GPU_NODE * k) for k in GPU_NODES)} GPUs, not {n}",
            "target",
        )
    return Target(text, "gpu", GPU_FAMILIES[family], n, (n // GPU_NODE, GPU_NODE))


OFFERED = {name: parse(name) for name in TARGET_NAMES}  # every target the sidebar offers, parsed once


# --- is its compiler here? ----------------------------------------------------------------------


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (a dotted name whose parent package is missing: no)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _cuda_plugin_usable() -> bool:
    """A CUDA plugin with its NVIDIA wheels, at jaxlib's own version: JAX ignores one of any other version
    (a RuntimeWarning, then no "cuda" platform at all)."""
    from importlib import metadata

    def numbers(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", version)[:4])

    try:
        jaxlib = numbers(metadata.version("jaxlib"))
    except metadata.PackageNotFoundError:
        return False
    for distribution, module, compiler in CUDA_PLUGINS:
        try:
            plugin = numbers(metadata.version(distribution))
        except metadata.PackageNotFoundError:
            continue
        if plugin == jaxlib and _installed(module) and _installed(compiler):
            return True
    return False


def availability(target: Target) -> tuple[bool, str]:
    """(can it be compiled for here, why not and how to fix it)."""
    if target.kind == CPU:
        return True, ""
    if target.kind == "tpu":
        if not _installed("libtpu"):
            return False, f"the TPU compiler (libtpu) is not installed: {LIBTPU_INSTALL}"
        return True, ""
    if not _cuda_plugin_usable():
        return False, f"the GPU compiler (JAX's CUDA plugin with its NVIDIA wheels) is not installed: {CUDA_INSTALL}"
    return True, ""


def check(target: Target) -> None:
    ok, why = availability(target)
    if not ok:
        raise ConfigError(f"cannot compile for {target.name}: {why}", "target")


def available_names() -> dict[str, str]:
    """Every target name → '' when it can be compiled for here, else why not."""
    reasons = {kind: availability(parse(example))[1] for kind, example in (("tpu", "v5e-8"), ("gpu", "h100-8"))}
    return {name: "" if name == CPU else reasons[parse(name).kind] for name in TARGET_NAMES}


# --- their devices --------------------------------------------------------------------------------


def quiet_libtpu() -> None:
    """libtpu reads the TPU VM's metadata at start and prints warnings and an error trace when it finds
    none; two variables (only for its sake, only where no TPU is attached) keep it quiet. And it takes a
    machine-wide lock (/tmp/libtpu_lockfile) so that one process owns the chips: with none attached there
    is nothing to own, and the app server, the CLI and the tests must all be able to compile at once."""
    if not _tpu_attached():
        os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def _tpu_attached(dev: str = "/dev") -> bool:
    """A TPU's device file: ``accel0`` (older TPU VMs) or a numbered VFIO group (v5e and newer; the group's number is
    the host's, not always 0 — a v5e chip showed up as ``vfio/1``)."""
    if os.path.exists(os.path.join(dev, "accel0")):
        return True
    vfio = os.path.join(dev, "vfio")
    return os.path.isdir(vfio) and any(name.isdigit() for name in os.listdir(vfio))


def gpu_attached() -> bool:
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")


def accelerator_attached() -> bool:
    """Whether this machine has a TPU or an NVIDIA GPU (device files; JAX is not started to find out)."""
    return _tpu_attached() or gpu_attached()


def _gpu_target_config(chip_id: str) -> str:
    """The GPU compiler's description of one GPU (a GpuTargetConfigProto in text form, the fields JAX's
    ``get_topology_desc(platform="cuda", target_config=...)`` reads): an SXM Hopper — 132 SMs, compute
    capability 9.0 — with the chip's HBM size and bandwidth from :mod:`sharding_lab.hardware.chips`."""
    from .chips import chip

    spec = chip(chip_id)
    name = {"h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200"}[chip_id]
    return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {int(spec.hbm_bytes_per_s)}
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: {int(spec.hbm_bytes)}
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {{
    major: 9
  }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{
  major: 9
  minor: 7
}}
device_description_str: "{name}"
"""


# Measured on one H200 with tools/h200_check.py (docs/measurements.md, "One real H200"): the same steps compiled for
# _gpu_target_config("h200") without the GPU and for the real GPU had identical argument sizes and
# temporaries 1-12% below the real compile's; every matmul was a Triton GEMM fusion
# (__triton_nested_gemm_fusion) in the first and a cuBLASLt call (__cublas$lt$matmul) in the second.
GPU_KERNEL_NOTE = (
    "Compiled without {chip}, so XLA:GPU cannot autotune: it writes every matmul as a Triton GEMM "
    "fusion, where on the GPU itself it calls cuBLASLt. The collectives and the memory figures are "
    "the compiler's (measured on one H200: arguments identical, temporaries 1–12% below the real "
    "compile's); the kernels are not the chip's. Source: tools/h200_check.py, README."
)


# Measured on one TPU v5e with tools/tpu_check.py (docs/measurements.md, "One real TPU v5e"): 12 steps compiled
# for the v5e-1 description and for the real chip had equal temporaries, arguments, outputs, FLOPs and bytes
# accessed; their roofline step times were 1.02-1.21x under the measured ones.
TPU_NOTE = (
    "Compiled without the chips, by the TPU compiler itself. Checked on one real TPU v5e: the same steps "
    "compiled for a chip that is not there and for the chip had equal memory figures, FLOPs and bytes, "
    "and the predicted step times were 1.02–1.21× under the measured ones (one chip: the collectives of "
    "a whole slice are the compiler's, not measured). Source: tools/tpu_check.py, README."
)


def without_chip_note(name: str) -> str | None:
    """What compiling for ``name`` without its chip changes in the program, and how far it was checked on a
    real chip (TPU and GPU targets)."""
    target = parse(name)
    if target.kind == "gpu":  # the target's own GPU named (an H100 target was once told of "a real H200")
        from .chips import chip

        return GPU_KERNEL_NOTE.format(chip=f"an {chip(target.chip).name}")
    return TPU_NOTE if target.kind == "tpu" else None


def _quiet_cache_misses() -> None:
    """JAX's persistent compilation cache (the app turns it on) stores a compile-only target's program
    like any other, then cannot load it back without the chips, and warns on every compile. The program
    is simply compiled again (about a second), so that one warning is dropped — only that one."""
    warnings.filterwarnings(
        "ignore",
        category=UserWarning,
        message=r"Error reading persistent compilation cache entry .*"
        r"PjRtCompiler must be constructed with a Client",
    )


@functools.lru_cache(maxsize=None)
def devices(name: str) -> tuple:
    """The target's JAX devices (abstract: they compile, they never run). The TPU ones carry ``.coords``
    on the slice's torus."""
    target = parse(name)
    check(target)
    _quiet_cache_misses()
    from jax.experimental import topologies

    if target.kind == "tpu":
        quiet_libtpu()
        family = target.name.split("-")[0]
        topology = {"v5e": "v5e", "v6e": "v6e", "v5p": "v5"}[family] + ":" + "x".join(map(str, target.torus))
        config = "megacore" if family == "v5p" else "default"
        # A TPU host holds up to 2×2×1 chips; a slice smaller than that (v5e-1) is one host of fewer.
        torus = tuple(target.torus) + (1,) * (3 - len(target.torus))
        per_host = tuple(min(t, h) for t, h in zip(torus, (2, 2, 1)))
        desc = topologies.get_topology_desc(
            platform="tpu",
            topology_name=topology,
            chip_config_name=config,
            chips_per_host_bounds=per_host,
            num_slices=target.slices,
        )
    else:
        nodes = target.torus[0]
        desc = topologies.get_topology_desc(
            platform="cuda", target_config=_gpu_target_config(target.chip), topology=f"1x{nodes}x{GPU_NODE}"
        )
    found = tuple(desc.devices)
    if len(found) != target.devices:
        raise ConfigError(
            f"{target.name}: the compiler described {len(found)} devices, expected {target.devices}", "target"
        )
    return found


def coords(device) -> tuple[int, ...]:
    """A device's position on its target: torus coordinates (TPU), (node, GPU in node) (GPU)."""
    if device.platform != "tpu":  # a GPU: (the node — its host process —, which GPU of the node)
        return int(device.process_index), int(device.id) % GPU_NODE
    return tuple(int(c) for c in device.coords)


def device_grid(name: str, shape: tuple[int, ...]):
    """The target's devices as a mesh of ``shape``, in a physical-topology-aware order (JAX's
    ``mesh_utils.create_device_mesh``: each mesh axis along whole torus dimensions where it can) —
    and the sentence to show when an axis had to split a physical dimension (None otherwise)."""
    import numpy as np
    from jax.experimental import mesh_utils

    target = parse(name)
    found = list(devices(name))
    if target.kind == "gpu":  # GPUs sit in nodes: the last mesh axes fill a node first (row-major ids)
        return np.array(found, dtype=object).reshape(shape), None
    if target.slices > 1:
        return _multi_slice_grid(target, shape, found)
    try:
        return mesh_utils.create_device_mesh(shape, devices=found), None
    except (NotImplementedError, ValueError, AssertionError):
        grid = mesh_utils.create_device_mesh(shape, devices=found, allow_split_physical_axes=True)
        return grid, (
            f"the mesh {'×'.join(map(str, shape))} does not line up with the "
            f"{'×'.join(map(str, target.torus))} torus: an axis splits a physical dimension, "
            "so some of its neighbours are not each other's torus neighbours"
        )


def slice_axis(target: Target, shape: tuple[int, ...]) -> int | None:
    """Which mesh axis crosses slices on a multi-slice target: the first whose size the slice count divides
    (MaxText's ``dcn_*_parallelism``: a mesh axis is an ICI part × a DCN part). Name it ``dcn`` and the presets
    split the batch over it: pure data parallelism across slices (sharding.rules.DCN_AXIS). None on one slice."""
    if target.slices <= 1:
        return None
    for i, size in enumerate(shape):
        if size % target.slices == 0:
            return i
    raise ConfigError(
        f"{target.name} joins {target.slices} slices: one mesh axis must cross them, so one axis's size must be a "
        f"multiple of {target.slices} (e.g. {target.slices}x{target.devices // target.slices} with axes dcn,data), "
        f"not {'x'.join(map(str, shape))}",
        "mesh",
    )


def _multi_slice_grid(target: Target, shape: tuple[int, ...], found: list):
    """Devices of several slices on a mesh (``mesh_utils.create_hybrid_device_mesh``): the axis :func:`slice_axis`
    names is (slices) × (its share within a slice); every other axis lies within each slice."""
    from jax.experimental import mesh_utils

    across = slice_axis(target, shape)
    dcn = tuple(target.slices if i == across else 1 for i in range(len(shape)))
    ici = tuple(size // d for size, d in zip(shape, dcn))
    try:
        return mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=found), None
    except (NotImplementedError, ValueError, AssertionError):
        grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=found, allow_split_physical_axes=True)
        return grid, (
            f"within each slice the mesh {'×'.join(map(str, ici))} does not line up with the "
            f"{'×'.join(map(str, target.torus))} torus: an axis splits a physical dimension"
        )


def check_mesh_size(target: Target, size: int) -> None:
    """On a TPU slice or GPU node every device takes part: the mesh's sizes multiply to its device count."""
    if target.kind != CPU and size != target.devices:
        what = "chips" if target.kind == "tpu" else "GPUs"
        raise ConfigError(
            f"{target.name} has {target.devices} {what}: make the mesh's sizes multiply to "
            f"{target.devices} (e.g. {target.devices} or {_two_axes(target.devices)}), not {size}",
            "mesh",
        )


def _two_axes(n: int) -> str:
    first = max(d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0)
    return f"{first}x{n // first}"
