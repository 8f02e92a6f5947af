"""The hier road: the direct roads within each node, the ring between nodes.

Nodes are blocks of k consecutive ranks (the ranks on one host, or the tuning
table's ``node_size`` k), all of one size; node j's local rank l is
world rank j*k + l. Local rank l of every node forms rail l, a communicator
on which the existing ring runs (its own header check covers the rail; the
direct calls check within each node; every rank is linked to every other
through its node and its rail, so a mismatch anywhere is seen everywhere).

- all-reduce: direct reduce-scatter within the node (local rank l gets node
  segment l), ring all-reduce of that segment over rail l (into symmetric
  scratch), direct all-gather within the node.
- reduce-scatter: local rank l reduces, within the node, the world segments
  of every rank j*k + l (k-strided ranges of x), then a ring reduce-scatter
  over rail l leaves each rank its own segment.
- all-gather: ring all-gather over rail l (into scratch), then each local
  rank's gathered pieces are copied by every node peer to their places.
- broadcast: the root's rail broadcasts, then every node broadcasts directly
  from its rank on that rail.
- barrier: rail barrier, then a direct node barrier.

Scratch grows only after a node check: sizes come from agreed headers.
"""
from __future__ import annotations

import numpy as np

from ..errors import CollectiveError, MismatchError
from ..host.schedule import offsets, split_counts

POISON_S = 2.0  # how long a rank that found a node mismatch waits to tell its rail (then raises anyway)


class Hierarchy:
    """Node-aware collectives for a Symmetric whose world spans several nodes.

    Args:
      world: the world's bootstrap.
      sym: the Symmetric (its Direct runs the node's part).
      node_ranks: the world rank of every rank of this node.
      make_rail: makes the Communicator of a rail from its bootstrap (the ring between
        nodes, staging nothing: its ranks are on different nodes).
    """

    def __init__(self, world, sym, node_ranks, make_rail):
        k, me = len(node_ranks), world.rank
        self.k, self.local = k, node_ranks.index(me)
        self.node = me // k if k else 0
        nodes = world.allgather_obj(list(node_ranks))
        self.usable = all(r == [j // k * k + i for i in range(k)] for j, r in enumerate(nodes))
        self.nodes = world.size // k
        self.sym, self.direct, self.heap = sym, sym.direct, sym.heap
        self.rail = make_rail(world.split(self.local, me))  # it owns (and closes) the rail's bootstrap
        self._bufs: dict = {}
        self._plans: dict = {}

    def close(self) -> None:
        self.rail.close()

    def _rail(self, hdr, fn, *args, **kw):
        """A ring call between nodes. On an error, poison this rank's next node
        step (node peers then raise too) and name the rail in the message."""
        try:
            return fn(*args, **kw)
        except CollectiveError as e:
            self.direct.sig.poison(hdr, isinstance(e, MismatchError))
            hint = (" (a rank there called something else, or found a mismatch within its node and met the "
                    "rail with a barrier to say so)" if isinstance(e, MismatchError) else "")
            raise type(e)(f"between nodes, on rail {self.local} (world ranks {self.local}, {self.local + self.k}, "
                          f"... every {self.k}; rail rank j is node j){hint}: {e}") from e

    def _node(self, fn, *args):
        """A direct call within the node. On a mismatch here, still meet the rail
        (a barrier, which mismatches whatever the rail peers run), so the other
        nodes raise MismatchError too instead of waiting for us."""
        try:
            return fn(*args)
        except MismatchError:
            self.rail.timeout = min(self.rail.timeout, POISON_S)  # a rail peer may never come
            try:
                self.rail.barrier()
            except CollectiveError:
                pass
            raise

    def _scratch(self, count, dt):
        """This rank's first ``count`` elements of symmetric scratch, and its location."""
        w = self.heap.scratch(count * dt.itemsize)
        return w.mine[:count * dt.itemsize].view(dt), (w.index, 0)

    def _private(self, name, count, dt):
        b = self._bufs.get((name, dt))
        if b is None or b.size < count:
            b = self._bufs[(name, dt)] = np.empty(max(count, 1), dt)
        return b[:count]

    def all_reduce(self, ctx, hdr, x, out, op):
        base = "sum" if op == "avg" else op
        segs = split_counts(x.size, self.k, max(1, 64 // x.dtype.itemsize))
        mine = self._private("seg", segs[self.local], x.dtype)
        self._node(self.direct.reduce_scatter, ctx, hdr, x, mine, segs, base, self.heap.locate(x))
        buf, loc = self._scratch(max(segs), x.dtype)  # the node agreed on x.size: same size everywhere
        buf = buf[:segs[self.local]]
        self._rail(hdr, self.rail.all_reduce, mine, op=base, out=buf)
        if op == "avg":  # divided once, by the world size, as the flat paths do
            ctx.kernels.scale(buf, self.k * self.nodes)
        self.direct.all_gather(ctx, hdr, buf, out, segs, loc)

    def _world_ranges(self, counts):
        """Per local rank l: the (offset, count) of every world segment j*k + l, by node."""
        key = tuple(counts)
        r = self._plans.get(key)
        if r is None:
            offs = offsets(counts)
            r = tuple(tuple((offs[j * self.k + l], counts[j * self.k + l]) for j in range(self.nodes))
                      for l in range(self.k))
            self._plans[key] = r
        return r

    def reduce_scatter(self, ctx, hdr, x, out, counts, op):
        base = "sum" if op == "avg" else op
        ranges = self._world_ranges(counts)
        mine = [c for _, c in ranges[self.local]]
        buf = self._private("rs", sum(mine), x.dtype)
        self._node(self.direct.reduce_scatter, ctx, hdr, x, buf, counts, base, self.heap.locate(x), ranges)
        got = self._rail(hdr, self.rail.reduce_scatter, buf, op=base, counts=mine)
        o = out.reshape(-1)
        np.copyto(o, got)
        if op == "avg":
            ctx.kernels.scale(o, self.k * self.nodes)

    def all_gather(self, ctx, hdr, x, out, counts):
        ranges = self._world_ranges(counts)
        mine = [c for _, c in ranges[self.local]]
        self._node(self.direct.barrier, ctx, hdr)  # the node agrees on counts before scratch may grow
        total = max(sum(c for _, c in r) for r in ranges)
        buf, loc = self._scratch(total, x.dtype)
        buf = buf[:sum(mine)]
        self._rail(hdr, self.rail.all_gather, x.reshape(-1), out=buf, counts=mine)
        self.direct.all_gather(ctx, hdr, buf, out, counts, loc, ranges)

    def broadcast(self, ctx, hdr, x, out, root):
        rj, rl = divmod(root, self.k)
        self._node(self.direct.barrier, ctx, hdr)  # the node agrees on the size before scratch may grow
        buf, loc = self._scratch(x.size, x.dtype)
        if self.local == rl:
            if self.node == rj:
                np.copyto(buf, x.reshape(-1))
            self._rail(hdr, self.rail.broadcast, buf, root=rj, out=buf)
        self.direct.broadcast(ctx, hdr, buf, out, rl, loc)

    def barrier(self, ctx, hdr):
        self._rail(hdr, self.rail.barrier)
        self.direct.barrier(ctx, hdr)
