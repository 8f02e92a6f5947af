"""The safety header: its fields (header.py), the agreement every call makes
before a byte is received (agree.py), and, after a timeout, who never arrived
(census.py)."""
