"""One sampling server: the gRPC servicer, its life (warm-up, integrity, drain), hot reload, memory and metrics."""
