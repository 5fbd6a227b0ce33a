"""The phases of one ingest run, each a function over explicit inputs returning what the next phases need.

``job.run_ingest`` runs them in order (see its docstring): ``read_check`` -> ``decide`` -> ``vertex_checks``
-> ``idmap`` -> ``map_edges`` -> ``write_edges``; ``context.IngestContext`` is what they all read.
"""
