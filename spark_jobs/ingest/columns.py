"""Names of the internal columns every ingest step shares: the reading, the row rules, the scans, the reports.

Why one module: the readers add the row's file and position, the row rules add its reason, and the scans and
reports read all of them; each name is defined once, below every module that uses it.
"""

from __future__ import annotations

CORRUPT = "_corrupt"  # raw text of a CSV row with the wrong number of fields
FID = "_fid"  # index of the row's file in the run's file list
ROWPOS = "_rowpos"  # unique, deterministic row position (for "keep the first" policies)
REASON = "_reason"  # the first row rule the row breaks (null: a good row)
RCOL = "_rcol"  # the user's column that rule is about, for messages
SI = "_si"  # index of the configured source
