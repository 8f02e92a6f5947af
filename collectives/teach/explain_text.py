"""explain's text: a recorded ring run (explain_run.Run) rendered step by step."""
from __future__ import annotations

import numpy as np

from .explain_run import PHASE_NAMES, Run, checks, expected_bytes
from ..host.schedule import offsets
from ..volumes import even_bytes_sent


def contributors(value: float, world: int) -> list[int] | None:
    """Ranks whose 10**r is summed in ``value``, or None if it is not such a sum."""
    if world > 8 or not np.isfinite(value) or value != int(value) or value < 0:
        return None
    v, ranks, r = int(value), [], 0
    while v:
        v, d = divmod(v, 10)
        if d > 1:
            return None
        if d:
            ranks.append(r)
        r += 1
    return ranks if r <= world else None


def _fmt_val(v: float) -> str:
    return "." if np.isnan(v) else str(int(v)) if v == int(v) else f"{v:g}"


def format_buffer(view: np.ndarray, counts: list[int]) -> str:
    offs = offsets(counts)
    parts = []
    for s in range(len(counts)):
        seg = view[offs[s]:offs[s + 1]]
        if seg.size == 0:
            parts.append("-")
        elif seg.size > 2 and (np.all(seg == seg[0]) or np.all(np.isnan(seg))):
            parts.append(f"{_fmt_val(seg[0])} x{seg.size}")
        else:
            parts.append(" ".join(_fmt_val(v) for v in seg))
    return "[" + " | ".join(parts) + "]"


def _who(run: Run, view: np.ndarray, lo: int, hi: int) -> str:
    vals = set(view[lo:hi].tolist())
    if len(vals) != 1 or not run.digits:
        return ""
    ranks = contributors(vals.pop(), run.world)
    if ranks is None:
        return ""
    if len(ranks) == 1:
        return f" (rank {ranks[0]}'s data)"
    return " (now the sum of ranks " + ",".join(map(str, ranks)) + ")"


