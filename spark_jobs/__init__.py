"""GLISP's Spark batch jobs: generate, ingest, partition, serialize, reorder.

Every job takes a SparkSession from ``spark_jobs.session`` and a ``glisp_core.config.Config``; the
same code runs embedded (``local[*]``) and under ``spark-submit`` on a cluster.
"""
