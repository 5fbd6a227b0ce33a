"""The client of a sampling cluster: :class:`SamplingClient` (Gather over gRPC streams, Apply, loader)."""

from glisp_serving.client.sampling_client import SamplingClient, SamplingError

__all__ = ["SamplingClient", "SamplingError"]
