"""Sharding Lab's backend: shard the Flax NNX seed MLP over a device mesh, look at it, train it.

Importing this package forces ``SHARDING_LAB_DEVICES`` (default 8) simulated host devices, unless
JAX already started — so import it before anything touches a JAX array. The concepts, one module
each: :mod:`~sharding_lab.hardware.devices`, :mod:`~sharding_lab.sharding.mesh`, :mod:`~sharding_lab.sharding.rules`,
:mod:`~sharding_lab.models` (model families), :mod:`~sharding_lab.training.optimizer`, :mod:`~sharding_lab.models.data`,
:mod:`~sharding_lab.sharding.layout`, :mod:`~sharding_lab.training.config` (validation and the plan) and
:mod:`~sharding_lab.training.trainer`.
"""

from .hardware import devices as _devices

_devices.apply_platform()
_devices.apply_compile_settings()
_devices.force_host_devices(_devices.requested_host_devices())

from .errors import ConfigError  # noqa: E402
from .hardware.devices import device_info  # noqa: E402
from .models import FAMILIES, family  # noqa: E402
from .models.mlp import PRESETS, MLPSpec  # noqa: E402
from .sharding.layout import ArrayLayout, actual_layout, compare_layouts, planned_layout  # noqa: E402
from .sharding.mesh import MeshSpec, build_mesh  # noqa: E402
from .sharding.rules import Rules, bind_preset  # noqa: E402
from .training.config import LabConfig, Plan, plan  # noqa: E402
from .training.optimizer import OPTIMIZERS  # noqa: E402
from .training.trainer import Lab, Progress, Trainer, TrainResult, train  # noqa: E402

__all__ = [
    "ArrayLayout",
    "ConfigError",
    "FAMILIES",
    "Lab",
    "LabConfig",
    "MeshSpec",
    "MLPSpec",
    "OPTIMIZERS",
    "PRESETS",
    "Plan",
    "Progress",
    "Rules",
    "TrainResult",
    "Trainer",
    "actual_layout",
    "bind_preset",
    "build_mesh",
    "compare_layouts",
    "device_info",
    "family",
    "plan",
    "planned_layout",
    "train",
]
