"""One module per store backend, each a :class:`glisp_core.storage.backend.Backend`; the registry
(:mod:`glisp_core.storage.registry`) picks one by the URI's scheme (:mod:`glisp_core.storage.schemes`)."""
