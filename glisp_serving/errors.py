"""The errors a client of the sampling service raises."""

from __future__ import annotations

import grpc

from glisp_core.errors import GlispError


class SamplingError(GlispError):
    """An RPC failed; ``code`` is the grpc.StatusCode (INVALID_ARGUMENT for a bad request)."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        self.code = code
        super().__init__(message)
