"""A Tracer's records as Chrome trace files (Perfetto, chrome://tracing), and back.

trace.py records; this module turns the records into "X" (complete) events,
one process per rank, times in microseconds since the epoch (so files from
several processes of one machine line up), writes one file per rank or one
merged file, and reads files back (byte totals, merging).
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

PRODUCER = "ringzero collectives.teach.trace"


def _ranks(collectives: list[dict], events: list[dict]) -> list[int]:
    return sorted({c["rank"] for c in collectives} | {e["rank"] for e in events if e["rank"] is not None})


def chrome_events(collectives: list[dict], events: list[dict], epoch: float, rank: int | None = None) -> list[dict]:
    """Chrome trace events of a Tracer's records.

    Args:
      collectives: Tracer.collectives ({"label", "rank", "t0", "t1"} each).
      events: Tracer.events.
      epoch: wall-clock seconds minus perf_counter seconds (turns the records' times into wall time).
      rank: only this rank's events (None: every rank).
    """
    us = lambda t: round((t + epoch) * 1e6, 3)  # noqa: E731
    ranks = [r for r in _ranks(collectives, events) if rank is None or r == rank]
    out = [{"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}}
           for r in ranks]
    sums = defaultdict(lambda: {"sent": 0, "recv": 0})
    for e in events:
        if e["action"] in ("send", "recv"):
            sums[(e["rank"], e["label"])]["sent" if e["action"] == "send" else "recv"] += int(e["nbytes"])
    for c in collectives:
        if c["rank"] in ranks:
            args = {"bytes_sent": sums[(c["rank"], c["label"])]["sent"],
                    "bytes_recv": sums[(c["rank"], c["label"])]["recv"]}
            out.append(_x(c["label"], "collective", c["rank"], c["t0"], c["t1"], args, us))
    for e in events:
        if e["rank"] not in ranks:
            continue
        args = {k: v for k, v in e.items() if k not in ("action", "rank", "t", "t0", "t1", "data")}
        args = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                for k, v in args.items()}
        if e["action"] == "wait":
            name = f"wait {e['what'].split(' ')[0]} {e['peer']} (step {e['step']}, chunk {e['chunk']})"
            out.append(_x(name, "wait", e["rank"], e["t0"], e["t1"], args, us))
        else:
            out.append(_x(_event_name(e), e["action"], e["rank"], e["t0"], e["t"], args, us))
    return out


def write_chrome(collectives: list[dict], events: list[dict], epoch: float, path: str | os.PathLike,
                 merged: bool) -> list[Path]:
    """Write a Tracer's records as Chrome trace files; return the files written.

    Args:
      collectives, events, epoch: as :func:`chrome_events`.
      path: e.g. ``trace.json``.
      merged: one file with every rank, or one per rank (:func:`rank_path`).
    """
    path = Path(path)
    files = {path: None} if merged else {rank_path(path, r): r for r in _ranks(collectives, events)}
    for p, r in files.items():
        doc = {"traceEvents": chrome_events(collectives, events, epoch, r), "displayTimeUnit": "ns",
               "otherData": {"producer": PRODUCER}}
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, p)
    return list(files)


def _x(name, cat, pid, t0, t1, args, us) -> dict:
    # the duration from the raw seconds: absolute wall-clock microseconds keep
    # only about a quarter of a microsecond of precision
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": 0,
            "ts": us(t0), "dur": max(round((t1 - t0) * 1e6, 3), 0.0), "args": args}


def _event_name(e: dict) -> str:
    where = f"seg {e.get('seg')}"
    if e.get("chunk") is not None:
        where += f" chunk {e['chunk']}"
    arrow = {"send": "->", "recv": "<-", "reduce": "from"}[e["action"]]
    return f"{e['action']} {where} {arrow} {e.get('peer')} ({e['nbytes']} B, {e.get('phase', '')} step {e.get('step')})"


def rank_path(path: str | os.PathLike, rank: int) -> Path:
    """``trace.json`` -> ``trace.rank3.json`` (``trace`` -> ``trace.rank3``)."""
    p = Path(path)
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix}")


def load_chrome(paths) -> list[dict]:
    """Every event of one or more Chrome trace files (as written by write_chrome)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for p in paths:
        doc = json.loads(Path(p).read_text())
        out.extend(doc["traceEvents"] if isinstance(doc, dict) else doc)
    return out


def chrome_totals(events: list[dict]) -> dict[int, dict[str, int]]:
    """Bytes sent and received per rank (pid), summed from a Chrome trace's send/recv events."""
    out: dict[int, dict[str, int]] = defaultdict(lambda: {"sent": 0, "recv": 0})
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("send", "recv"):
            out[e["pid"]]["sent" if e["cat"] == "send" else "recv"] += int(e["args"]["nbytes"])
    return dict(out)


def merge_chrome(paths, out: str | os.PathLike) -> Path:
    """Merge per-rank files (``trace.rank*.json``) into one file for a single view."""
    doc = {"traceEvents": load_chrome(paths), "displayTimeUnit": "ns", "otherData": {"producer": PRODUCER}}
    Path(out).write_text(json.dumps(doc))
    return Path(out)
