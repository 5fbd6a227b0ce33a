"""GLISP's application layer: the ``glisp`` command, the refresh pipeline, promote and report.

It composes the components (Spark jobs, the sampling service, training, inference); nothing below imports it.
"""
