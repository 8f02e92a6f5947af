"""Moving device (cupy) buffers between ranks, behind the host transport's interface.

Three ways, one chosen per communicator (the same on every rank):

- ``cuda_aware``: the MPI library reads and writes device memory itself.
  Used only when the library says so (``MPIX_Query_cuda_support``, asked at
  run time, never assumed).
- ``ipc``: ranks on one node (several may share one GPU). The receiver
  copies straight from the sender's buffer, device to device: the sender
  posts a small control message (the CUDA IPC handle of its buffer's
  allocation, the offset, the length) and keeps the buffer until the
  receiver acknowledges. Ordering is on the GPU, not the host (``stream_waits``,
  the default): the sender records an interprocess event after the buffer's
  producer and sends the control message at once; the receiver's stream waits
  on that event, copies, records its own event and acks with it; the sender's
  stream waits on that before anything later touches the buffer. So no
  message host-polls a GPU event (two host polls a message cost ~220 us a
  chunk on an H200). RINGZERO_IPC_STREAM_WAITS=0 restores
  the host polls. The sender makes an allocation's handle once
  (cached by the allocation's buffer id); each receiver opens it once and
  keeps the mapping (cupy's pool reuses its allocations), at most
  backend.MAX_CACHED of them, closing the least recently used after its last
  copy, and closing a peer's old mapping when that peer sends a new handle
  for the same address (it freed the allocation). So after the first few
  messages only 96-byte control messages cross MPI.
- ``staged``: copies through pinned host buffers on two copy streams, one
  per direction (uploads never queue behind downloads). Every chunk's
  device-to-host copy is queued at isend time and its MPI send posted as
  soon as that copy lands, so the copy of chunk k+1 runs while chunk k is on
  the wire (the ring posts many chunks at once); receives land in pinned
  memory and go up on the other stream.

Which one: ``choose_mode`` (detect.py), one allgather over the bootstrap with
its deadline, so a rank whose peer passed a host array where it passed a
device array gets an error instead of hanging.

Ordering with the kernels. Kernels run on the device's default stream
(kernels/cuda_kernels.py). A send records an event there first, so it sees
the reduce that produced its data; a receive records one too, so it never
overwrites a buffer a queued kernel still reads. A receive completes once
its data is on the device, or (IPC with stream waits) once its copy is
queued on the default stream, so a kernel launched afterwards there reads it.

A message may be shorter than its receive buffer, as in MPI. IPC copies
only the bytes sent; staging and CUDA-aware MPI may also write the bytes past
a short message (every receive of device data in the ring is exact).

Messages between one pair of ranks with one tag stay in post order, as the
algorithms expect: each (direction, peer, tag) is a FIFO channel, and an
operation puts its MPI message on the wire only after the ones before it.

The GPU calls sit behind a small backend (:class:`CupyBackend`) so the
protocols themselves run in CPU tests over the in-process transport, with
a fake backend (tests/test_cuda_transport.py). Files: detect.py (mode),
backend.py (cupy calls), protocols.py (one send/receive per mode),
channels.py (DeviceTransport, the FIFO channels), profile.py (where a message's time goes).
"""
from .backend import CupyBackend
from .channels import DeviceTransport, make_device_transport
from .detect import MODES, choose_mode, cuda_aware_mpi
from .profile import Profile
from .protocols import ACK_TAG_OFFSET

__all__ = ["ACK_TAG_OFFSET", "MODES", "CupyBackend", "DeviceTransport", "Profile", "choose_mode", "cuda_aware_mpi",
           "make_device_transport"]
