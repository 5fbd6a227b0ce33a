"""spark-submit entry point: ``spark-submit ... submit/driver.py <glisp command> [args]``.

It runs the same ``glisp`` CLI the embedded mode uses; spark-submit has already configured the
master and resources, which ``glisp_spark.session.get_spark`` respects.
"""

import sys

from glisp_app.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
