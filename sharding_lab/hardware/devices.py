"""Devices: simulate N host devices before JAX starts, or use real accelerators when present.

JAX fixes its device list when its backend starts, so the forced host-device count must be set
before the first array is made. Importing :mod:`sharding_lab` does that once, reading
``SHARDING_LAB_DEVICES`` (default 8, the seed's count).

Forcing host devices only shapes JAX's CPU backend: when JAX sees GPUs or TPUs (with
``pip install 'sharding-lab[gpu]'`` on an NVIDIA machine, or a TPU VM), ``jax.devices()`` is those, and the
simulated host devices stay beside them as ``jax.devices('cpu')``. ``SHARDING_LAB_PLATFORM`` picks where
meshes are built: ``cpu`` (the simulated host devices only; JAX never starts an accelerator),
``accelerator`` (the TPUs or GPUs; an error when there are none; ``gpu`` is its old name) or ``auto`` (the
default: the accelerators when the mesh fits on them, else the
host devices — so a one-GPU machine still explores 8-device layouts and trains a 1-device mesh on its
GPU). :func:`devices_for` is the one place meshes take their devices from.
"""

from __future__ import annotations

import dataclasses
import os

import jax

from .. import settings
from ..errors import ConfigError

DEVICE_COUNT_ENV = settings.DEVICES.name
DEFAULT_DEVICE_COUNT = int(settings.DEVICES.default)
MAX_DEVICE_COUNT = 64
PLATFORM_ENV = settings.PLATFORM.name
PLATFORMS = ("auto", "cpu", "accelerator")
ALIASES = {"gpu": "accelerator", "tpu": "accelerator"}  # the old name, and the one a TPU user reaches for

# On GPUs a JAX process grabs 75% of each one's memory as it starts. This lab's arrays are tiny, and
# the app server, its jobs and the worker processes of a multi-process run share the same GPUs:
# allocate on demand instead (set XLA_PYTHON_CLIENT_PREALLOCATE=true to have it back).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def requested_host_devices() -> int:
    """How many host devices to simulate, from ``SHARDING_LAB_DEVICES``."""
    return max(1, min(settings.DEVICES.get(), MAX_DEVICE_COUNT))


def force_host_devices(count: int) -> bool:
    """Ask JAX for ``count`` CPU devices; False when its backend already started (too late)."""
    os.environ["XLA_FLAGS"] = " ".join(
        [
            flag
            for flag in os.environ.get("XLA_FLAGS", "").split()
            if not flag.startswith("--xla_force_host_platform_device_count")
        ]
        + [f"--xla_force_host_platform_device_count={count}"]
    )
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        return False
    return True


# XLA:CPU settings that compile this lab's programs faster and give the same numbers, bit for bit (checked
# by tests/core/test_compile_settings.py against XLA's defaults; measured with tools/compile_bench.py). Profiling
# (perf) put a small training chunk's compile in the MLIR fusion emitters and LLVM's optimisation passes, not
# in the HLO passes. LLVM at -O1 without its expensive passes emits the same arithmetic. Left out because they
# change the numbers: level 0 (the last bits of the MLP's losses: no FMA contraction), the older emitters
# (``--xla_cpu_use_fusion_emitters=false``, 1.8x faster on the MLP but a tensor-parallel transformer's losses
# moved by 5e-7 from step 2) and ``--xla_cpu_max_isa=AVX2`` (the same transformer's losses).
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=1", "--xla_llvm_disable_expensive_passes=true")