def render(run: Run, show_buffers: bool | None = None) -> str:
    """The step-by-step text explanation, ending with the checks."""
    n, it, counts = run.world, run.itemsize, run.counts
    if show_buffers is None:
        show_buffers = sum(counts) <= 64
    lines = [f"{run.op} of {sum(counts)} x {run.dtype.name} ({run.nbytes} B) on {n} simulated ranks (ring.py)",
             f"chunk: {run.chunk} elements ({run.chunk * it} B)"]
    if run.op == "broadcast":
        lines.append(f"root: rank {run.root}; a pipelined chain root -> root+1 -> ... -> root-1")
        counts = [sum(counts)]  # one piece: the segments play no part
    else:
        lines.append(f"segments (elements): {counts}")
    if run.digits:
        lines.append("rank r starts with 10**r in each element, so each digit of a sum names a rank "
                     "(1011 = ranks 0, 1, 3)")
    if show_buffers:
        lines.append("buffers before:")
        lines += [f"  rank {r}: {format_buffer(run.initial[r], counts)}" for r in range(n)]
    total = len(run.steps)
    for st in run.steps:
        lines.append("")
        lines.append(f"step {st.index + 1}/{total}: {PHASE_NAMES[st.phase]} step {st.phase_step}")
        for e in st.sends:
            lo = e["offset"]
            what = f"seg {e['seg']} [{lo}:{lo + e['count']})" if run.op != "broadcast" else \
                f"buffer [{lo}:{lo + e['count']})"
            chunk_txt = f" in {e['chunks']} chunk{'s' * (e['chunks'] != 1)}" if "chunks" in e else ""
            lines.append(f"  rank {e['rank']} -> rank {e['peer']}: {what}, {e['nbytes']} B{chunk_txt}")
        reduced = {(g["rank"], g["action"], g["seg"]) for g in st.lands}
        for g in st.lands:
            rng = f"[{g['lo']}:{g['hi']})" if g["hi"] > g["lo"] else "(whole buffer)"
            who = _who(run, st.views[g["rank"]], g["lo"], g["hi"]) if g["hi"] > g["lo"] else \
                _who(run, st.views[g["rank"]], 0, sum(counts))
            what = f"seg {g['seg']} {rng}" if run.op != "broadcast" else f"buffer {rng}"
            if g["action"] == "reduce":
                lines.append(f"  rank {g['rank']} reduces {what} from rank {g['peer']} "
                             f"into its own{who}")
            elif (g["rank"], "reduce", g["seg"]) not in reduced:  # a reduce line says it already
                lines.append(f"  rank {g['rank']} receives {what} from rank {g['peer']}: "
                             f"{g['nbytes']} B in {g['chunks']} chunk{'s' * (g['chunks'] != 1)}{who}")
        if show_buffers:
            lines.append("  buffers after:")
            lines += [f"    rank {r}: {format_buffer(st.views[r], counts)}" for r in range(n)]
    lines.append("")
    segs = "" if run.op == "broadcast" else f", s_i = segment i: {', '.join(str(c * it) for c in counts)} B"
    lines.append(f"bytes moved (B = {run.nbytes} B{segs}):")
    got, want = run.tracer.totals(), expected_bytes(run)
    for r in range(n):
        g = got.get(r, {"sent": 0, "recv": 0})
        s, rc, fs, fr = want[r]
        lines.append(f"  rank {r}: sent {g['sent']:>6} B (formula {fs} = {s}), "
                     f"received {g['recv']:>6} B (formula {fr} = {rc})")
    if n > 1 and len(set(counts)) == 1 and run.op != "broadcast":
        factor = "2(N-1)/N" if run.op == "all_reduce" else "(N-1)/N"
        per = round(even_bytes_sent(run.op, run.nbytes, n))
        lines.append(f"  even split: every rank sends {factor} x B = {per} B")
    lines.append("")
    for c in checks(run):
        lines.append(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
    return "\n".join(lines)


def render_direct(run, show_buffers: bool | None = None) -> str:
    """The direct reads of an explain_direct.DirectRun, phase by phase, ending with the checks."""
    # imported here: the direct side brings in collectives/symmetric (and with it mpi4py)
    from .explain_direct import PHASES, direct_checks, expected_phases, expected_reads
    from ..tuning import defaults
    n, it, counts = run.world, run.dtype.itemsize, run.counts
    offs = offsets(counts)
    whole = sum(counts)
    if show_buffers is None:
        show_buffers = whole <= 64
    evs = run.tracer.data_events()
    pushed = any(e.get("pushed") for e in evs)
    if run.pipe:
        DEPTH = defaults().pipe_depth
        lines = [f"{run.op} of {whole} x {run.dtype.name} ({run.nbytes} B) on {n} simulated ranks, pipelined "
                 f"(symmetric/pipe.py and csrc/pipe.c, over a stand-in heap)",
                 f"every buffer is private to its rank (an ordinary array, as the largest staged calls have): the "
                 f"ranks hand each other chunks of {run.pipe} B through {DEPTH} slots each in shared memory, taken "
                 f"while still in cache, and every write into out is a streaming store; nothing is sent",
                 f"steps: {max(-(-c * it // run.pipe) for c in counts)} (the most chunks in a segment); in each, "
                 f"every rank moves the same chunk of every segment and counts the step in its control slot"]
    elif run.private == "stage":
        lines = [f"{run.op} of {whole} x {run.dtype.name} ({run.nbytes} B) on {n} simulated ranks, staged "
                 f"(symmetric/stage.py and direct.py, over a stand-in heap)",
                 "every buffer is an ordinary array, private to its rank (as a caller's numpy arrays are): " +
                 ("the root copies its input" if run.op == "broadcast" else "each rank copies its input") +
                 " into its half of the stage window for this call (the two halves take turns, call by call), in "
                 "the node's heap, and peers read it there; each rank writes only its own output; nothing is sent"]
    elif run.private == "read":
        lines = [f"{run.op} of {whole} x {run.dtype.name} ({run.nbytes} B) on {n} simulated ranks, read in place "
                 f"(symmetric/cma.py" + (" and allreduce.py's read_in_place" if run.op == "all_reduce" else "") +
                 ", over a stand-in heap)",
                 "every buffer is an ordinary array, private to its rank: " +
                 ("the root posts the address of its input" if run.op == "broadcast" else
                  "each rank posts the addresses of its input and output" if run.op == "all_reduce" else
                  "each rank posts the address of its input") +
                 " in its control slot, and peers copy straight out of its memory with process_vm_readv, one copy "
                 "made by the kernel (the simulated ranks are threads of one process, so here the kernel copies "
                 "within it); nothing is staged, nothing is sent"]
        if run.op == "all_reduce":
            lines.append(f"each rank reduces its own segment in chunks of {run.chunk} B: each peer's chunk of input "
                         "is read into a small scratch and added while it is in cache; then REDUCED, and each rank "
                         "reads every peer's reduced segment from that peer's output")
    else:
        lines = [f"{run.op} of {whole} x {run.dtype.name} ({run.nbytes} B) on {n} simulated ranks, direct reads "
                 f"(symmetric/direct.py over a stand-in heap)",
                 "every buffer is in the node's symmetric heap: each rank reads its peers' buffers in place and " +
                 ("writes its own segment (or piece) into every rank's output (the push: memory sees each input "
                  "read once and each output written once)" if pushed else "writes only its own") +
                 "; nothing is sent"]
    if run.op == "all_reduce":
        lines.append(f"segments (elements, 64-byte aligned as the direct path cuts them): {counts}" +
                     (f"; one phase: all-reduces up to {defaults().one_phase_bytes} B" if run.one_phase else ""))
    elif run.op == "broadcast":
        lines.append(f"root: rank {run.root}")
    else:
        lines.append(f"segments (elements): {counts}")
    if n <= 8:
        lines.append("rank r starts with 10**r in each element, so each digit of a sum names a rank "
                     "(1011 = ranks 0, 1, 3)")
    if show_buffers:
        lines.append("inputs:")
        lines += [f"  rank {r}: {format_buffer(run.inputs[r].astype(np.float64), [run.inputs[r].size])}"
                  for r in range(n)]
    lines += ["", "post: every rank writes its header (and where its buffers live) into its own control slot and "
              "raises its flag to READY; each waits for every peer's flag and compares every header before "
              "reading a byte (a mismatch raises on every rank)"]
    phases = expected_phases(run)
    for i, phase in enumerate(phases):
        lines += ["", f"phase {i + 1}/{len(phases)}: {phase}: {PHASES[phase]}"]
        for e in sorted((e for e in evs if e["phase"] == phase), key=lambda e: (e["rank"], e["peer"])):
            q, seg = e["peer"], e["seg"]
            if phase in ("direct read", "direct broadcast"):
                what = f"its whole input [0:{whole})"
            elif run.op == "all_gather":
                what = f"its piece of {counts[q]} element{'s' * (counts[q] != 1)} into out [{offs[q]}:{offs[q + 1]})"
            elif phase in ("direct all-gather", "pipelined all-gather"):  # an all-reduce's reduced segments
                what = f"reduced seg {seg} [{offs[seg]}:{offs[seg + 1]}) of its {'own ' * bool(e.get('pushed'))}output"
            else:
                what = f"seg {seg} [{offs[seg]}:{offs[seg + 1]}) of its input"
            if run.pipe:  # through the owner's slots, chunk by chunk
                slots = "reduced slots" if phase == "pipelined all-gather" and run.op == "all_reduce" else "slots"
                lines.append(f"  rank {e['rank']} takes from rank {q}: {what}, through rank {q}'s {slots}, "
                             f"{e['nbytes']} B")
            elif e.get("pushed"):  # the owner wrote it into this rank's out
                lines.append(f"  rank {q} writes into rank {e['rank']}'s out: {what}, {e['nbytes']} B")
            elif run.private == "read":
                lines.append(f"  rank {e['rank']} copies from rank {q}'s memory (process_vm_readv): {what}, "
                             f"{e['nbytes']} B")
            elif run.private == "stage" and phase == "direct all-gather" and run.op == "all_reduce":
                # its out is private: the owner reduced its segment into its scratch in the heap
                lines.append(f"  rank {e['rank']} reads from rank {q}'s scratch in the heap: reduced seg {seg} "
                             f"[{offs[seg]}:{offs[seg + 1]}), {e['nbytes']} B")
            elif run.private == "stage":
                lines.append(f"  rank {e['rank']} reads from rank {q}'s stage copy: {what}, {e['nbytes']} B")
            else:
                lines.append(f"  rank {e['rank']} reads from rank {q}: {what}, {e['nbytes']} B")
    if run.pipe:
        lines += ["", "done: every rank raises its flag to DONE and returns: nobody reads its private buffers, and "
                  "a slot is written again only once every peer's step counter says it took what the slot held"]
    elif run.private == "stage":
        held = "stage copy and its scratch in the heap, which are" if run.op == "all_reduce" else "stage copy, which is"
        lines += ["", f"done: every rank raises its flag to DONE and returns without waiting: peers read only its "
                  f"{held} written again only after every peer has posted a later call"]
    elif run.private == "read":
        who = "the root" if run.op == "broadcast" else "every rank"
        lines += ["", f"done: every rank raises its flag to DONE; {who} waits for every peer's before returning: "
                  "peers read its own arrays in place, and the caller may overwrite them once it returns"]
    else:
        lines += ["", "done: every rank raises its flag to DONE and waits for every peer's before returning "
                  "(the caller may then overwrite its buffers)"]
    if show_buffers:
        lines.append("outputs:")
        lines += [f"  rank {r}: {format_buffer(run.outputs[r].astype(np.float64), [run.outputs[r].size])}"
                  for r in range(n)]
    lines.append("")
    segs = "" if run.op == "broadcast" else f", s_i = segment i: {', '.join(str(c * it) for c in counts)} B"
    lines.append(f"bytes read (B = {run.nbytes} B{segs}" + ("; a pushed piece counts as read by the rank it was "
                                                          "written to" if pushed else "") + "):")
    got, want = run.tracer.totals(), expected_reads(run)
    for r in range(n):
        v = want[r]
        lines.append(f"  rank {r}: read {got.get(r, {'recv': 0})['recv']:>6} B from peers (formula "
                     f"{v.received_formula} = {v.received}); peers read {v.sent_formula} = {v.sent} B of its buffers")
    lines.append("")
    for c in direct_checks(run):
        lines.append(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
    return "\n".join(lines)
