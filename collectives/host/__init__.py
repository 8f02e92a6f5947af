"""The host roads over point-to-point messages: the ring's pure schedule
(schedule.py) and its executor (ring.py), the two-rank exchange (pair.py) and
small collectives riding in the header exchange (small.py)."""
