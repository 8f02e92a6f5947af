"""Other libraries' collectives behind the Communicator's API (the "mpi" and
"nccl" algorithms): MPI's own (mpi.py) and NCCL's (nccl.py)."""
