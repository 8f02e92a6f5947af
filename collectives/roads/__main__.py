"""``python -m collectives.roads``: the road table, with where each threshold was measured."""
from . import table

print(table())
