"""GLISP's Spark batch jobs: generate, ingest, partition, serialize, reorder.

Every job takes a SparkSession from ``glisp_spark.session`` and a ``glisp_core.config.Config``; the
same code runs embedded (``local[*]``) and under ``spark-submit`` on a cluster.
"""
