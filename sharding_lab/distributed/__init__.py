"""Several JAX processes training one mesh, as on several hosts.

:mod:`.launcher` starts and watches ``python -m sharding_lab.distributed.worker`` processes on this
machine (their configuration as command-line options: :mod:`sharding_lab.training.options`); :mod:`.worker`
is one of them, reporting in JSON lines; :mod:`.results` is what a run gives back.
"""

from .launcher import check_processes, process_choices, run
from .results import DistributedResult, WorkerFailed, process_table

__all__ = ["DistributedResult", "WorkerFailed", "check_processes", "process_choices", "process_table", "run"]
