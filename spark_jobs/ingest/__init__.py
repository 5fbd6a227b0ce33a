"""Ingest: raw edge/vertex tables (CSV, TSV, Parquet) -> one canonical, atomically published dataset version."""
