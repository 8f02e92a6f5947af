"""``python -m collectives.tuning``: every setting, its value now, where it came from and was measured."""
from . import main

main()
