"""One JAX process of a multi-process run: ``python -m sharding_lab.distributed.worker``.

Run one per process — by :mod:`sharding_lab.distributed` on this machine, or by hand on each of
several machines (README, "Beyond one host"). Each joins the others with
``jax.distributed.initialize`` *before* JAX computes anything (CPU collectives over gloo, so host
devices of different processes can talk), then builds the very same :class:`~sharding_lab.Lab` as a
single process does — the mesh now spans every process's devices — and trains it with the same
trainer, except that each process loads only its own rows of every batch
(``Trainer(..., host_batches=True)``).

It speaks JSON lines on stdout (everything else JAX or gloo prints goes to stderr):
``ready`` (every process: its host and devices), ``progress`` (process 0, after every chunk:
losses, speed, the model's prediction), ``layout`` (every process: the shards it can address), then
``done`` (process 0: why it ended), or ``error``. All processes must take the same decisions at the
same chunk, so a stop request (a ``stop`` line on process 0's stdin) is broadcast from process 0
before each chunk. With ``--lifeline`` (the launcher's way) a process exits as soon as its stdin
closes, so no worker outlives the app that started it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import threading
import time
import traceback

import jax
import numpy as np

from ..errors import ConfigError
from ..sharding.layout import compare_layouts
from ..training.config import plan as make_plan
from ..training.options import add_config_options, config_from_args
from ..training.trainer import Lab, Trainer

LIFELINE_EXIT_CODE = 70
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def parse_args(argv=None) -> argparse.Namespace:
    from ..models import plugins

    argv = sys.argv[1:] if argv is None else list(argv)
    plugins.load_installed()
    plugins.import_from_argv(argv)  # a family from outside the package: the launcher passes its --family
    parser = argparse.ArgumentParser(
        prog="python -m sharding_lab.distributed.worker",
        description="One process of a multi-process Sharding Lab run (start one per process).",
    )
    parser.add_argument(
        "--coordinator",
        required=True,
        metavar="HOST:PORT",
        help="address of process 0, which runs the coordination service there",
    )
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, required=True, help="0 .. num-processes-1")
    parser.add_argument(
        "--local-devices",
        default=None,
        metavar="IDS",
        help="accelerators this process uses, e.g. 0,1 (default: every one it sees)",
    )
    parser.add_argument(
        "--init-timeout", type=int, default=120, help="seconds to wait for every process to join (default 120)"
    )
    parser.add_argument(
        "--lifeline", action="store_true", help="exit when stdin closes; a 'stop' line on stdin asks for a stop"
    )
    add_config_options(parser)
    return parser.parse_args(argv)


class Emitter:
    """JSON lines on the real stdout; file descriptor 1 itself is pointed at stderr, so whatever
    else prints (gloo's "[Gloo] Rank 0 is connected..." lines) cannot corrupt the stream."""

    def __init__(self):
        self._out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields) -> None:
        with self._lock:
            self._out.write(json.dumps({"event": event, **fields}) + "\n")
            self._out.flush()


class AgreedStop:
    """A stop flag all processes read the same way: process 0's answer, broadcast to everyone.

    The trainer asks ``is_set()`` once before each chunk, in every process, so the broadcast (a
    tiny collective) lines up; had each process read its own flag, one could stop while another
    waited for it inside the next chunk's collectives.
    """

    def __init__(self, requested: threading.Event):
        self.requested = requested

    def is_set(self) -> bool:
        from jax.experimental import multihost_utils

        mine = self.requested.is_set() if jax.process_index() == 0 else False
        return bool(multihost_utils.broadcast_one_to_all(np.int32(mine)))


def watch_stdin(requested: threading.Event) -> None:
    """A 'stop' line sets ``requested``; end of input (the launcher is gone) ends the process."""
    for line in sys.stdin:
        if line.strip() == "stop":
            requested.set()
    os._exit(LIFELINE_EXIT_CODE)


def device_table() -> list[dict]:
    """Every device of the run, in ``jax.devices()`` order (the order meshes are laid from)."""
    return [
        {"index": i, "id": d.id, "process": d.process_index, "platform": d.platform, "kind": d.device_kind}
        for i, d in enumerate(jax.devices())
    ]


def main(argv=None) -> int:
    emit = Emitter()
    args = parse_args(argv)
    requested = threading.Event()
    if args.lifeline:
        threading.Thread(target=watch_stdin, args=(requested,), name="lifeline", daemon=True).start()
    started = time.perf_counter()
    try:
        # Both must happen before JAX computes anything (its backend starts only once).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        local = [int(i) for i in args.local_devices.split(",")] if args.local_devices else None
        host = args.coordinator.rsplit(":", 1)[0]
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            local_device_ids=local,
            initialization_timeout=args.init_timeout,
            # a loopback coordinator listens on loopback only, not on every interface
            coordinator_bind_address=args.coordinator if host in LOOPBACK else None,
        )
        me = jax.process_index()
        emit(
            "ready",
            process=me,
            processes=jax.process_count(),
            host=socket.gethostname(),
            pid=os.getpid(),
            devices=device_table(),
            seconds=time.perf_counter() - started,
        )
        lab = Lab(make_plan(config_from_args(args)))
        owners = {d.process_index for d in lab.plan.mesh.devices.flat}
        if owners != set(range(jax.process_count())):
            raise ConfigError(
                f"the mesh uses devices of processes {sorted(owners)} only: every "
                f"process must own part of it — use all {jax.device_count()} devices",
                "mesh",
            )
        trainer = Trainer(lab, host_batches=True)
        for progress in trainer.chunks(AgreedStop(requested)):
            prediction = lab.predict_dataset()  # every process takes part; process 0 reports it
            if me == 0:
                emit("progress", **dataclasses.asdict(progress), prediction=prediction.tolist())
        layouts = lab.actual_layouts(lab.load_batch(0))
        mine = {d.id for d in jax.local_devices()}
        planned = {
            path: dataclasses.replace(layout, devices={d: r for d, r in layout.devices.items() if d in mine})
            for path, layout in lab.plan.layouts().items()
        }
        emit(
            "layout",
            process=me,
            problems=compare_layouts(planned, layouts),
            layouts={path: {**layout.to_json(), "itemsize": layout.itemsize} for path, layout in layouts.items()},
        )
        if me == 0:
            emit(
                "done",
                stop_reason=progress.stop_reason,
                steps=progress.step,
                elapsed=progress.elapsed,
                steps_per_s=progress.steps_per_s,
            )
        return 0
    except ConfigError as error:
        emit("error", process=args.process_id, message=str(error), config_error=True)
        _exit_now(2)
    except Exception as error:  # noqa: BLE001 — reported to the launcher, then the process ends
        traceback.print_exc()
        emit("error", process=args.process_id, message=f"{type(error).__name__}: {error}")
        _exit_now(1)


def _exit_now(code: int) -> None:
    """End without ``jax.distributed.shutdown``'s barrier, which would wait for the others."""
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
