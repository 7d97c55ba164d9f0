"""Several JAX processes training one mesh, as on several hosts.

:mod:`.launcher` starts and watches ``python -m sharding_lab.distributed.worker`` processes on this
machine; :mod:`.worker` is one of them; :mod:`.protocol` is what they say to each other (JSON lines)
and how a configuration becomes a worker's command line and back.
"""

from .launcher import DistributedResult, WorkerFailed, check_processes, process_choices, process_table, run  # noqa: F401
