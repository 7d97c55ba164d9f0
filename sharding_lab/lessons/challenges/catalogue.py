"""The challenges: each with its goal in one sentence, hints from gentle to nearly the answer, a solution (a
partial configuration: the settings it changes by name, so the CLI and the app both apply it) and its check
(:mod:`.checks`); results cached by configuration, so twenty students on one layout compile it once.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import threading
from typing import Callable

from ...errors import ConfigError
from ...models import FAMILIES
from ...training.config import LabConfig, Plan, config_from_partial
from . import checks
from .checks import canonical

LEVELS = {1: "easy", 2: "medium", 3: "hard"}
CHECKED_ON = {
    "plan": "the plan (where every array lives; nothing compiled)",
    "compiled": "the compiled train step (its collectives, as on the Communication page)",
    "cost": "the roofline cost model (the compiled step on a real chip's figures)",
    "schedule": "the pipeline schedule the pipelined step runs (its table of ticks, as on the Train page)",
}


@dataclasses.dataclass(frozen=True)
class Challenge:
    id: str
    title: str
    goal: str  # one sentence
    level: int  # 1 easy, 2 medium, 3 hard
    hints: tuple[str, ...]  # progressively stronger, the last one nearly the answer
    checked_on: str  # a key of CHECKED_ON
    solution: dict  # a partial configuration that solves it, settings by name: {"mesh.shape": (2, 4), "preset": "dp"}
    run: Callable[[Plan], tuple[bool, str]] = dataclasses.field(repr=False, compare=False)

    @property
    def level_name(self) -> str:
        return LEVELS[self.level]

    def check(self, plan: Plan) -> tuple[bool, str]:
        """(solved, why) for ``plan``; cached by configuration (compiled checks compile once)."""
        key = (self.id, canonical(plan.config))
        with _lock:
            if key in _results:
                _results.move_to_end(key)
                return _results[key]
        result = self.run(plan)
        with _lock:
            _results[key] = result
            while len(_results) > _MAX_CACHED:
                _results.popitem(last=False)
        return result

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "goal": self.goal}


_MAX_CACHED = 512
_lock = threading.Lock()
_results: collections.OrderedDict = collections.OrderedDict()


# --- the catalogue -----------------------------------------------------------------------------

_LIST = [
    Challenge(
        "eighth",
        "An eighth each",
        "Make every device hold exactly 1/8 of w1.",
        1,
        (
            "Look at w1 on the Layout page: into how many pieces is it cut now, and along which mesh axis?",
            "On a 2×4 mesh one axis splits 2 or 4 ways; to cut w1 into 8 pieces its hidden units must be "
            "split over both axes at once.",
            "The preset FSDP + tensor parallel maps `mlp` to model+data: 4 × 2 = 8 pieces.",
        ),
        "plan",
        {"mesh.shape": (2, 4), "preset": "fsdp_tp"},
        checks.eighth,
    ),
    Challenge(
        "quiet-forward",
        "A quiet forward pass",
        "Split the batch so that the compiled forward pass runs no collective at all.",
        1,
        (
            "The Communication page lists each collective with its phase: which ones are 'forward' now?",
            "A forward collective is needed when a device lacks a piece of a weight or of an activation "
            "it multiplies with: keep every weight whole on every device.",
            "Data parallel: the batch split on `data`, every parameter replicated.",
        ),
        "compiled",
        {"mesh.shape": (2, 4), "preset": "dp"},
        checks.quiet_forward,
    ),
    Challenge(
        "no-fallback",
        "No silent fallback",
        "Keep the seed's rules, but make w2 split over the `model` axis without JAX silently falling back.",
        2,
        (
            "The Layout page warns that JAX silently lays w2 out differently from what the rules ask: read why.",
            "w2 is 32×1 and the seed's rules split its second dimension (1 column) 4 ways; its rows, the hidden "
            "units, would divide.",
            "A per-parameter override for w2: rows on `model`, columns replicated (w2=model:none).",
        ),
        "plan",
        {"mesh.shape": (2, 4), "preset": "seed", "overrides": {"w2": ("model", None)}},
        checks.no_fallback,
    ),
    Challenge(
        "explicit",
        "Explicit about it",
        "With Explicit axes, plan a layout in which both w1 and w2 are split over the `model` axis.",
        2,
        (
            "Switch the axis type to Explicit with the seed's rules: JAX now refuses what it silently changed "
            "under Auto.",
            "Under Explicit axes every split must divide its dimension: w2's single column cannot be cut 4 ways, "
            "its 32 rows can.",
            "Tensor parallel splits w1 by columns and w2 by rows on `model`; set Explicit axes with it.",
        ),
        "plan",
        {"mesh.shape": (2, 4), "mesh.axis_type": "explicit", "preset": "tp"},
        checks.explicit,
    ),
    Challenge(
        "halve-dp",
        "Half the memory, no more traffic",
        "Halve the per-device memory of data parallelism while sending no more bytes per step than it does.",
        2,
        (
            "Compare presets on the Compare page: bytes per device held, and bytes sent per step.",
            "Sharding parameters saves memory, but the step may then have to move weights or activations: "
            "find a layout whose collectives are smaller than DP's gradient all-reduce.",
            "Tensor parallel on 2×4: the weights split 4 ways, and one small all-reduce of activations.",
        ),
        "compiled",
        {"mesh.shape": (2, 4), "preset": "tp"},
        checks.halve_dp,
    ),
    Challenge(
        "no-activation-allreduce",
        "Weights travel, activations stay",
        "Split both the batch and w1 across devices without any all-reduce of activations.",
        2,
        (
            "Which collectives carry activations now? The Communication page says what each one carries.",
            "Splitting w1's hidden units on one axis and the batch on another makes the second matmul sum "
            "partial results across devices: an all-reduce of activations.",
            "Put the batch and the weights on the same axis of a 1-D mesh of 8: FSDP gathers the weights instead.",
        ),
        "compiled",
        {"mesh.shape": (8,), "preset": "fsdp"},
        checks.no_activation_allreduce,
    ),
    Challenge(
        "gather-activations",
        "XLA knows better",
        "Find an FSDP layout whose compiled step all-gathers activations where FSDP's textbook gathers weights.",
        3,
        (
            "FSDP on the Communication page: 'textbook vs compiled' says what XLA did instead of the textbook.",
            "XLA moves whichever is smaller: make the weights much bigger than a batch's activations.",
            "FSDP on a 1-D mesh of 8 with input, width and output all 1024, batch 32.",
        ),
        "compiled",
        {"mesh.shape": (8,), "preset": "fsdp", "model": {"din": 1024, "dmid": 1024, "dout": 1024}, "batch_size": 32},
        checks.gather_activations,
    ),
    Challenge(
        "compute-bound",
        "Compute-bound",
        "Make a layout on 8 or more devices that the cost model predicts to be compute-bound on an H100 (with a "
        "TPU or GPU target: on its own chips).",
        3,
        (
            "The cost panel (Communication page) splits a step into compute, HBM traffic and communication.",
            "Compute grows with rows × parameters per device, HBM traffic and gradient traffic with the "
            "parameters: more rows per device and wider layers raise compute fastest.",
            "Data parallel on 2×4 with input, width and output 4096 and batch 4096.",
        ),
        "cost",
        {"mesh.shape": (2, 4), "preset": "dp", "model": {"din": 4096, "dmid": 4096, "dout": 4096}, "batch_size": 4096},
        checks.compute_bound,
    ),
]

if "transformer" in FAMILIES:  # the transformer family may not be installed in this checkout
    _LIST += [
        Challenge(
            "megatron-sublayers",
            "Megatron, by the book",
            "Shard the transformer so that each block's forward pass all-reduces over `model` exactly once per "
            "sublayer.",
            3,
            (
                "Pick the transformer model and look at the Communication page's forward collectives over `model`.",
                "Megatron splits q/k/v and mlp_in by their outputs and o and mlp_out by their inputs: each "
                "sublayer then ends in one all-reduce of partial sums. Data parallelism runs none over `model`; "
                "sequence parallelism adds gathers.",
                "The transformer's tensor-parallel (Megatron) preset on 2×4.",
            ),
            "compiled",
            {"family": "transformer", "mesh.shape": (2, 4), "preset": "tp"},
            checks.megatron_sublayers,
        ),
        Challenge(
            "small-bubble",
            "A pipeline with a small bubble",
            "Pipeline the transformer over at least 4 stages with under 20% of the stage-ticks idle and no stage "
            "holding more than 4 microbatches at once.",
            3,
            (
                "Pick the transformer and the pipeline preset; the Train page draws its schedule and counts "
                "the bubble.",
                "The bubble is (p−1)/(m+p−1): more microbatches shrink it. But under GPipe a stage keeps every "
                "microbatch's input until the backwards begin.",
                "4 stages (a 4×2 mesh with axes stage, data, and layers a multiple of 4), 16 microbatches, 1F1B.",
            ),
            "schedule",
            {
                "family": "transformer",
                "mesh.shape": (4, 2),
                "mesh.axes": ("stage", "data"),
                "preset": "pp",
                "model": {"layers": 4},
                "microbatches": 16,
                "schedule": "1f1b",
            },
            checks.small_bubble,
        ),
        Challenge(
            "token-exchange",
            "Send the tokens to their experts",
            "Give the transformer a mixture of experts with at most 2 experts per device, and shard it so that the "
            "compiled forward pass sends tokens to their experts and back by all-to-all over 4 or more devices.",
            3,
            (
                "Set Experts above 0 (the transformer's sizes), then look at the Communication page's all-to-alls.",
                "The experts must be split over a mesh axis (the logical axis expert). But if every device along that "
                "axis already holds the same tokens, none needs to travel: the batch must be split over that axis too.",
                "8 experts and the ep preset on a 2×4 mesh with axes data, expert.",
            ),
            "compiled",
            {
                "family": "transformer",
                "mesh.shape": (2, 4),
                "mesh.axes": ("data", "expert"),
                "preset": "ep",
                "model": {"experts": 8},
            },
            checks.token_exchange,
        ),
    ]


CHALLENGES: dict[str, Challenge] = {c.id: c for c in _LIST}


def get(challenge_id: str) -> Challenge:
    """The challenge ``challenge_id``; ConfigError naming the known ones otherwise."""
    if challenge_id not in CHALLENGES:
        raise ConfigError(f"unknown challenge {challenge_id!r}: choose one of {', '.join(CHALLENGES)}", "challenge")
    return CHALLENGES[challenge_id]


def config_from_argv(argv) -> LabConfig:
    """Config options (as on the command line) → LabConfig, through the CLI's own parser."""
    from ...training.options import add_config_options, config_from_args

    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_config_options(parser)
    try:
        args = parser.parse_args(list(argv))
    except (argparse.ArgumentError, SystemExit) as error:  # exit_on_error does not cover every error
        raise ConfigError(f"bad options {' '.join(argv)!r}: {error}", "challenge") from None
    return config_from_args(args)


def solution_config(challenge: Challenge) -> LabConfig:
    """The challenge's solution (a partial configuration) over the defaults of its model family."""
    return config_from_partial(challenge.solution)


def solution_args(challenge: Challenge) -> list[str]:
    """The solution as command-line options (``sharding-lab challenge solution``, the app's note)."""
    from ...training.options import partial_to_args

    return partial_to_args(challenge.solution)


def check(challenge_id: str, plan: Plan) -> tuple[bool, str]:
    return get(challenge_id).check(plan)
