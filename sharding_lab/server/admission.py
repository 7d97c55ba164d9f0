"""Admission before allocation: what one session may ask of the server's memory, and the server's own bound.

The server's memory has a bound (``SHARDING_LAB_SERVER_MEMORY_MB``; by default 80% of the machine's) that the
Teacher page shows its memory against; each session's share of it is ``SHARDING_LAB_SESSION_MEMORY_MB`` (by
default the bound divided by ``SHARDING_LAB_MAX_JOBS``, the runs that train at once). A run whose estimated
memory — the plan's own arithmetic, :func:`sharding_lab.training.config.estimated_bytes`, the one estimate every
refusal by memory uses — exceeds the share is refused before anything is allocated, with the figure and a fix,
and a layout whose run would be refused is not compiled ahead in the background either. One student's 70B
run cannot take what twenty students' small ones need.
"""

from __future__ import annotations

import psutil

from .. import settings
from ..errors import ConfigError
from ..units import format_bytes

SERVER_SHARE_OF_MACHINE = 0.8


def server_bound_bytes() -> int:
    """The memory this server should stay under: the setting, else 80% of the machine's."""
    return settings.SERVER_MEMORY_MB.mib_in_bytes() or int(psutil.virtual_memory().total * SERVER_SHARE_OF_MACHINE)


def session_share_bytes() -> int:
    """What one session's run may need: the setting, else the server's bound shared by the runs at once."""
    return settings.SESSION_MEMORY_MB.mib_in_bytes() or server_bound_bytes() // settings.MAX_JOBS.get()


def refusal(need: int, what: str = "this run") -> ConfigError | None:
    """Why ``what``, needing ``need`` bytes, is not admitted on this server (None when it is)."""
    share = session_share_bytes()
    if need <= share:
        return None
    return ConfigError(
        f"{what} needs about {format_bytes(need)}, more than one session's share of this class server "
        f"({format_bytes(share)} of the {format_bytes(server_bound_bytes())} it may use, so that every student's "
        f"run fits): choose a smaller model (width, layers, named size) or batch, shard the parameters (fsdp, tp), "
        "or look at it on the Layout and Communication pages, which allocate nothing. The teacher can raise "
        "SHARDING_LAB_SESSION_MEMORY_MB",
        "model",
    )


def plan_refusal(plan, what: str = "this run") -> ConfigError | None:
    """:func:`refusal` for a training run of ``plan`` (on the simulated devices; a compile-only target trains
    nothing here)."""
    from ..training.config import estimated_bytes

    if plan.config.target != "cpu":
        return None
    return refusal(estimated_bytes(plan), what)


def admit(plan, what: str = "this run") -> None:
    """Raise the refusal of :func:`plan_refusal`, if any: before anything is allocated."""
    refused = plan_refusal(plan, what)
    if refused is not None:
        raise refused


def server_rss_bytes() -> int:
    """This server's memory now, its worker processes included (a search's compile workers, the warm-up)."""
    server = psutil.Process()
    total = server.memory_info().rss
    for child in server.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:  # just ended
            pass
    return total
