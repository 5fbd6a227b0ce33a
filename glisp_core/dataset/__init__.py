"""The dataset contract: where each stage's output lives, the manifest, and atomic publishing."""

from glisp_core.dataset.layout import DatasetVersion, resolve_dataset
from glisp_core.dataset.manifest import Manifest, StageRecord
from glisp_core.dataset.publish import StagePublisher

__all__ = ["DatasetVersion", "Manifest", "StagePublisher", "StageRecord", "resolve_dataset"]
