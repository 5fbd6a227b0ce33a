"""Shared test and benchmark helpers: synthetic graphs written as datasets, partitions, statistics, soak load.

Both ``tests/`` and ``bench/`` import it; neither imports the other.
"""
