"""The collectives between slices of a multi-slice TPU program, which its HLO does not write as collectives.

Compiled for several slices (``v5e-256x2``), the TPU compiler keeps each collective's part within a slice as an
ordinary ``all-reduce``/``all-gather``… over that slice's devices, and hands the part between slices to the
data-centre network's runtime as a host transfer: a ``send`` (and its ``recv``) with ``is_host_transfer=true``
and frontend attributes ``_xla_host_transfer_handler_name="xla_megascale_runtime"``,
``_xla_megascale_transfer_type="ALL_REDUCE"`` (…) and ``_xla_host_transfer_rendezvous`` naming the collective
(seen with libtpu 0.0.42.1: a 2-slice step's gradient all-reduce over its ``dcn`` axis is only such sends).
:func:`parse_megascale` reads them back as :class:`~sharding_lab.program.communication.Collective` rows over
the mesh axis that crosses slices, one per rendezvous (its ``send``), so the cost can time them over DCN.
"""

from __future__ import annotations

import dataclasses
import math
import re

from .communication import DTYPE_BYTES, Collective, computation_opened

_SEND = re.compile(r"=\s*\((?P<type>[a-z]+[0-9]*)\[(?P<dims>[0-9,]*)\][^=]*?\ssend\(")
_ATTR = re.compile(r'(_xla_[a-z_]+)="([^"]*)"')
# the runtime's transfer types → the HLO op names the lab counts in
OPS = {
    "ALL_REDUCE": "all-reduce",
    "ALL_GATHER": "all-gather",
    "REDUCE_SCATTER": "reduce-scatter",
    "ALL_TO_ALL": "all-to-all",
}


def parse_megascale(
    hlo_text: str, slice_axis: str, slices: int, runs: dict[str, int] | None = None
) -> list[Collective]:
    """Every cross-slice transfer of ``hlo_text`` as a collective over ``slice_axis`` among ``slices`` devices
    (each chip with its counterparts in the other slices); identical ones counted. The send carries what one
    device contributes: an all-reduce's result is the same size, an all-gather's ``slices`` times it, a
    reduce-scatter's 1/``slices``. Other transfer types count as point-to-point sends (collective-permute) — each
    once, or as often as the step runs its computation, given ``runs`` (as :func:`.communication.parse_collectives`)."""
    found: dict[Collective, int] = {}
    seen: set[str] = set()
    computation = None
    for line in hlo_text.splitlines():
        if runs is not None and (opened := computation_opened(line)):
            computation = opened
        if "xla_megascale_runtime" not in line:
            continue
        match = _SEND.search(line)
        if not match:
            continue
        attrs = dict(_ATTR.findall(line))
        rendezvous = attrs.get("_xla_host_transfer_rendezvous", line)
        if rendezvous in seen:
            continue
        seen.add(rendezvous)
        kind = attrs.get("_xla_megascale_transfer_type", "")
        op = OPS.get(kind, "collective-permute")
        dims = tuple(int(d) for d in match.group("dims").split(",") if d)
        sent = math.prod(dims) * DTYPE_BYTES.get(match.group("type"), 4)
        result = {"all-gather": sent * slices, "reduce-scatter": sent // max(1, slices)}.get(op, sent)
        collective = Collective(
            op=op,
            dtype=match.group("type"),
            shape=(dims,),
            bytes=result,
            axes=(slice_axis,),
            phase="unknown",
            groups=(),
            group_size=slices,
            scope="dcn",
        )
        found[collective] = found.get(collective, 0) + (1 if runs is None else runs.get(computation, 1))
    return [dataclasses.replace(c, count=n) for c, n in found.items()]


__all__ = ["OPS", "parse_megascale"]
