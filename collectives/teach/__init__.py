"""Tools that show how the bytes move: simulated ranks (simulate.py), the
tracer and its Chrome files (trace.py, trace_chrome.py), and
``python -m collectives.teach.explain`` (explain*.py, svg.py)."""
