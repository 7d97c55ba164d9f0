"""Warm start for a class: what a class clicks, compiled early into JAX's persistent compilation cache
(:mod:`.compile_cache`, which a restarted server loads instead of compiling again).

:func:`warm_in_background` compiles, in a background thread, the default configuration (the
seed preset on the default mesh — what every student sees first) and what a class clicks first
(:func:`first_configs`), then in a child process at the lowest CPU priority (:func:`_warm_in_child`) the rest
of the layouts a class clicks through (:func:`class_configs`: each model family's defaults × every preset ×
every mesh shape over the default device count), only while
the server is idle (no run training or waiting, no layout a learner reads waiting to be compiled, no page run
in the last few seconds: the child is paused otherwise), stoppable from the teacher view, its progress in
:func:`progress`. ``SHARDING_LAB_WARM``: ``on`` (all of it),
``default`` (the default layout only) or ``off``. ``python -m sharding_lab.server.warm`` does the same in the
foreground — the Docker image runs it at build time, so a fresh container's cache is already full — and
marks the cache it filled (:data:`MARKER`: this code, this JAX, these devices), after which a server on that
cache warms the default layout only (:func:`already_warmed`).
Both are the app's business: the CLI and the tests compile as before.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from .. import settings, worker_process
from .compile_cache import cache_dir, enable_compilation_cache


class WarmUp:
    """One server's class warm-up: its thread (once started), its progress, its stop and — in the child process —
    whether each change of the progress is said to the server (the module's functions use :data:`SERVER`'s)."""

    def __init__(self):
        self.lock = threading.Lock()  # guards thread and progress
        self.thread: threading.Thread | None = None
        self.progress: dict = {}
        self.stop = threading.Event()
        self.say = threading.Event()


SERVER = WarmUp()  # this process's; a test may put a fresh one in its place


def class_meshes(devices: int) -> list[tuple[int, ...]]:
    """Every mesh shape of 1–3 axes over exactly ``devices`` devices (the sidebar's sizes): the shapes the
    sidebar opens with first (2×4, 8, 2×2×2 for 8 devices), then the other two-axis ones, then the rest."""
    from ..sharding.mesh import DEFAULT_SHAPES

    shapes = [(devices,)]
    shapes += [(a, devices // a) for a in range(1, devices + 1) if devices % a == 0]
    shapes += [
        (a, b, devices // (a * b))
        for a in range(1, devices + 1)
        for b in range(1, devices + 1)
        if devices % (a * b) == 0
    ]
    opening = [DEFAULT_SHAPES[2], DEFAULT_SHAPES[1], DEFAULT_SHAPES[3]]  # the sidebar's 2 axes come first
    return sorted(
        set(shapes), key=lambda s: (s not in opening, opening.index(s) if s in opening else 0, len(s) != 2, len(s), s)
    )


def class_configs(devices: int | None = None) -> list:
    """What a class clicks, in the order it clicks it: for each built-in model family, its defaults (sizes,
    optimizer, learning rate, steps) under every preset on every mesh shape of the default device count
    — the configurations the sidebar offers before anyone types a size — with the default model also on
    the two-axis meshes over fewer devices (4: 1×4, 2×2, 4×1; 2: 1×2, 2×1), the transformer's last. Ones that
    cannot run are left
    out (a preset a mesh cannot bind, a batch an axis cannot split). Axis names are the sidebar's
    defaults: a program is compiled for its mesh's axis names (they are in the program JAX hands XLA),
    so a class that renames its axes compiles afresh."""
    from ..hardware.devices import requested_host_devices
    from ..models import FAMILIES

    devices = devices or requested_host_devices()
    # the default model also on two-axis meshes over fewer devices (a student who makes the mesh 2×2)
    smaller = [
        (a, d // a) for d in range(devices - 1, 1, -1) if devices % d == 0 for a in range(1, d + 1) if d % a == 0
    ]
    out = []
    # the transformer last: each of its layouts costs ~10× an MLP's to compile (its training chunk and its
    # probe: 20-40 s of CPU each on this project's 2-core machine)
    for name, shapes in (("mlp", class_meshes(devices)), ("mlp", smaller), ("transformer", class_meshes(devices))):
        for shape in shapes:
            for preset in FAMILIES[name].presets:
                config = default_config(name, shape, preset)
                if config is not None:
                    out.append(config)
    return out


def default_config(family_name: str, shape: tuple[int, ...], preset: str):
    """The family's default model and training settings on a ``shape`` mesh (the sidebar's axis names) with
    ``preset``: what a learner gets by picking that mesh and preset; None when it cannot be planned."""
    from ..errors import ConfigError
    from ..training.config import config_from_partial, plan

    config = config_from_partial({"family": family_name, "mesh.shape": tuple(shape), "preset": preset})
    try:
        plan(config)
    except ConfigError:
        return None
    return config


def warm_in_background(configs=None) -> threading.Thread | None:
    """Compile ``configs`` (default: the app's default configuration, then — with ``SHARDING_LAB_WARM=on``
    — :func:`class_configs`) in a background thread while the server is idle, once per process; the
    thread, or None if it was started before — or if this process is a worker, which never warms."""
    if worker_process.is_worker():
        return None
    with SERVER.lock:
        if SERVER.thread is not None:
            return None
        SERVER.thread = thread = _warm_thread(configs)
    return thread


def progress() -> dict:
    """The warm-up as the teacher view shows it: done, total, skipped, current, running, stopped, seconds."""
    with SERVER.lock:
        return dict(SERVER.progress)


def stop_warming() -> None:
    """Stop the background warm-up after the configuration it is compiling now."""
    SERVER.stop.set()


def _warm_thread(configs) -> threading.Thread:
    from . import background

    thread = threading.Thread(target=_warm, args=(configs,), name="sharding-lab-warm", daemon=True)
    background.track(thread, stop_warming)  # stopped and joined before the interpreter exits
    thread.start()
    return thread


def _default_configs(for_server: bool = False) -> list:
    """The default configuration, then (``SHARDING_LAB_WARM=on``) every layout a class clicks — except, for
    the server's background warm-up, when the warm command already compiled them into this cache with this
    code (:func:`already_warmed`): going through 224 layouts again in the server process, beside a class,
    loads each program into memory and takes the cores the students need (measured, 20-session load test: the
    server at 10.8 GB with the class warm-up, 1.0 GB with the default layout only). A server whose own warm-up
    went through every layout marks the cache too, so its next start warms the default only."""
    from ..training.config import LabConfig

    configs = [LabConfig()]
    if settings.WARM.raw().lower() == "default":
        return configs
    if for_server and already_warmed():
        _set_progress(note="the warm command already compiled every layout a class clicks into this cache")
        return configs
    return configs + [c for c in class_configs() if c != LabConfig()]


def first_configs() -> list:
    """What a class clicks first, the part a Docker build warms (``--first``): the default layout, then the MLP
    — the model a class starts with — under every preset on every two-axis mesh the sidebar opens with over the
    default device count and over fewer devices (2×4, 4×2, 1×8, 8×1, 2×2, 1×4, 4×1, 1×2, 2×1: the meshes a
    class reshapes first, and the 20-session load test's). The rest (three-axis meshes, the transformer) the
    server compiles in the background after it starts (:func:`warm_in_background`), beside the students."""
    from ..training.config import LabConfig

    rest = [c for c in class_configs() if c.family.name == "mlp" and len(c.mesh.shape) == 2 and c != LabConfig()]
    return [LabConfig(), *rest]


MARKER = "sharding-lab-warmed.json"  # written into the cache by the warm command once every layout is compiled


def fingerprint() -> dict:
    """What the cached programs depend on besides the layouts: JAX's version, this package's source (a change
    to a model or to the trainer changes the programs: a cache filled by older code was measured to miss 131
    programs of a 20-session class), the device count and the XLA flags: JAX's cache key hashes every flag in
    ``XLA_FLAGS`` (sorted), so a cache filled under other flags misses every program (measured: a layout's 8
    programs all compiled again when ``--xla_backend_optimization_level=0`` was added)."""
    import hashlib

    import jax

    from ..hardware.devices import requested_host_devices

    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parents[1].rglob("*.py")):
        digest.update(path.read_bytes())
    return {
        "jax": jax.__version__,
        "code": digest.hexdigest()[:16],
        "devices": requested_host_devices(),
        "xla_flags": sorted(os.environ.get("XLA_FLAGS", "").split()),
        "layouts": len(class_configs()),
    }


def already_warmed() -> bool:
    """Whether the warm command filled this cache with every class layout, for this code and JAX."""
    import json

    path = cache_dir()
    try:
        return path is not None and json.loads((path / MARKER).read_text()) == fingerprint()
    except (OSError, ValueError):
        return False


def _write_marker(path: Path) -> None:
    import json

    (path / MARKER).write_text(json.dumps(fingerprint()))


def _students_busy() -> bool:
    """Whether learners are using the server, so the class warm-up must wait (:mod:`.priority`'s rule, on this
    server's slots, precompile requests and page runs)."""
    from . import activity, precompile, priority
    from .slots import load

    running, waiting = load()
    now = priority.Load(running, waiting, precompile.pending(), activity.quiet_for())
    return not priority.may_compile(priority.CLASS_WARM_UP, now)


def _compile_when_idle(config, wait_for_students: bool) -> bool:
    """Compile ``config``'s first run; beside students only while they leave the server idle, giving way between
    the parts of a first run (a whole one took 26 s while a class set up, and the precompile request that came
    meanwhile waited for it). False: the warm-up was stopped."""
    from ..training.trainer import compile_first_run

    def keep_going() -> bool:
        return not SERVER.stop.is_set() and not (wait_for_students and _students_busy())

    while True:
        while wait_for_students and _students_busy() and not SERVER.stop.is_set():
            time.sleep(0.5)  # a student's own compile and run come first
        if SERVER.stop.is_set():
            return False
        _set_progress(current=f"{config.family.name} {config.preset} on {config.mesh.label()}")
        try:
            if compile_first_run(config, keep_going):
                return True
        except Exception:  # noqa: BLE001 - warming is a bonus; a student's own run reports its errors
            _set_progress(skipped=progress().get("skipped", 0) + 1)
            return True


CHILD = "sharding_lab.server.warm_child"  # the module the warm-up's child process runs
RELEASE_EVERY = 20  # the warm command: layouts compiled between two releases of JAX's in-memory programs


def _warm(configs, wait_for_students: bool = True, report=None, release_every: int | None = None) -> None:
    """Compile ``configs`` in turn. Beside students (``wait_for_students``) only while the server is idle
    (:func:`_students_busy`); on its own (the command, a Docker build) one after the other, letting go of what
    JAX keeps in memory every ``release_every`` layouts (:func:`_release`)."""
    started = time.perf_counter()
    _set_progress(
        done=0,
        total=len(configs) if configs else 1,
        skipped=0,
        current="the default layout",
        running=True,
        stopped=False,
        seconds=0.0,
        note="",
        child=None,  # the process compiling the class's layouts (_warm_in_child), once started
        paused=False,
    )
    # the server's own warm-up: what a class clicks first here (in memory, so its first runs start at once; an
    # MLP's layouts take a second or two each), the rest in a child process (_warm_in_child), and the cache
    # marked when they are all done, as the command does
    server = not configs and wait_for_students
    configs = configs or _default_configs(for_server=wait_for_students)
    mark = server and len(configs) > 1
    _set_progress(total=len(configs))
    # (where processes cannot be paused — not on Windows — or a layout is not one the child can rebuild: here)
    from .idle_process import AVAILABLE

    first = first_configs() if server and AVAILABLE else configs
    here = [c for c in configs if c in first or _rebuild(_describe(c)) != c]
    rest = [c for c in configs if c not in here]
    for i, config in enumerate(here):
        if not _compile_when_idle(config, wait_for_students):
            _set_progress(stopped=True)
            break
        _set_progress(done=i + 1, seconds=time.perf_counter() - started)
        if report is not None:
            report(progress())
        if release_every and (i + 1) % release_every == 0:
            _release()
    if rest and not progress().get("stopped"):
        _warm_in_child(rest, started)
    # a layout that fails to compile is skipped here as in the command (one transformer layout stops XLA's
    # SPMD partitioner): the cache holds everything that can be compiled, so it is marked all the same
    if mark and not progress().get("stopped") and cache_dir() is not None:
        _write_marker(cache_dir())
        _set_progress(
            note="every layout a class clicks is compiled into this cache: a restart warms the default layout only"
        )
    _set_progress(running=False, current="", seconds=time.perf_counter() - started)


def _warm_in_child(configs: list, started: float) -> None:
    """Compile ``configs`` into the cache in a child process at the lowest priority, paused while the students
    are busy (:func:`_students_busy`), killed with the warm-up (:mod:`.idle_process` says why). Out of the
    server's memory too (it grew to 10.8-11.7 GB going through every layout itself); the server loads such a
    layout from the disk cache when a learner opens it (:mod:`.precompile`: 0.1-0.6 s for an MLP's).
    A child over :data:`~.idle_process.MEMORY_BOUND_BYTES`, or paused for longer than
    :data:`~.idle_process.RELEASE_IDLE_S`, is ended and a fresh one goes on from where it got once the server is
    idle (what it compiled is in the disk cache; the teacher view shows the bound and the releases)."""
    from . import idle_process

    remaining = list(configs)
    while remaining:
        before, said = progress().get("done", 0), {"done": 0, "skipped": progress().get("skipped", 0)}

        def on_line(done: dict, before=before, said=said) -> None:  # the child's progress, as this process's
            said["done"] = done.get("done", 0)
            _set_progress(
                done=before + said["done"],
                skipped=said["skipped"] + done.get("skipped", 0),
                current=done.get("current", ""),
                seconds=time.perf_counter() - started,
            )

        def on_state(pid: int | None = None, paused: bool = False, released: str | None = None) -> None:
            _set_progress(paused=paused, **({"child": pid} if pid else {}))
            if released:
                _set_progress(releases=progress().get("releases", 0) + 1, released=released)

        bounds = {"memory_bound": idle_process.MEMORY_BOUND_BYTES, "release_idle_s": idle_process.RELEASE_IDLE_S}
        layouts = [_describe(c) for c in remaining]
        status = idle_process.run(CHILD, layouts, _students_busy, SERVER.stop.is_set, on_line, on_state, **bounds)
        if status != idle_process.RELEASED:
            break
        alone = said["done"] == 0 and progress().get("released", "").startswith("over")  # one layout outgrew it
        remaining = remaining[said["done"] + alone :]
        while _students_busy() and not SERVER.stop.wait(1.0):  # a fresh child once the server is idle
            pass
    if status not in (0, idle_process.RELEASED):
        _set_progress(stopped=True)


def _describe(config) -> dict:
    """A class layout in words the child can rebuild (:func:`_rebuild`): its JSON, every run setting as the
    run settings table writes it (:meth:`LabConfig.to_json`)."""
    return config.to_json()


def _rebuild(layout: dict):
    """The configuration :func:`_describe` described."""
    from ..training.config import config_from_json

    return config_from_json(layout)


def child_main() -> int:
    """The warm-up's child (``python -m sharding_lab.server.warm_child``): compile the layouts the server sent, at the
    lowest priority, saying each step of the progress as a JSON line."""
    from . import idle_process

    idle_process.lowest_priority()
    idle_process.leave_with_parent()
    configs = [_rebuild(layout) for layout in idle_process.read_message()]
    enable_compilation_cache()
    SERVER.say.set()
    _warm(configs, wait_for_students=False, release_every=RELEASE_EVERY)
    return 0


def _release() -> None:
    """Drop the compiled programs JAX keeps in memory (``jax.clear_caches``) and the trainer's own chunks
    (:func:`~sharding_lab.training.trainer.forget_chunk_programs`: their jitted functions would no longer
    match a state built after). The warm command fills the disk cache; holding what it compiled grew a
    process by ~15 MB per MLP layout (measured: 119 layouts from a full cache, 0.54 → 1.91 GB; released
    every 20, flat at 0.86 GB).

    Only between layouts of the command: the background warm-up beside students does not release, and after the
    warm command it warms the default layout only (:func:`_default_configs`). That rule was made when a Lab built
    before a release could not train with a program built after it (JAX: "different pytree metadata" in its
    out_shardings); the cause — the parameters' creation stamps in the state — is gone (``training.step.create``
    drops them), so the rule could be loosened, once measured in a server."""
    import gc

    import jax

    from ..training.trainer import forget_chunk_programs

    jax.clear_caches()
    forget_chunk_programs()
    gc.collect()


def _set_progress(**values) -> None:
    with SERVER.lock:
        SERVER.progress.update(values)
        if SERVER.say.is_set() and {"done", "current"} & values.keys():
            from .idle_process import say

            say({k: SERVER.progress.get(k) for k in ("done", "skipped", "current")})


def main(argv: list[str] | None = None) -> int:
    """``python -m sharding_lab.server.warm [--jobs N]``: compile what a class clicks into SHARDING_LAB_CACHE_DIR
    now, in N processes (default: one per core; each takes every N-th layout, all write to the one cache)."""
    import argparse
    import subprocess

    parser = argparse.ArgumentParser(prog="python -m sharding_lab.server.warm", description=main.__doc__)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes compiling at once")
    parser.add_argument(
        "--first", action="store_true", help="only what a class clicks first (first_configs); the server the rest"
    )
    parser.add_argument("--part", default=None, help=argparse.SUPPRESS)  # "i/N": this process's share
    args = parser.parse_args(argv)
    path = enable_compilation_cache()
    if path is None:
        print("SHARDING_LAB_CACHE_DIR is off: there is no cache to fill", file=sys.stderr)
        return 2
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    configs = first_configs() if args.first else _default_configs()
    # a cache holding the first layouts only is not marked: the server's warm-up then compiles the rest
    complete = not args.first and len(configs) > 1
    if args.part is None and args.jobs > 1:
        started = time.perf_counter()
        print(f"compiling {len(configs)} configurations into {path} in {args.jobs} processes", flush=True)
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "sharding_lab.server.warm", "--part", f"{i}/{args.jobs}"]
                + (["--first"] if args.first else [])
            )
            for i in range(args.jobs)
        ]
        failed = sum(w.wait() != 0 for w in workers)
        print(
            f"done: {len(configs)} configurations in {time.perf_counter() - started:.0f} s"
            + (f"; {failed} process(es) failed" if failed else ""),
            flush=True,
        )
        if not failed and complete:  # every class layout (not SHARDING_LAB_WARM=default's one, not --first)
            _write_marker(path)
        return 1 if failed else 0
    if args.part is not None:
        index, count = map(int, args.part.split("/"))
        configs = configs[index::count]
    print(f"compiling {len(configs)} configurations into {path}", flush=True)

    def report(done: dict) -> None:  # a line every 20 layouts: a Docker build's log shows it moving
        if done["done"] % 20 == 0 or done["done"] == done["total"]:
            print(f"  {args.part or ''} {done['done']}/{done['total']} in {done['seconds']:.0f} s", flush=True)

    _warm(configs, wait_for_students=False, report=report, release_every=RELEASE_EVERY)
    done = progress()
    print(
        f"done: {done['done'] - done['skipped']} compiled, {done['skipped']} skipped, {done['seconds']:.0f} s",
        flush=True,
    )
    if args.part is None and complete:  # one process did them all (with parts, the parent writes it)
        _write_marker(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
