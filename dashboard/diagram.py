"""The job state diagram as inline SVG, drawn from the django-fsm declaration on ``Job.state``:
every declared transition is an edge (one per state pair, labelled with its transition names), and
a job's own path — the state pairs of its transition log — is drawn lit."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from math import hypot

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from jobs.models import Job, State

# Where each state sits (column, row); a state the declaration adds later goes to the last row.
_PLACES = {
    State.PLANNED: (0, 1),
    State.RESERVED: (1, 0),
    State.RUNNING: (2, 0),
    State.RESULT_STORED: (3, 0),
    State.DONE: (4, 0),
    State.FAILED: (1, 2),
    State.DEAD: (2, 2),
    State.UNCLEAR: (3, 1),
    State.READY_FOR_REVIEW: (4, 1),
    State.RECHECK_DUE: (3, 2),
    State.CANCELLED: (4, 2),
    State.HELD: (0, 2),
}
_W, _H, _NODE_W, _NODE_H = 215, 110, 124, 30


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    names: tuple[str, ...]


def declared_edges() -> list[Edge]:
    names = defaultdict(set)
    for t in Job._meta.get_field("state").get_all_transitions(Job):
        if t.source in ("*", "+"):
            continue
        names[(t.source, t.target)].add(t.name)
    return [Edge(s, t, tuple(sorted(n))) for (s, t), n in sorted(names.items())]


def _centre(state: str, extra: dict[str, tuple[int, int]]) -> tuple[float, float]:
    column, row = _PLACES.get(state) or extra[state]
    return 20 + _NODE_W / 2 + column * _W, 20 + _NODE_H / 2 + row * _H


def state_diagram(
    lit_pairs: set[tuple[str, str]] = frozenset(), current: str = "", *, labels: str = "lit"
) -> SafeString:
    """``labels``: "lit" labels only the lit edges (a job's path), "all" every edge."""
    edges = declared_edges()
    states = sorted({e.source for e in edges} | {e.target for e in edges} | set(State.values))
    extra = {s: (i, 3) for i, s in enumerate(s for s in states if s not in _PLACES)}
    rows = 3 + bool(extra)
    width, height = 40 + 4 * _W + _NODE_W, 52 + (rows - 1) * _H + _NODE_H
    lit_states = {s for pair in lit_pairs for s in pair}
    parts = [
        f'<svg class="state-diagram" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="job state diagram" xmlns="http://www.w3.org/2000/svg">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrow"/></marker>'
        '<marker id="arrow-lit" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrow-lit"/></marker></defs>',
    ]
    pairs = {(e.source, e.target) for e in edges}
    for edge in edges:
        (x1, y1), (x2, y2) = _centre(edge.source, extra), _centre(edge.target, extra)
        # Bend every edge a little (more when the reverse edge exists), so opposite edges do not overlap.
        bend = 26 if (edge.target, edge.source) in pairs else 14
        length = hypot(x2 - x1, y2 - y1) or 1
        nx, ny = -(y2 - y1) / length, (x2 - x1) / length
        cx, cy = (x1 + x2) / 2 + nx * bend, (y1 + y2) / 2 + ny * bend
        sx, sy = _border(x1, y1, cx, cy)
        ex, ey = _border(x2, y2, cx, cy)
        lit = (edge.source, edge.target) in lit_pairs
        label = ", ".join(edge.names)
        # Cancelling is allowed from almost every state: dashed and unlabelled unless lit (see the legend).
        cancel = edge.names == ("cancel",)
        classes = "edge" + (" lit" if lit else "") + (" cancel" if cancel else "")
        parts.append(
            f'<path class="{classes}" d="M{sx:.0f},{sy:.0f} Q{cx:.0f},{cy:.0f} '
            f'{ex:.0f},{ey:.0f}" marker-end="url(#{"arrow-lit" if lit else "arrow"})">'
            f"<title>{escape(edge.source)} → {escape(edge.target)}: {escape(label)}</title></path>"
        )
        if lit or (labels == "all" and not cancel):
            parts.append(
                f'<text class="edge-label{" lit" if lit else ""}" x="{(sx + 2 * cx + ex) / 4:.0f}" '
                f'y="{(sy + 2 * cy + ey) / 4 - 3:.0f}">{escape(label)}</text>'
            )
    for state in states:
        x, y = _centre(state, extra)
        classes = "node" + (" lit" if state in lit_states else "") + (" current" if state == current else "")
        parts.append(
            f'<g class="{classes}"><rect x="{x - _NODE_W / 2:.0f}" y="{y - _NODE_H / 2:.0f}" '
            f'width="{_NODE_W}" height="{_NODE_H}" rx="6"/><text x="{x:.0f}" y="{y + 4:.0f}">'
            f"{escape(state)}</text></g>"
        )
    parts.append(f'<text class="legend" x="20" y="{height - 6}">dashed: cancel</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _border(x: float, y: float, towards_x: float, towards_y: float) -> tuple[float, float]:
    """Where the line from a node's centre towards a point leaves the node's box."""
    dx, dy = towards_x - x, towards_y - y
    if dx == 0 and dy == 0:
        return x, y
    scale = min(
        (_NODE_W / 2 + 3) / abs(dx) if dx else float("inf"), (_NODE_H / 2 + 3) / abs(dy) if dy else float("inf")
    )
    return x + dx * scale, y + dy * scale