def apply_compile_settings() -> list[str]:
    """Add :data:`FAST_COMPILE_FLAGS` to ``XLA_FLAGS`` (``SHARDING_LAB_FAST_COMPILE``, on by default) — each
    unless ``XLA_FLAGS`` already sets that flag, so a user's (or the test suite's) own choice wins. Must run
    before JAX's backend starts: XLA reads ``XLA_FLAGS`` once per process, for every program it compiles — the
    forced host-device count rides in the same variable. The flags added (empty when off or all set)."""
    if not settings.FAST_COMPILE.get():
        return []
    present = {flag.split("=", 1)[0] for flag in os.environ.get("XLA_FLAGS", "").split()}
    added = [flag for flag in FAST_COMPILE_FLAGS if flag.split("=", 1)[0] not in present]
    if added:
        os.environ["XLA_FLAGS"] = " ".join([*os.environ.get("XLA_FLAGS", "").split(), *added])
    return added


def requested_platform() -> str:
    """``SHARDING_LAB_PLATFORM`` (cpu, accelerator or auto; gpu and tpu mean accelerator; anything else
    counts as auto)."""
    value = settings.PLATFORM.raw().lower()
    value = ALIASES.get(value, value)
    return value if value in PLATFORMS else "auto"


def apply_platform() -> bool:
    """With ``cpu`` — or ``auto`` on a machine with no TPU or NVIDIA GPU attached — keep JAX off any
    accelerator (``jax_platforms``); must run before JAX starts. False when the backend already started.

    Why ``auto`` needs it too: the TPU and GPU compilers installed for compile targets
    (:mod:`sharding_lab.hardware.targets`) would otherwise try to start hardware that is not there — libtpu
    prints an error trace, the CUDA plugin fails at ``cuInit``. Compiling for them needs no backend."""
    from .targets import accelerator_attached

    platform = requested_platform()
    if platform == "accelerator" or (platform == "auto" and accelerator_attached()):
        return True
    try:
        jax.config.update("jax_platforms", "cpu")
    except RuntimeError:
        return False
    return True


def _accelerators() -> list:
    return [d for d in jax.devices() if d.platform != "cpu"]


def _host() -> list:
    return jax.devices("cpu")


def devices_for(size: int | None = None) -> list:
    """The devices a mesh of ``size`` devices is laid on, as ``SHARDING_LAB_PLATFORM`` says."""
    platform = requested_platform()
    if platform == "cpu":
        return _host()
    accelerators = _accelerators()
    if platform == "accelerator":
        if not accelerators:
            raise ConfigError(
                f"{PLATFORM_ENV}=accelerator but JAX sees no TPU or GPU: run on a TPU VM (libtpu: "
                f"pip install 'sharding-lab[tpu]') or a machine with an NVIDIA GPU (pip install "
                f"'sharding-lab[gpu]'), or use {PLATFORM_ENV}=auto or cpu",
                "devices",
            )
        return accelerators
    if accelerators and (size is None or size <= len(accelerators)):
        return accelerators
    return _host()


def available_count() -> int:
    """The largest mesh that can be built here."""
    platform = requested_platform()
    if platform == "cpu":
        return len(_host())
    if platform == "accelerator":
        return len(devices_for())
    return max(len(_accelerators()), len(_host()))


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    count: int
    platform: str
    kind: str
    simulated: bool
    host_count: int = 0  # simulated host devices beside the accelerators (0 when simulated is True)

    def describe(self) -> str:
        if self.simulated:
            return f"{self.count} simulated host devices (CPU, --xla_force_host_platform_device_count={self.count})"
        beside = f"; {self.host_count} simulated host devices beside them for larger meshes" if self.host_count else ""
        return f"{self.count} × {self.kind} ({self.platform}, real accelerators){beside}"


def device_info() -> DeviceInfo:
    """What meshes are built from (``SHARDING_LAB_PLATFORM``): the accelerators when there are any
    and the platform allows them, else the simulated host devices."""
    found = devices_for() if requested_platform() != "auto" else (_accelerators() or _host())
    platform = found[0].platform
    simulated = platform == "cpu"
    return DeviceInfo(
        count=len(found),
        platform=platform,
        kind=found[0].device_kind,
        simulated=simulated,
        host_count=0 if simulated or requested_platform() == "accelerator" else len(_host()),
    )
