"""The two forms of a strategic compaction suggestion (docs/policies.md, ``strategic``): the
one-line prompt and the full box, in the specification's layout. The policy
(:mod:`pipeline.policies.strategic`) finds the points; this module only renders them.
"""

from __future__ import annotations

from pipeline.policies.strategic import number_text


def one_line(point: dict) -> str:
    """``[Compact? 72/50 calls | Task done | Clean state] Y/n/defer``"""
    calls = f"{number_text(point['weighted_calls'])}/{number_text(point['threshold'])}"
    return (f"[Compact? {calls} calls | "
            f"{point['boundary']} | {point.get('state', 'Clean state')}] Y/n/defer")


BOX_RULE = "━" * 51
BOX_BOUNDARY = {"todo_done": "Task completed", "commit": "Committed", "plan": "Plan written",
                "review": "Review finished"}


def _minutes_text(value: float | None) -> str:
    if value is None:
        return "unknown"
    whole = round(value)
    return f"{whole} minute" + ("" if whole == 1 else "s")


def box(point: dict) -> str:
    """The full form, in the specification's layout (Session Metrics, Boundary Detected,
    Recommendation, Options [1]-[4])."""
    kind = point.get("boundary_kind")
    label = BOX_BOUNDARY.get(kind, point["boundary"])
    detected = []
    if kind == "todo_done" and point.get("task"):
        detected.append(f'Task "{point["task"]}" marked complete ({point["detail"]})')
    elif kind == "commit":
        detected.append(f'Git commit: "{point["commit_message"]}"' if point.get("commit_message")
                        else f"Git commit: {point['detail']}")
    elif kind == "plan":
        detected.append(f"Plan written: {point['detail']}")
    elif kind == "review":
        detected.append(f"Review finished: {point['detail']}")
    else:
        detected.append(f"{point['boundary']}: {point['detail']}")
    detected.append("No pending changes or active debugging")
    lines = [
        BOX_RULE,
        " Context Compaction Suggested",
        BOX_RULE,
        " ",
        " Session Metrics:",
        f"   Tool calls:     {number_text(point['weighted_calls'])} significant "
        f"(threshold: {number_text(point['threshold'])})",
        f"   Session time:   {_minutes_text(point.get('session_minutes'))}",
        f"   Last boundary:  {label} 0 min ago",
        " ",
        " Boundary Detected:",
        *[f"   {line}" for line in detected],
        " ",
        " Recommendation: GOOD TIME TO COMPACT",
        " ",
        " Options:",
        "   [1] Compact now (will invoke context-saver first)",
        "   [2] Defer for 15 minutes",
        "   [3] Defer until next boundary",
        "   [4] Dismiss (don't suggest again this session)",
        BOX_RULE,
    ]
    return "\n".join(lines)
