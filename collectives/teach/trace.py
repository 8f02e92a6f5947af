"""Record what the collectives do: every send, receive, wait and reduce, with bytes and times.

    tracer = Tracer()
    comm = Communicator(tracer=tracer)          # or: COLLECTIVES_TRACE=trace.json mpirun ...
    comm.all_reduce(x)
    tracer.totals()                            # {rank: {"sent": B, "recv": B}}
    tracer.write_chrome("trace.json")          # trace.rank0.json, ... for Perfetto

This module records and answers questions about the records; trace_chrome.py
turns them into Chrome trace files and reads those back.

What arrives here. The Communicator calls ``begin(label, rank=)`` and
``end(label, rank=)`` around each collective. Context's ``isend``, ``irecv``,
``wait`` and ``reduce``, which every message and reduce goes through, call
``event(action, rank=, label=, **fields)``:

- ``send``: one per step, recorded when the step starts (``Context.trace_step``):
  ``phase``, ``step``, ``peer``, ``seg``, ``offset`` (of the segment, in
  elements of the full buffer); each chunk posted adds to its ``chunks``,
  ``count`` and ``nbytes``.
- ``recv`` and ``reduce``: one per chunk, once its receive has completed in
  ``Context.wait`` or it was reduced, with ``chunk`` and the chunk's own
  ``offset``/``count``/``nbytes``, and (ignored unless ``keep_data``)
  ``data``, a view of the bytes that landed.
- ``wait``: only when the executor actually blocked, with its own ``t0``/``t1``.

Byte totals count the data the algorithms move (the header agreement's few
hundred bytes are not recorded). Summing ``send`` and ``recv`` events gives
exactly (N-1)/N of the buffer per rank for reduce-scatter and all-gather.

Times. Each event gets ``t`` (when it was recorded) and ``t0``: the end of the
previous event of the same thread (or the collective's start). A collective
runs on one thread, so [t0, t) is the time that thread spent getting to this
event: posting sends, the reduce itself, and so on; waits carry their exact
blocked interval. Times are ``time.perf_counter`` seconds, turned into
microseconds since the epoch on export, so files from several processes of
one machine line up in one view.
"""
from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from . import trace_chrome as chrome
from .trace_chrome import chrome_totals, load_chrome, merge_chrome, rank_path

__all__ = ["Tracer", "tracer_from_env", "rank_path", "load_chrome", "chrome_totals", "merge_chrome", "main"]

DATA_ACTIONS = ("send", "recv", "reduce")


