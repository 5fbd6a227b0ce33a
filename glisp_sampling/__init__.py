"""GLISP's sampling core, with no RPC: Gather kernels over one partition, Apply, k-hop sampling, routing.

The sampling service (glisp_serving) runs it behind gRPC; training and inference run it in process.
"""
