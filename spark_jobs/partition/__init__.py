"""Vertex-cut partitioning: AdaDNE, DistributedNE and baselines behind one ``glisp partition`` command.

Each algorithm is one module defining a :class:`~spark_jobs.partition.base.Partitioner`, listed by name in
:mod:`spark_jobs.partition.registry`; ``job.run_partition`` runs the chosen one and publishes assignment,
replicas and metrics.
"""
