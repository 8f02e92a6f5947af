import numpy as np, time, sys
from collectives import Communicator
from collectives.roads import Road
kind = sys.argv[1]
cs = {"default": Communicator(algorithm="ring", verify=True),
      "direct": Communicator(algorithm="ring", verify=True, stage="1", road={kind: Road.DIRECT}),
      "stage1-ring": Communicator(algorithm="ring", verify=True, stage="1", road={kind: Road.STAGED_RING})}
for nb in (1 << 20, 2 << 20, 4 << 20):
    n = nb // 4
    x = np.ones(n, np.float32); out = np.empty(n // 2 if kind == "reduce_scatter" else n, np.float32)
    res = {}
    f = lambda c: getattr(c, kind)(x, out=out)
    for r in range(7):
        for k, c in cs.items():
            for _ in range(5): f(c)
            c.barrier(); t = time.perf_counter()
            for _ in range(50): f(c)
            res.setdefault(k, []).append((time.perf_counter() - t) / 50 * 1e6)
            assert np.all(out == 2)
    if cs["default"].rank == 0:
        print(kind, nb, {k: f"{np.median(v):.1f}" for k, v in res.items()}, cs["default"].road_taken(), cs["direct"].road_taken())
