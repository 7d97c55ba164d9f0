"""``python -m sharding_lab plan``: the layout search (:mod:`sharding_lab.search`) on the command line — its
options checked, the first ranking and a progress bar on stderr, then the table and the why (or one JSON object)."""

from __future__ import annotations

import json
import sys
import threading
import time

from ..cost.report import maxtext_line
from ..errors import ConfigError, Named
from ..export.maxtext import maxtext
from ..training.options import config_from_args, config_to_args, model_source, say_hf_config


def print_plan(args) -> int:
    """``python -m sharding_lab plan``: the search (:mod:`sharding_lab.search.search`), as a table or JSON."""
    from .. import search
    from ..cost.compiled import dtype_name

    dtype = dtype_name(args.dtype)
    config = config_from_args(args)
    say_hf_config(args, config)
    source = model_source(args)
    base = search.base_config(config.model, config.on, args.batch_tokens, config.optimizer, config.lr)
    presets, remats = _presets(args, base), _remats(args, base)
    attentions = _attentions(args, base)
    activity = search.Activity()
    reporter = _Reporter(args, Left(base, args.workers, presets, remats, attentions, args.price_every_fit))
    if args.check_layers is not None and args.check_layers <= 2:
        raise ConfigError(
            f"--check-layers must be more than 2 (the extension starts from 1 and 2), not {args.check_layers}", "model"
        )
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {args.workers}", "workers")
    if not args.json:
        print(f"searching: {reporter.left.opening()}", file=sys.stderr, flush=True)
        reporter.voice = Voice(activity)
    try:
        found = search.search(
            base,
            dtype,
            presets,
            remats,
            reporter.progress,
            check=not args.no_check,
            check_layers=args.check_layers,
            workers=args.workers,
            attentions=attentions,
            first=reporter.first,
            activity=activity,
            price_every_fit=args.price_every_fit,
        )
    finally:
        if reporter.voice is not None:
            reporter.voice.close()
    out = _with_commands(found, base, dtype, source)
    if args.json:
        print(json.dumps(out))
        return 0
    _print_found(found, out, base, dtype, source)
    return 0


def _presets(args, base) -> tuple[str, ...] | None:
    """The presets ``--presets`` names (None: every one the family offers), each checked."""
    from ..search.candidates import offered_presets

    presets = tuple(p.strip() for p in args.presets.split(",")) if args.presets else None
    for name in presets or ():
        if name not in base.family.presets:
            raise ConfigError(f"unknown preset {name!r}: choose among {', '.join(base.family.presets)}", "rules")
        if name not in offered_presets(base.family, base.model):  # every candidate would be refused
            raise ConfigError(
                (
                    f"preset {name} splits the experts, and this model's MLP is dense (",
                    Named.of(base.family.size_fields["experts"]),
                    f" 0): give it experts, or leave {name} out",
                ),
                "rules",
            )
    return presets


def _remats(args, base) -> tuple[str, ...] | None:
    """The remat choices ``--remats`` names (None: the search's own), each checked against the family's."""
    from .. import search

    remats = tuple(r.strip() for r in args.remats.split(",")) if args.remats else None
    remat_field = base.family.size_fields.get("remat")
    known = remat_field.choices if remat_field is not None else search.REMATS
    for name in remats or ():
        if name not in known:
            raise ConfigError(f"unknown remat {name!r}: choose among {', '.join(known)}", "model")
    return remats


class _Reporter:
    """What the search says on stderr while it runs (nothing with --json): the first ranking, then a progress bar
    with each candidate's answer and what is left; each answer also tells the voice that the search is alive."""

    def __init__(self, args, left: Left):
        self.args, self.left = args, left
        self.voice = None  # set once the search starts (not with --json)
        self.last = 0

    def progress(self, done, total, result) -> None:
        from .. import search

        many, self.last = done - self.last, done
        if self.voice is not None:
            self.voice.spoke()
        self.left.answered(result)
        if self.args.json:
            return
        filled = round(20 * done / total) if total else 20
        # candidates counted without a layout (a three-axis mesh): reported together, before the queue
        what = (
            f"{many} candidate{'s' * (many > 1)} without a layout to plan"
            if result.candidate.preset == "-"
            else search.label(result.candidate)
        )
        print(
            f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{total} {what}: "
            + (
                f"fits, answered at the compiler's memory check: {result.detail}"
                if result.skipped == search.SKIP_FLOOR
                else f"skipped ({result.skipped})"
                if result.skipped
                else f"{'fits' if result.fits else 'does not fit'}, compiled in {result.compile_s:.1f} s"
            )
            + f" — {self.left.sentence()}",
            file=sys.stderr,
            flush=True,
        )

    def first(self, ranked, seconds) -> None:
        from .. import search

        if self.voice is not None:
            self.voice.spoke()
        self.left.ranked = len(ranked)
        self.left.began = time.monotonic()
        if not self.args.json:
            print(search.first_table(ranked, seconds), file=sys.stderr, flush=True)
            print(self.left.sentence(), file=sys.stderr, flush=True)


def _with_commands(found, base, dtype: str, source: dict) -> dict:
    """The search's JSON, each costed row and the best with the `cost` command that re-runs it and MaxText's."""
    out = found.to_json()
    for row, result in zip(out["candidates"], found.costed):
        row["cost_args"] = config_to_args(result.candidate.config(base)) + ["--dtype", dtype]
        row.update(maxtext(result.candidate.config(base), dtype, **source).to_json())
    if out["best"] is not None:
        out["best"]["cost_args"] = config_to_args(found.best.candidate.config(base)) + ["--dtype", dtype]
        out["best"].update(maxtext(found.best.candidate.config(base), dtype, **source).to_json())
    return out


