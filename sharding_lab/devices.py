"""Devices: simulate N host devices before JAX starts, or use real accelerators when present.

JAX fixes its device list when its backend starts, so the forced host-device count must be set
before the first array is made. Importing :mod:`sharding_lab` does that once, reading
``SHARDING_LAB_DEVICES`` (default 8, the seed's count).

Forcing host devices only shapes JAX's CPU backend: when JAX sees GPUs or TPUs, ``jax.devices()``
— and so every mesh — is made of those, and :func:`device_info` says which kind they are.
"""

from __future__ import annotations

import dataclasses
import os

import jax

DEVICE_COUNT_ENV = "SHARDING_LAB_DEVICES"
DEFAULT_DEVICE_COUNT = 8
MAX_DEVICE_COUNT = 64

# On GPUs a JAX process grabs 75% of each one's memory as it starts. This lab's arrays are tiny, and
# the app server, its jobs and the worker processes of a multi-process run share the same GPUs:
# allocate on demand instead (set XLA_PYTHON_CLIENT_PREALLOCATE=true to have it back).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def requested_host_devices() -> int:
    """How many host devices to simulate, from ``SHARDING_LAB_DEVICES``."""
    raw = os.environ.get(DEVICE_COUNT_ENV, str(DEFAULT_DEVICE_COUNT))
    try:
        count = int(raw)
    except ValueError:
        count = DEFAULT_DEVICE_COUNT
    return max(1, min(count, MAX_DEVICE_COUNT))


def force_host_devices(count: int) -> bool:
    """Ask JAX for ``count`` CPU devices; False when its backend already started (too late)."""
    os.environ["XLA_FLAGS"] = " ".join(
        [flag for flag in os.environ.get("XLA_FLAGS", "").split()
         if not flag.startswith("--xla_force_host_platform_device_count")]
        + [f"--xla_force_host_platform_device_count={count}"])
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    count: int
    platform: str
    kind: str
    simulated: bool

    def describe(self) -> str:
        if self.simulated:
            return (f"{self.count} simulated host devices (CPU, "
                    f"--xla_force_host_platform_device_count={self.count})")
        return f"{self.count} × {self.kind} ({self.platform}, real accelerators)"


def device_info() -> DeviceInfo:
    found = jax.devices()  # accelerators if JAX sees any, else the host devices
    platform = found[0].platform
    return DeviceInfo(count=len(found), platform=platform, kind=found[0].device_kind,
                      simulated=platform == "cpu")
