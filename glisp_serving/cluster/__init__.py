"""A cluster of sampling servers: the cluster file, the ``serve-cluster`` supervisor, cluster-wide reload, and
a serve-cluster started as a child process."""
