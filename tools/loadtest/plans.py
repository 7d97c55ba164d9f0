"""What each session of the load test does (:class:`SessionPlan`: its preset, mesh, steps and edit) and what
it recorded (:class:`SessionResult`)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ["seed", "replicated", "dp", "fsdp", "tp", "fsdp_tp"]
MESHES = [(2, 4), (4, 2), (1, 8), (8, 1), (2, 2), (4, 1), (1, 4), (2, 1)]


def preset_titles() -> dict[str, str]:
    """The preset names as the Preset combobox shows them (the app's own titles)."""
    sys.path.insert(0, str(ROOT))
    from sharding_lab.models.mlp import PRESETS as APP_PRESETS

    return {name: preset.title for name, preset in APP_PRESETS.items()}


@dataclasses.dataclass
class SessionPlan:
    index: int
    preset: str
    shape: tuple[int, int]
    axes: tuple[str, str]
    steps: int
    edit: str | None = None  # "lr" or "preset": changed while the run trains
    edit_to: str = ""  # the new learning rate (as the box shows it) or preset name

    @property
    def label(self) -> str:  # as MeshSpec.label() prints it
        return "×".join(map(str, self.shape)) + " (" + ", ".join(self.axes) + ")"

    @property
    def devices(self) -> int:
        return self.shape[0] * self.shape[1]


EDIT_LR = "0.0200"  # the Learning rate box's format (%.4f); the default is 0.0100


def session_plans(sessions: int, steps: int, own_axes: bool = False, edits: bool = True) -> list[SessionPlan]:
    """Session i: preset i mod 6, mesh i mod 8 (distinct pairs up to 24), its own steps; axis names
    ``data``/``model`` as a class leaves them (``own_axes``: ``d<i>``/``m<i>``); with ``edits``, i mod 4 = 1
    changes the learning rate and i mod 4 = 3 the preset (to the next one) while its run trains."""
    plans = []
    for i in range(sessions):
        preset = PRESETS[i % len(PRESETS)]
        edit, edit_to = {1: ("lr", EDIT_LR), 3: ("preset", PRESETS[(i + 1) % len(PRESETS)])}.get(i % 4, (None, ""))
        plans.append(
            SessionPlan(
                i,
                preset,
                MESHES[i % len(MESHES)],
                (f"d{i}", f"m{i}") if own_axes else ("data", "model"),
                steps + 10 * i,
                *((edit, edit_to) if edits else (None, "")),
            )
        )
    return plans


@dataclasses.dataclass
class SessionResult:
    plan: SessionPlan
    status: str = "not started"  # "finished" when it all went well
    busy_retries: int = 0
    first_loss_s: float | None = None  # from the first Train click
    first_loss_accepted_s: float | None = None  # from the click the server accepted
    first_loss_shown_s: float | None = None  # from the first Train click to the moment the tab's page changed to it
    finish_s: float | None = None  # from the first Train click to "layout verified"
    queued_s: float | None = None  # time in the server's queue (None: it never waited there)
    setup_s: float | None = None
    reapplied: int = 0  # sidebar edits typed again because the server never showed them
    lost_edits: list[str] = dataclasses.field(default_factory=list)
    edited_s: float | None = None  # when the mid-run edit was made (from the first Train click)
    edit_noted: bool = False  # the page said the run keeps what it started with
    edited_after: bool = False  # the run was over before a loss showed: the edit came after it
    errors: list[str] = dataclasses.field(default_factory=list)
    crosstalk: list[str] = dataclasses.field(default_factory=list)
    servers: list[str] = dataclasses.field(default_factory=list)  # every server that drew this session's page
    solved: str | None = None  # the challenge this session solved (--solve), as its page said

    @property
    def ok(self) -> bool:
        return self.status == "finished" and not self.errors and not self.crosstalk
