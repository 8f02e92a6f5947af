"""Draw an explained run (collectives.teach.explain.Run) as an SVG: one panel per step.

Each panel puts the ranks around a ring. Under each rank is its buffer, one
cell per segment; a cell is striped with the colours of the ranks whose data
it holds (read off the 10**rank digits of the real values), grey when the
rank does not hold that segment yet, hatched when the segment is empty.
An arrow is one send of that step, coloured by the sending rank and labelled
with the segment, its bytes and, past one, its number of chunks.

Plain SVG 1.1 with no scripts or external references, so browsers and
converters (``convert ring.svg ring.png``) all show the same.
"""
from __future__ import annotations

import math
from xml.sax.saxutils import escape

import numpy as np

from ..host.schedule import offsets

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
PANEL_W, PANEL_H = 330, 320
RING_R = 105
CELL_W_TOTAL, CELL_H = 84, 16
COLUMNS = 3


def colour(rank: int) -> str:
    return PALETTE[rank % len(PALETTE)]


def _node_xy(rank: int, world: int, cx: float, cy: float) -> tuple[float, float]:
    a = -math.pi / 2 + 2 * math.pi * rank / max(world, 1)
    return cx + RING_R * math.cos(a), cy + RING_R * math.sin(a)


def _cells(run, view: np.ndarray, x: float, y: float, counts: list[int]) -> list[str]:
    """One rank's buffer as a row of segment cells, striped by contributing rank."""
    from .explain_text import contributors

    out = []
    n = len(counts)
    w = CELL_W_TOTAL / n
    offs = offsets(counts)
    for s in range(n):
        cx = x + s * w
        seg = view[offs[s]:offs[s + 1]]
        if seg.size == 0:
            out.append(f'<rect class="cell empty" x="{cx:.1f}" y="{y:.1f}" width="{w:.1f}" height="{CELL_H}" '
                       f'fill="url(#hatch)" stroke="#444" stroke-width="0.6"/>')
            continue
        if np.isnan(seg).any():
            out.append(f'<rect class="cell unknown" x="{cx:.1f}" y="{y:.1f}" width="{w:.1f}" height="{CELL_H}" '
                       f'fill="#e6e6e6" stroke="#444" stroke-width="0.6"/>')
            continue
        ranks = sorted({r for v in set(seg.tolist()) for r in (contributors(v, run.world) or [])})
        if not ranks:
            out.append(f'<rect class="cell" x="{cx:.1f}" y="{y:.1f}" width="{w:.1f}" height="{CELL_H}" '
                       f'fill="#ffffff" stroke="#444" stroke-width="0.6"/>')
            continue
        sh = CELL_H / len(ranks)
        for i, r in enumerate(ranks):
            out.append(f'<rect class="stripe" data-rank="{r}" x="{cx:.1f}" y="{y + i * sh:.2f}" '
                       f'width="{w:.1f}" height="{sh:.2f}" fill="{colour(r)}"/>')
        out.append(f'<rect class="cell" data-ranks="{",".join(map(str, ranks))}" x="{cx:.1f}" y="{y:.1f}" '
                   f'width="{w:.1f}" height="{CELL_H}" fill="none" stroke="#444" stroke-width="0.6"/>')
    return out


def _arrow(e: dict, world: int, cx: float, cy: float, label: str, cls: str = "send") -> list[str]:
    x0, y0 = _node_xy(e["rank"], world, cx, cy)
    x1, y1 = _node_xy(e["peer"], world, cx, cy)
    dx, dy = x1 - x0, y1 - y0
    d = math.hypot(dx, dy) or 1.0
    ux, uy = dx / d, dy / d
    px, py = -uy * 6, ux * 6  # to the side, so a -> b and b -> a do not overlap
    ax0, ay0 = x0 + ux * 30 + px, y0 + uy * 30 + py
    ax1, ay1 = x1 - ux * 34 + px, y1 - uy * 34 + py
    c = colour(e["rank"])
    mx, my = (ax0 + ax1) / 2 + px * 3, (ay0 + ay1) / 2 + py * 3 + 3
    width = 2.5 if e["nbytes"] else 1.0
    dash = "" if e["nbytes"] else ' stroke-dasharray="3,3"'
    return [f'<line class="{cls}" data-src="{e["rank"]}" data-dst="{e["peer"]}" data-bytes="{e["nbytes"]}" '
            f'x1="{ax0:.1f}" y1="{ay0:.1f}" x2="{ax1:.1f}" y2="{ay1:.1f}" stroke="{c}" '
            f'stroke-width="{width}"{dash} marker-end="url(#head{e["rank"] % len(PALETTE)})"/>',
            f'<text x="{mx:.1f}" y="{my:.1f}" font-size="10" text-anchor="middle" fill="{c}">'
            f'{escape(label)}</text>']


