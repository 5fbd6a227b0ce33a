"""glisp serialize and glisp reorder: binary GLISP partitions, Parquet copies, inference orders."""
