"""Show, step by step, how the ring moves bytes: ``python -m collectives.teach.explain``.

    python -m collectives.teach.explain all_reduce --ranks 4 --count 16
    python -m collectives.teach.explain reduce_scatter --ranks 3 --count 10 --chunk 2
    python -m collectives.teach.explain all_reduce --ranks 4 --count 16 --svg ring.svg
    python -m collectives.teach.explain all_reduce --ranks 4 --count 9000 --algorithm direct
    python -m collectives.teach.explain all_reduce --ranks 2 --count 9000 --algorithm pipe
    python -m collectives.teach.explain all_reduce --ranks 2 --count 64 --algorithm read-in-place --chunk 8

The real ring algorithms (ring.py) run on simulated
ranks: one thread per rank over the in-process transport, with a
:class:`~collectives.teach.trace.Tracer` that keeps a copy of every chunk that
lands. Nothing here re-implements the schedule: every line printed comes from
a recorded send, receive or reduce.

``--algorithm pipe`` shows how the largest all-reduces and all-gathers of
ordinary (private) arrays go: in chunks through slots in shared memory
(collectives/symmetric/pipe.py), the same C loop that runs under mpirun.

``--algorithm stage`` and ``--algorithm read-in-place`` show the two ways an
ordinary (private) array gets to where its peers can read it on one node:
copied into the rank's stage window in the heap (symmetric/stage.py), or read
straight out of the owner's memory with process_vm_readv (symmetric/cma.py).

``--algorithm direct`` shows the direct path instead (buffers in the node's
symmetric heap, collectives/symmetric): which rank read which bytes of whose
buffer, phase by phase, with byte totals checked against
``volumes.direct_volumes``. The real direct code and its shared-memory
signals run there too, over a stand-in heap of numpy arrays that the
simulated ranks (threads) share: see explain_direct.py for why.

Files: explain_run.py runs and records (and checks against the formulas),
explain_text.py renders the steps, svg.py draws them, this module is the
command line and the public names.

Rank r starts with 10**r in every element, so in a sum each decimal digit
says whose data is in it: 1011 holds ranks 0, 1 and 3 (N <= 8).

Segments. Explain cuts the buffer like ``split_counts(count, N)`` (as even as
possible, element by element) or as ``--counts`` says. The Communicator's own
all-reduce aligns segments to 64 bytes, which for a 16-element buffer would
put everything in segment 0; explain calls the ring functions directly so
that small examples show the textbook split.

Byte formulas checked at the end (stated once, in collectives/volumes.py;
B = whole buffer, s_i = segment i in bytes, every index mod N):
  reduce-scatter: rank r sends B - s_r, receives B - s_(r-1)
  all-gather:     rank r sends B - s_(r+1), receives B - s_r
  all-reduce:     the sum of both (2(N-1)/N B for an even split)
  broadcast:      every rank sends B except the end of the chain (root - 1);
                  every rank but the root receives B
Steps: N-1 for reduce-scatter, all-gather and broadcast; 2(N-1) for all-reduce.
"""
from __future__ import annotations

import argparse
import sys

from .explain_run import (DTYPES, OPS, PHASE_NAMES, Check, Run, Step, checks, expected_bytes,  # noqa: F401
                          expected_steps, measured_steps, rank_value, reference, run)
from .explain_text import contributors, format_buffer, render, render_direct  # noqa: F401


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collectives.teach.explain",
                                 description="Run one collective on simulated ranks and show every step.")
    ap.add_argument("op", choices=OPS)
    ap.add_argument("--ranks", "-n", type=int, default=4, help="number of simulated ranks (default 4)")
    ap.add_argument("--count", "-c", type=int, default=16, help="elements in the whole buffer (default 16)")
    ap.add_argument("--counts", help="elements per segment, comma-separated (uneven allowed), e.g. 5,0,3,1")
    ap.add_argument("--dtype", default="float32", choices=DTYPES)
    ap.add_argument("--chunk", type=int, default=None, help="chunk size in elements (default: whole segments; "
                    "the pipe: 256 KiB, rounded up to whole 64-byte lines; read-in-place: the all-reduce's chunk, "
                    "512 KiB)")
    ap.add_argument("--root", type=int, default=0, help="broadcast root")
    ap.add_argument("--buffers", action=argparse.BooleanOptionalAction, default=None,
                    help="print every rank's buffer after each step (default: when count <= 64)")
    ap.add_argument("--algorithm", default="ring", choices=("ring", "direct", "stage", "read-in-place", "pipe",
                                                             "cuda-ring"),
                    help="ring (host/ring.py, default), direct (reads of peers' buffers in the symmetric heap), "
                         "stage (ordinary arrays copied into the stage window and read there), read-in-place "
                         "(ordinary arrays read with process_vm_readv: all_reduce, all_gather, broadcast), "
                         "pipe (private arrays in chunks through shared-memory slots: all_reduce, all_gather) or "
                         "cuda-ring (the GPU kernels' own source on CPU threads: which block moved which slice "
                         "through whose slots)")
    ap.add_argument("--svg", help="also draw the steps (direct: the phases) as an SVG diagram")
    ap.add_argument("--trace", help="also write the Chrome trace (one file per rank)")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")] if args.counts else None
    if args.algorithm == "cuda-ring":
        if args.op == "broadcast" or counts is not None:
            ap.error("--algorithm cuda-ring: all_reduce, reduce_scatter and all_gather of --count elements")
        from ..gpu_ring.explain import explain as explain_kernels
        from ..dtypes import to_dtype
        slot = args.chunk * to_dtype(args.dtype).itemsize if args.chunk else 32
        text = explain_kernels(args.op, args.ranks, args.count, args.dtype, slot_bytes=slot)
        print(text)
        return 0 if text.endswith("equal their formulas") else 1
    if args.algorithm in ("direct", "stage", "read-in-place", "pipe"):
        if args.chunk and args.algorithm in ("direct", "stage"):
            ap.error("--chunk applies to the ring, the pipe and the all-reduce read in place only (the direct "
                     "path reads whole segments)")
        from .explain_direct import direct_checks, run_direct
        from ..dtypes import to_dtype
        from ..tuning import defaults
        chunk = args.chunk * to_dtype(args.dtype).itemsize if args.chunk else 0
        pipe = (chunk or defaults().pipe_chunk_bytes) if args.algorithm == "pipe" else 0
        private = {"stage": "stage", "read-in-place": "read"}.get(args.algorithm, "")
        try:
            d = run_direct(args.op, args.ranks, args.count, dtype=args.dtype, root=args.root, counts=counts,
                           pipe=pipe, private=private, chunk=chunk if private == "read" else 0)
        except ValueError as e:
            ap.error(str(e))
        print(render_direct(d, args.buffers))
        if args.svg:
            from .svg import draw
            draw(d, args.svg)
            print(f"\ndiagram: {args.svg}")
        if args.trace:
            print(f"trace: {', '.join(map(str, d.tracer.write_chrome(args.trace)))}")
        return 0 if all(c.ok for c in direct_checks(d)) else 1
    r = run(args.op, args.ranks, args.count, dtype=args.dtype, chunk=args.chunk, root=args.root,
            counts=counts)
    print(render(r, args.buffers))
    if args.svg:
        from .svg import draw
        draw(r, args.svg)
        print(f"\ndiagram: {args.svg}")
    if args.trace:
        files = r.tracer.write_chrome(args.trace)
        print(f"trace: {', '.join(map(str, files))}")
    return 0 if all(c.ok for c in checks(r)) else 1


if __name__ == "__main__":
    sys.exit(main())