def _panel(run, title: str, view_list, sends, x0: float, y0: float, counts) -> list[str]:
    cx, cy = x0 + PANEL_W / 2, y0 + PANEL_H / 2 + 10
    out = ['<g class="panel">',
           f'<rect x="{x0 + 4}" y="{y0 + 4}" width="{PANEL_W - 8}" height="{PANEL_H - 8}" rx="8" '
           f'fill="#fbfbfb" stroke="#bbb"/>',
           f'<text x="{x0 + 14}" y="{y0 + 24}" font-size="13" font-weight="bold">{escape(title)}</text>']
    for e in sends:
        if "read_label" in e:  # a direct read: drawn from the buffer's owner to the reader
            out += _arrow(e, run.world, cx, cy, e["read_label"], cls="read")
            continue
        if run.op == "broadcast":
            label = f"{e['nbytes']} B"
        else:
            label = f"s{e['seg']} {e['nbytes']} B"
        if e.get("chunks", 1) > 1:
            label += f" ({e['chunks']} ch)"
        out += _arrow(e, run.world, cx, cy, label)
    for r in range(run.world):
        nx, ny = _node_xy(r, run.world, cx, cy)
        out.append(f'<circle cx="{nx:.1f}" cy="{ny:.1f}" r="5" fill="{colour(r)}"/>')
        out.append(f'<text x="{nx:.1f}" y="{ny - 9:.1f}" font-size="11" text-anchor="middle">rank {r}</text>')
        out += _cells(run, view_list[r], nx - CELL_W_TOTAL / 2, ny + 8, counts)
    w = CELL_W_TOTAL / len(counts)
    for e in sends:  # outline what each sender puts on the wire
        if e["nbytes"] and "read_label" not in e:
            nx, ny = _node_xy(e["rank"], run.world, cx, cy)
            seg = 0 if run.op == "broadcast" else e["seg"]
            out.append(f'<rect class="sent" x="{nx - CELL_W_TOTAL / 2 + seg * w:.1f}" y="{ny + 7:.1f}" '
                       f'width="{w:.1f}" height="{CELL_H + 2}" fill="none" stroke="{colour(e["rank"])}" '
                       f'stroke-width="2.5"/>')
    out.append("</g>")
    return out


def render_svg(run) -> str:
    """The whole diagram as SVG text: a panel for the start, then one per step
    (for an explain_direct.DirectRun: one per phase of direct reads)."""
    if hasattr(run, "one_phase"):
        return _direct_svg(run)
    from .explain_run import PHASE_NAMES

    counts = [sum(run.counts)] if run.op == "broadcast" else list(run.counts)
    panels = [("before the first step", run.initial, [])]
    total = len(run.steps)
    for st in run.steps:
        panels.append((f"step {st.index + 1}/{total}: {PHASE_NAMES[st.phase]} {st.phase_step}",
                       st.views, st.sends))
    split = f"root {run.root}" if run.op == "broadcast" else f"segments {run.counts}"
    title = (f"{run.op}: {sum(run.counts)} x {run.dtype.name} ({run.nbytes} B) on {run.world} ranks, "
             f"{split}, chunk {run.chunk} elements")
    notes = ("cells: each rank's buffer, one per segment, striped by the ranks whose data it holds "
             "(grey: not received yet; hatched: empty segment).",
             "arrows: the sends of that step, coloured by the sender; the outlined cell is the segment on the wire.")
    return _document(run, title, notes, panels, counts)


