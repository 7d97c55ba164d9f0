"""Challenges: goals checked against the configuration in the sidebar — by its plan, its compiled
step or the cost model (:mod:`sharding_lab.lessons.challenges`). Hints one at a time, a solution that
fills in the sidebar, progress kept in the session and carried by the share link, and each newly
solved challenge counted (anonymously) for the teacher view."""

import dataclasses
import shlex

import streamlit as st

import sharding_lab as sl
from sharding_lab.app import messages, ui
from sharding_lab.app.state import config_state
from sharding_lab.lessons import challenges
from sharding_lab.server import classroom

st.title("Challenges")
st.caption(
    "Each goal is checked against the configuration in the sidebar: change the mesh, the preset or the "
    "rules, the model or the batch, then press **Check**. The verdict comes from what was planned, "
    "compiled or predicted for that configuration, and says why."
)

state = st.session_state
state.setdefault("solved", [])
state.setdefault("challenge_hints", {})
state.setdefault("challenge_results", {})


def _more_hint(challenge_id: str) -> None:
    shown = state.challenge_hints.get(challenge_id, 0)
    state.challenge_hints[challenge_id] = min(shown + 1, len(challenges.get(challenge_id).hints))


def _ask_check(challenge_id: str) -> None:
    # Checked below, once the sidebar has planned the current configuration.
    state.challenge_pending = challenge_id


def _apply_solution(challenge_id: str) -> None:
    """The solution (a partial configuration) → LabConfig → the sidebar's keys (in a callback: before
    the widgets are drawn, so they show the new values). A learner compiling for a TPU slice or GPU node
    keeps it when the solution holds there too (checked on that compiler's program); where it does not, the
    sidebar goes back to the simulated host, where it does, and says why — the compiler decides."""
    challenge = challenges.get(challenge_id)
    target = state.get("target", sl.hardware.targets.CPU)
    note = ""
    try:
        config = challenges.solution_config(challenge)
        if target != config.target:
            on_target = dataclasses.replace(config, target=target)
            try:
                holds, why = challenge.check(sl.plan(on_target))
            except sl.ConfigError as error:
                holds, why = False, messages.plain(error)  # the checks' own sentences are Markdown, as shown below
            if holds:
                config = on_target
            else:
                note = f" The sidebar is on the simulated host, where it holds. On {target} it does not: {why}"
        updates = config_state.state_from_config(config)
    except sl.ConfigError as error:
        state.challenge_applied = (challenge_id, f"This solution cannot be applied here: {error}")
        return
    state.update(updates)
    state.challenge_results.pop(challenge_id, None)  # a verdict on the configuration before is not this one's
    state.challenge_applied = (
        challenge_id,
        "The sidebar now holds a configuration that solves it "
        f"(`{shlex.join(challenges.solution_args(challenge))}`): press **Check**." + note,
    )


result = ui.sidebar()
plan = result if isinstance(result, sl.Plan) else None
if plan is None:
    messages.show_error(result, lead="The configuration in the sidebar cannot be planned, so nothing can be checked:")

pending = state.pop("challenge_pending", None)
if pending in challenges.CHALLENGES and plan is not None:
    challenge = challenges.CHALLENGES[pending]
    with st.spinner("Checking…" if challenge.checked_on == "plan" else "Compiling the step to check it…"):
        try:
            solved, why = challenge.check(plan)
        except sl.ConfigError as error:
            solved, why = False, f"This configuration cannot be checked: {error}"
    if state.get("challenge_applied", ("",))[0] == pending:
        del state["challenge_applied"]  # the verdict replaces the 'press Check' notice
    state.challenge_results[pending] = {"solved": solved, "why": why, "config": challenges.canonical(plan.config)}
    if solved and pending not in state.solved:
        state.solved = [c for c in challenges.CHALLENGES if c in set(state.solved) | {pending}]
        classroom.record_solved(state.classroom_id, pending)
        st.rerun()  # once more, so the share link in the sidebar carries the new progress

solved_ids = set(state.solved)
total = len(challenges.CHALLENGES)
st.progress(len(solved_ids) / total, text=f"Solved {len(solved_ids)} of {total}")

for level, level_name in challenges.LEVELS.items():
    group = [c for c in challenges.CHALLENGES.values() if c.level == level]
    if not group:
        continue
    st.subheader(level_name.capitalize())
    for c in group:
        with st.container(border=True, key=f"challenge_{c.id}"):
            title, badge = st.columns([5, 1])
            title.markdown(f"**{c.title}**  \n{c.goal}")
            if c.id in solved_ids:
                badge.badge("Solved", icon=":material/check_circle:", color="green")
            st.caption(f"Checked against {challenges.CHECKED_ON[c.checked_on]}. Id `{c.id}`.")
            shown = state.challenge_hints.get(c.id, 0)
            b1, b2, b3 = st.columns(3)
            b1.button(
                "Check",
                key=f"check_{c.id}",
                type="primary",
                icon=":material/task_alt:",
                on_click=_ask_check,
                args=(c.id,),
                disabled=plan is None,
                help="Check the sidebar's configuration against this goal.",
            )
            b2.button(
                f"Hint ({shown}/{len(c.hints)})",
                key=f"hint_{c.id}",
                icon=":material/lightbulb:",
                on_click=_more_hint,
                args=(c.id,),
                disabled=shown >= len(c.hints),
                help="One more hint, each a little stronger.",
            )
            b3.button(
                "Show me a solution",
                key=f"solution_{c.id}",
                icon=":material/auto_fix_high:",
                on_click=_apply_solution,
                args=(c.id,),
                help="Put a configuration that solves it into the sidebar.",
            )
            for i, hint in enumerate(c.hints[:shown]):
                st.info(f"**Hint {i + 1}.** {hint}", icon=":material/lightbulb:")
            applied = state.get("challenge_applied")
            if applied and applied[0] == c.id:
                st.info(applied[1], icon=":material/auto_fix_high:")
            checked = state.challenge_results.get(c.id)
            if checked:
                box = st.success if checked["solved"] else st.warning
                box(checked["why"], icon=":material/check:" if checked["solved"] else ":material/close:")
                if plan is None or checked["config"] != challenges.canonical(plan.config):
                    st.caption("That was the verdict for an earlier configuration: press Check again for this one.")
