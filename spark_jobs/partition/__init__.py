"""Vertex-cut partitioning: AdaDNE, DistributedNE and baselines behind one ``glisp partition`` command.

Each algorithm is one module registering a :class:`~spark_jobs.partition.base.Partitioner`;
``job.run_partition`` runs the chosen one and publishes assignment, replicas and metrics.
"""
