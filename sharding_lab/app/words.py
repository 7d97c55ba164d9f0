"""The app's words for what the backend's errors say in the command line's: an option the app has a box for is
named by that box's label (the CLI keeps its flags)."""

from __future__ import annotations

import re

import sharding_lab as sl

# The app's boxes for the command-line options the backend's errors name (the CLI keeps its flags).
LABELS = {
    "--batch-tokens": "Batch (tokens)",
    "--batch": "Batch size",
    "--chip": "Chip",
    "--steps": "Steps",
    "--target-mesh": "On a bigger mesh",
    "--target": "Compile for",
    "--mesh": "Mesh axes",
    "--lr": "Learning rate",
    "--preset": "Preset",
    "--microbatches": "Microbatches",
    "--schedule": "Schedule",
    "--optimizer": "Optimizer",
}


def app_words(text: str) -> str:
    """An error as the app says it: each command-line option the app has a box for is named by that box's
    label ('set Experts (--experts)' -> 'set Experts'; '--batch-tokens must ...' -> 'Batch (tokens) must ...')."""
    labels = {
        f.flag: f.label for fam in sl.FAMILIES.values() for f in fam.size_fields.values() if getattr(f, "flag", "")
    }
    for flag, label in sorted({**LABELS, **labels}.items(), key=lambda item: -len(item[0])):  # --batch-tokens first
        text = re.sub(rf"{re.escape(label)},? \(?{re.escape(flag)}\)?(?![\w-])", label, text)  # 'Layers (--layers)'
        text = re.sub(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", label, text)
    return text
