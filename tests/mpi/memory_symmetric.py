"""Communicator.memory_bytes() counts the symmetric heap's own windows, not the caller's arrays
(issue 11 defect 10: the memory report must see what the communicator holds). Prints one JSON line per rank."""
import json

import numpy as np

from collectives import Communicator

comm = Communicator(timeout=60)
before = comm.memory_bytes()
x = comm.alloc(40000, np.float32)   # 160 KB the caller owns: not the communicator's
x[:] = comm.rank + 1
after_alloc = comm.memory_bytes()
out = np.empty_like(x)             # a private out: the direct all-reduce reduces into heap scratch
comm.all_reduce(x, out=out)
after_call = comm.memory_bytes()
heap = comm.symmetric.heap
own = sum(w.nbytes for w in heap.windows if w is not None) - x.nbytes
print(json.dumps({"rank": comm.rank, "before": before, "after_alloc": after_alloc, "after_call": after_call,
                  "own": own, "ok": bool(np.all(out == sum(range(1, comm.size + 1))))}))
comm.close()
