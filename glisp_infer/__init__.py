"""Layerwise GNN inference to Zarr through the two-level (static disk + dynamic memory) cache.

Not built yet: it reads the serialized partitions (glisp_core.partition_format) and the reorder
tables (PDS) that the batch stages publish.
"""