def _direct_svg(run) -> str:
    """A DirectRun: its inputs, then per phase the reads (arrows from the buffer's owner to
    the reader, coloured by the owner) over what each rank's output holds after the phase."""
    from .explain_direct import expected_phases

    n, whole = run.world, sum(run.counts)
    counts = [whole] if run.op == "broadcast" else list(run.counts)
    offs = offsets(run.counts)

    def placed(arr, lo):
        v = np.full(whole, np.nan)
        v[lo:lo + arr.size] = arr
        return v
    inputs = [placed(run.inputs[r], offs[r] if run.op == "all_gather" else 0) for r in range(n)]
    final = [placed(run.outputs[r], offs[r] if run.op == "reduce_scatter" else 0) for r in range(n)]
    own = [np.where(np.isin(np.arange(whole), np.arange(offs[r], offs[r + 1])), final[r], np.nan) for r in range(n)]
    panels = [("inputs (private: the pipe)" if run.pipe else "inputs (in the heap)", inputs, [])]
    phases = expected_phases(run)
    evs = run.tracer.data_events()
    for i, ph in enumerate(phases):
        whole_reads = ph in ("direct read", "direct broadcast") or run.op == "all_gather"
        reads = [{"rank": e["peer"], "peer": e["rank"], "nbytes": e["nbytes"], "seg": e["seg"],
                  "read_label": f"{e['nbytes']} B" if whole_reads else f"s{e['seg']} {e['nbytes']} B"}
                 for e in evs if e["phase"] == ph]
        after = own if ph in ("direct reduce-scatter", "pipelined reduce-scatter") and run.op == "all_reduce" else final
        panels.append((f"phase {i + 1}/{len(phases)}: {ph}", after, reads))
    title = f"{run.op}: {whole} x {run.dtype.name} ({run.nbytes} B) on {n} ranks, direct reads, segments {run.counts}"
    notes = ("cells: each rank's output after the phase, striped by the ranks whose data it holds "
             "(inputs in the first panel).",
             "arrows: reads of a peer's buffer in place, from the owner to the reader, coloured by the owner.")
    return _document(run, title, notes, panels, counts)


def _document(run, title: str, notes, panels, counts) -> str:
    cols = min(COLUMNS, len(panels))
    rows = math.ceil(len(panels) / cols)
    head = 66
    legend_h = 30
    w, h = cols * PANEL_W + 20, rows * PANEL_H + head + legend_h + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           f'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
           "<defs>",
           '<pattern id="hatch" width="5" height="5" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="5" height="5" fill="#fff"/>'
           '<line x1="0" y1="0" x2="0" y2="5" stroke="#999" stroke-width="1.5"/></pattern>']
    for i, c in enumerate(PALETTE):
        out.append(f'<marker id="head{i}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
                   f'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{c}"/></marker>')
    out.append("</defs>")
    out.append(f'<rect width="{w}" height="{h}" fill="#ffffff"/>')
    out.append(f'<text x="12" y="24" font-size="15" font-weight="bold">{escape(title)}</text>')
    for k, note in enumerate(notes):
        out.append(f'<text x="12" y="{42 + 15 * k}" font-size="11">{escape(note)}</text>')
    for i, (ptitle, views, sends) in enumerate(panels):
        x0, y0 = 10 + (i % cols) * PANEL_W, head + (i // cols) * PANEL_H
        out += _panel(run, ptitle, views, sends, x0, y0, counts)
    ly = head + rows * PANEL_H + 18
    for r in range(run.world):
        lx = 14 + r * 80
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{colour(r)}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly}" font-size="11">rank {r}</text>')
    out.append("</svg>")
    return "\n".join(out)


def draw(run, path) -> None:
    """Write the SVG of ``run`` (an explain.Run or explain_direct.DirectRun) to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_svg(run))