class Tracer:
    """Thread-safe recorder of collective events (see the module docstring).

    Args:
      keep_data: keep a copy of the ``data`` each recv/reduce event carries
        (``python -m collectives.teach.explain`` shows buffers from it); off for
        real runs, where it would copy every byte moved.
      path: where :meth:`close` writes the Chrome trace (None: nowhere).
      merged: write one file with every rank (True) or one file per rank,
        ``trace.json`` -> ``trace.rank0.json`` (False).
    """

    def __init__(self, keep_data: bool = False, path: str | os.PathLike | None = None,
                 merged: bool = False):
        self.keep_data, self.path, self.merged = keep_data, path, merged
        self.events: list[dict] = []
        self.collectives: list[dict] = []
        self._lock = threading.Lock()
        self._open: dict[tuple[int, str], float] = {}
        self._last: dict[int, float] = {}  # thread id -> end of its previous event
        self._local = threading.local()
        self._epoch = time.time() - time.perf_counter()  # perf_counter -> wall seconds

    # ------------------------------------------------------ called by the library
    def begin(self, label: str, rank: int) -> None:
        now = time.perf_counter()
        self._local.current = (rank, label)
        with self._lock:
            self._open[(rank, label)] = now
            self._last[threading.get_ident()] = now

    def end(self, label: str, rank: int, road: str | None = None) -> None:
        """The collective ``label`` ended on ``rank``, having taken ``road`` (roads.py)."""
        now = time.perf_counter()
        with self._lock:
            t0 = self._open.pop((rank, label), now)
            self.collectives.append({"label": label, "rank": rank, "t0": t0, "t1": now, "road": road})
            self._last[threading.get_ident()] = now

    def event(self, action: str, rank: int | None = None, label: str | None = None, **fields) -> dict:
        """Record one event; return it (Context.isend adds each chunk of a step's send to it)."""
        now = time.perf_counter()
        data = fields.pop("data", None)
        if rank is None or label is None:
            rank, label = getattr(self._local, "current", (rank, label))
        ev = {"action": action, "rank": rank, "label": label, **fields}
        if self.keep_data and data is not None:
            ev["data"] = np.array(data, copy=True)
        tid = threading.get_ident()
        with self._lock:
            if action == "wait":
                self._last[tid] = max(self._last.get(tid, ev["t1"]), ev["t1"])
            else:
                ev["t0"], ev["t"] = min(self._last.get(tid, now), now), now
                self._last[tid] = now
            self.events.append(ev)
        return ev

    # --------------------------------------------------------------- questions
    def data_events(self, label: str | None = None) -> list[dict]:
        """send/recv/reduce events (of one collective label, if given), in record order."""
        with self._lock:
            evs = list(self.events)
        return [e for e in evs if e["action"] in DATA_ACTIONS and (label is None or e["label"] == label)]

    def totals(self, label: str | None = None) -> dict[int, dict[str, int]]:
        """Bytes each rank sent and received: {rank: {"sent": B, "recv": B}}."""
        out: dict[int, dict[str, int]] = defaultdict(lambda: {"sent": 0, "recv": 0})
        for e in self.data_events(label):
            if e["action"] == "send":
                out[e["rank"]]["sent"] += int(e["nbytes"])
            elif e["action"] == "recv":
                out[e["rank"]]["recv"] += int(e["nbytes"])
        return dict(out)

    def links(self, label: str | None = None, side: str = "send") -> dict[tuple[int, int], int]:
        """Bytes per link (src, dst), as the senders (``side="send"``) or receivers saw them."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for e in self.data_events(label):
            if side == "send" and e["action"] == "send":
                out[(e["rank"], e["peer"])] += int(e["nbytes"])
            elif side == "recv" and e["action"] == "recv":
                out[(e["peer"], e["rank"])] += int(e["nbytes"])
        return dict(out)

    def mark(self) -> int:
        """A place in the record: ``since(mark, rank)`` gives what came after it."""
        with self._lock:
            return len(self.events)

    def since(self, mark: int, rank: int) -> list[dict]:
        """Events of ``rank`` recorded after ``mark``."""
        with self._lock:
            return [e for e in self.events[mark:] if e["rank"] == rank]

    def roads(self) -> dict[tuple[int, str], str | None]:
        """The road every finished collective took: {(rank, label): road}."""
        with self._lock:
            return {(c["rank"], c["label"]): c.get("road") for c in self.collectives}

    def labels(self) -> list[str]:
        """Labels of the finished collectives, in the order they finished (once each)."""
        with self._lock:
            return list(dict.fromkeys(c["label"] for c in self.collectives))

    # ------------------------------------------------------------ Chrome trace
    def snapshot(self) -> tuple[list[dict], list[dict]]:
        """Copies of (collectives, events) recorded so far, taken under the lock."""
        with self._lock:
            return list(self.collectives), list(self.events)

    def chrome_events(self, rank: int | None = None) -> list[dict]:
        """Chrome trace events ("X" complete events, microseconds; pid = rank); see trace_chrome.py."""
        return chrome.chrome_events(*self.snapshot(), self._epoch, rank)

    def write_chrome(self, path: str | os.PathLike, merged: bool | None = None) -> list[Path]:
        """Write the Chrome trace (Perfetto, chrome://tracing); return the files written.

        Args:
          path: e.g. ``trace.json``.
          merged: one file with every rank, or one per rank with ``.rank{r}``
            before the suffix (``trace.rank0.json``). Default: ``self.merged``.
        """
        merged = self.merged if merged is None else merged
        return chrome.write_chrome(*self.snapshot(), self._epoch, path, merged)

    def close(self) -> None:
        """Write the trace to ``self.path`` (if set and anything was recorded)."""
        if self.path is not None and (self.collectives or self.events):
            self.write_chrome(self.path)


_ENV_TRACERS: dict[str, Tracer] = {}


def tracer_from_env(path: str | None = None) -> Tracer | None:
    """The tracer for ``path`` (the tuning table's trace setting, ``COLLECTIVES_TRACE``,
    when None), or None when it is empty.

    Every rank writes its own file at exit: ``path`` with ``.rank{r}`` before
    the suffix (``trace.json`` -> ``trace.rank0.json``, ``trace.rank1.json``,
    ...); merge them with ``python -m collectives.teach.trace merge``. All
    Communicators of one process share one tracer per path, so a second
    communicator does not overwrite the first one's file.
    """
    if path is None:
        from ..tuning import load
        path = load().trace
    if not path:
        return None
    key = os.path.abspath(path)
    tracer = _ENV_TRACERS.get(key)
    if tracer is None:
        import atexit

        tracer = _ENV_TRACERS[key] = Tracer(path=path)
        atexit.register(tracer.close)
    return tracer


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m collectives.teach.trace",
                                 description="Merge per-rank Chrome traces, or print their byte totals.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge trace.rank*.json into one file")
    m.add_argument("files", nargs="+")
    m.add_argument("-o", "--out", required=True)
    s = sub.add_parser("totals", help="bytes sent and received per rank")
    s.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "merge":
        print(merge_chrome(args.files, args.out))
    else:
        events = load_chrome(args.files)
        labels = [e["name"] for e in events if e.get("cat") == "collective"]
        for label in dict.fromkeys(labels):
            mine = [e for e in events if e.get("args", {}).get("label") == label]
            for r, t in sorted(chrome_totals(mine).items()):
                print(f"{label:<20} rank {r}: sent {t['sent']:>10} B, received {t['recv']:>10} B")
        for r, t in sorted(chrome_totals(events).items()):
            print(f"{'all':<20} rank {r}: sent {t['sent']:>10} B, received {t['recv']:>10} B")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
