"""Training through the sampling service: ``glisp train`` and ``glisp link-split`` (a client of glisp_serving)."""
