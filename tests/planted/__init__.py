"""Planted bugs: engines with one realistic batching bug each, which the suite must catch.

Each class names the report label that must catch it in `caught_by` (and, for bugs that
surface as a crash, the check to run it under in `check`). catalog.ALL_PLANTED lists them.
"""
