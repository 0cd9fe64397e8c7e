"""A deploy Plan for people: one coloured line per resource saying what happens to its data.

`plan_lines` is plain (style, text) pairs, testable without rich; `print_plan` writes them to a rich Console.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeframe.plan.diff import Change, Plan

if TYPE_CHECKING:
    from rich.console import Console

SYMBOLS = {"create": "+", "alter": "~", "rebuild": "±", "drop": "-", "unchanged": " "}
STYLES = {"create": "green", "alter": "yellow", "rebuild": "magenta", "drop": "red", "unchanged": "dim"}
NO_CHANGES = "No changes: the deployment matches the files."


def plan_lines(plan: Plan, show_unchanged: bool = False) -> list[tuple[str, str]]:
    """(rich style, text) lines: each shown change with its details and refusal, then a summary line."""
    shown = [c for c in plan.changes if show_unchanged or c.action != "unchanged"]
    action_w = max((len(c.action) for c in shown), default=0)
    kind_w = max((len(c.kind) for c in shown), default=0)
    name_w = max((len(c.name) for c in shown), default=0)
    lines: list[tuple[str, str]] = []
    for change in shown:
        head = f"{SYMBOLS[change.action]} {change.action:<{action_w}} {change.kind:<{kind_w}} {change.name:<{name_w}}"
        lines.append((STYLES[change.action], f"{head}  {change.summary}".rstrip()))
        lines += [("dim", f"    {detail}") for detail in change.details]
        if change.refused:
            lines.append(("bold red", f"    ✗ refused: {change.refused}"))
            if change.hint:
                lines.append(("red", f"      fix: {change.hint}"))
    lines.append(summary_line(plan))
    if plan.refused:
        refused = f"Refused: {len(plan.refused)} change(s) cannot be deployed as they are (see ✗ above)"
        lines.append(("bold red", f"{refused}; nothing will be deployed."))
    return lines


def summary_line(plan: Plan) -> tuple[str, str]:
    if not plan.has_changes:
        return "green", NO_CHANGES
    count = {action: _count(plan.changes, action) for action in SYMBOLS}
    return "bold", (f"Plan: {count['create']} to create, {count['alter']} to alter, {count['rebuild']} to "
                    f"rebuild, {count['drop']} to drop, {count['unchanged']} unchanged")


def print_plan(plan: Plan, console: Console, show_unchanged: bool = False) -> None:
    from rich.markup import escape

    for style, text in plan_lines(plan, show_unchanged):
        console.print(f"[{style}]{escape(text)}[/]" if style else escape(text), highlight=False)


def _count(changes: tuple[Change, ...], action: str) -> int:
    return sum(1 for c in changes if c.action == action)
