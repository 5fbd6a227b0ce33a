"""Layerwise GNN inference to Zarr through the two-level (static disk + dynamic memory) cache.

``glisp infer`` (:mod:`glisp_infer.job`, the Spark driver) runs a trained model (``train/<run>``) one layer
at a time over every vertex: one Spark task per partition per layer (:mod:`glisp_infer.task`) samples its
vertices' neighbours with the sampling core in process (:mod:`glisp_sampling`, no RPC), reads the previous
layer's rows through the cache (:mod:`glisp_infer.cache`, filled by the halo exchange of
:mod:`glisp_infer.halo`) and writes its own chunks of the layer's Zarr array (:mod:`glisp_infer.store`).
It reads the serialized partitions (``glisp_core.partition_format``) and the reorder table (PDS by default)
that the batch stages publish, and publishes ``infer/<run>/`` with embeddings, predictions or link scores
by original id (:mod:`glisp_infer.outputs`, read back with :mod:`glisp_infer.read`). See docs/inference.md.
"""