def _print_found(found, out: dict, base, dtype: str, source: dict) -> None:
    """The search's answer as text: the table, why the best is best, how the layer extension was checked, and the
    commands that re-run the best."""
    from .. import search

    print(
        f"{base.family.name} on {base.target}, batch {found.batch_tokens:,} tokens ({base.batch_size} × "
        f"{base.model.seq}), {base.optimizer}, {dtype}: {len(found.results)} candidates in {found.elapsed_s:.0f} s"
    )
    print(search.table(found))
    print()
    print(out["why"])
    check = found.extension
    if check and "relative_error" in check:
        errors = ", ".join(f"{k} {v:+.2%}" for k, v in check["relative_error"].items())
        depth = "a full" if check["full_depth"] else "a (not full-depth)"
        print(
            f"layer extension checked against {depth} {check['layers']}-layer compile of {check['candidate']}: {errors}"
            + ("; the best's figures are that compile's, as `cost` gives them" if check["full_depth"] else "")
        )
    elif check:
        print(f"layer extension not checked: the full-depth compile was refused ({check['refused']})")
    elif found.best is not None and not found.best.extended:
        print(
            f"the best was compiled at full depth ({search.depth_text(found.best, found)}), as `cost` compiles it: "
            "nothing extended"
        )
    if found.best is not None:
        print("re-run the best: python -m sharding_lab cost " + " ".join(out["best"]["cost_args"]))
        print(maxtext_line(maxtext(found.best.candidate.config(base), dtype, **source)))


def _attentions(args, base) -> tuple[str, ...] | None:
    """The attention kinds the plan searches: ``--attentions``; else the one ``--attention`` names; else both
    (:data:`sharding_lab.search.ATTENTIONS`) for a family that has the option, None (the model's own) otherwise."""
    from .. import search

    field = base.family.size_fields.get("attention")
    if args.attentions:
        kinds = tuple(a.strip() for a in args.attentions.split(","))
        known = field.choices if field is not None else ()
        for name in kinds:
            if name not in known:
                raise ConfigError(
                    f"unknown attention {name!r}: choose among {', '.join(known) or 'none (the family has none)'}",
                    "model",
                )
        return kinds
    named = vars(args).get("size_" + field.flag.lstrip("-").replace("-", "_")) if field is not None else None
    if field is None or named is not None:  # --attention X: the plan searches X alone
        return None
    return search.ATTENTIONS


SILENCE_S = 20.0  # the longest the command stays silent while it searches (a compile can take minutes)


class Voice:
    """Says on stderr what the search is doing (:class:`sharding_lab.search.Activity`) whenever it has printed
    nothing for :data:`SILENCE_S` seconds: a large model's first compiles take minutes before any progress line."""

    def __init__(self, activity, silence_s: float = SILENCE_S, out=None):
        self.activity, self.silence_s, self.out = activity, silence_s, out or sys.stderr
        self.last = time.monotonic()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="sharding-lab-plan-voice")
        self.thread.start()

    def spoke(self) -> None:
        self.last = time.monotonic()

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        while not self.done.wait(min(1.0, self.silence_s / 4)):
            if time.monotonic() - self.last < self.silence_s:
                continue
            sentence = self.activity.sentence()
            if sentence:
                print(f"  … {sentence}", file=self.out, flush=True)
                self.spoke()


class Left:
    """The time left as the command says it (:mod:`sharding_lab.search.eta`): from the model's size and the cores
    at the start, from the first ranking's layouts once it is out, from the compiles seen once they are in."""

    def __init__(self, base, workers, presets, remats, attentions=None, price_every_fit=False):
        from ..search import eta
        from ..search.search import compile_workers

        self.eta = eta
        self.parameters = base.family.parameter_count(base.model)
        self.workers = compile_workers(base, workers)
        self.floors = not price_every_fit and eta.floors(base, remats, self.workers)
        # the layouts until the first ranking says how many pass the screens
        self.ranked, self.variants = eta.question(base, presets, remats, attentions)
        self.compiled, self.compile_s = 0, 0.0
        self.checked, self.checked_s = 0, 0.0  # of them, answered at their memory check
        self.began: float | None = None  # when the compiles began (the first ranking is out)

    def answered(self, result) -> None:
        if result.compiled:
            self.compiled += 1
            self.compile_s += result.compile_s
        if result.at_memory_check:
            self.checked += 1
            self.checked_s += result.compile_s

    def opening(self) -> str:
        """Before the screens: how many layouts they look at, and that the time follows from the ones they keep (every
        layout's compiles would say hours for llama3-8b, where the screens keep 10 of 55 within seconds)."""
        return (
            f"screening {self.ranked} layouts × {self.variants} variants first (no compile); the time left follows "
            "from the layouts they keep"
        )

    def sentence(self) -> str:
        left = self.eta.Progress(
            self.parameters,
            self.eta.to_compile(None, self.ranked, 0, variants=self.variants),
            self.compiled,
            self.compile_s,
            self.workers,
            wall_s=time.monotonic() - self.began if self.began is not None else 0.0,
            floors=self.floors,
            checked=self.checked,
            checked_s=self.checked_s,
        )
        return f"about {self.eta.format_seconds_left(left.seconds_left)} of compiles left (from {left.basis})"
