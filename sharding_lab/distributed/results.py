"""What a multi-process run gives back, and why it failed: each process's report merged into one layout per
array over the whole mesh, and one row per process of what it owns and addresses.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..sharding.layout import ArrayLayout
from ..training.trainer import TrainResult


class WorkerFailed(RuntimeError):
    """A multi-process run could not finish: a worker died, hung, or never started."""


@dataclasses.dataclass
class DistributedResult(TrainResult):
    """A one-process :class:`TrainResult` (elapsed: process 0's chunks), plus who owned what."""

    processes: int
    layouts: dict[str, ArrayLayout]  # gathered from every process; devices by mesh position
    owners: dict[int, int]  # device → the process that owns (and alone addresses) it
    jax_ids: dict[int, int]  # device → JAX's own id for it
    hosts: dict[int, str]  # process → host name
    kinds: dict[int, str]  # device → device kind ("cpu", "NVIDIA H100 80GB HBM3", ...)
    problems: list[str]  # gathered layout vs the one-process plan (empty: the same)
    startup_s: float  # launch → every process joined
    prediction: np.ndarray | None = None

    def addressable(self) -> dict[int, list[int]]:
        """process → the devices whose shards it can address (its own)."""
        table: dict[int, list[int]] = {}
        for device, process in sorted(self.owners.items()):
            table.setdefault(process, []).append(device)
        return table


def _spec(items) -> tuple:
    return tuple(tuple(t) if isinstance(t, list) else t for t in items)


def merge_layouts(reports: dict[int, dict], index_of: dict[int, int]) -> dict[str, ArrayLayout]:
    """Each process's ``layout`` report → one layout per array over all devices, devices renamed
    from JAX ids to mesh positions with ``index_of``."""
    merged: dict[str, ArrayLayout] = {}
    for process in sorted(reports):
        for path, item in reports[process].items():
            devices = {index_of[int(d)]: tuple(tuple(r) for r in ranges) for d, ranges in item["devices"].items()}
            if path not in merged:
                merged[path] = ArrayLayout(
                    path,
                    tuple(item["shape"]),
                    item.get("itemsize", 4),
                    _spec(item["requested_spec"]),
                    _spec(item["spec"]),
                    devices,
                )
            else:
                old = merged[path]
                if old.shape != tuple(item["shape"]) or old.spec != _spec(item["spec"]):
                    raise WorkerFailed(
                        f"{path}: process {process} reports shape {item['shape']} "
                        f"spec {item['spec']}, another {old.shape} {old.spec}"
                    )
                merged[path] = dataclasses.replace(old, devices={**old.devices, **devices})
    return {
        path: dataclasses.replace(layout, devices=dict(sorted(layout.devices.items())))
        for path, layout in merged.items()
    }


def process_table(
    owners: dict[int, int],
    jax_ids: dict[int, int],
    hosts: dict[int, str],
    layouts: dict[str, ArrayLayout],
    kinds: dict[int, str] | None = None,
) -> list[dict]:
    """One row per process: its host, the devices it owns (mesh positions and JAX ids), and the
    shards it can address — those on its own devices, no others."""
    rows = []
    for process in sorted(set(owners.values())):
        devices = sorted(d for d, p in owners.items() if p == process)
        shards = [(path, d) for path, layout in layouts.items() for d in layout.devices if d in devices]
        rows.append(
            {
                "process": process,
                "host": hosts.get(process, "?"),
                "devices": ", ".join(map(str, devices)),
                "kind": ", ".join(sorted({(kinds or {}).get(d, "?") for d in devices})),
                "JAX device ids": ", ".join(str(jax_ids.get(d, d)) for d in devices),
                "addressable shards": len(shards),
                "bytes it holds": sum(layouts[path].bytes_per_device for path, _ in shards),
            }
        )
    return rows
