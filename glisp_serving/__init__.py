"""GLISP sampling service: one gRPC server per serialized partition and a Gather-Apply client."""
