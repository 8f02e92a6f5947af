"""The direct roads' repeated calls as programs run in C (csrc/fastpath.c):
program.py runs them, writer.py writes them."""
