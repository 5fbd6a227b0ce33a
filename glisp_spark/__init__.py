"""The Spark runtime under every Spark job: the one SparkSession factory, the task runner, the worker-heap
freeze and the stage timer."""
