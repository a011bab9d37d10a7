"""Apache Beam pipelines: thin wiring of snm_core logic into PTransforms."""

import sys

# Before apache_beam (which imports pyarrow): snm_core sets how Arrow allocates.
import snm_core  # noqa: F401

# Beam imports every filesystem it has at start-up, S3's with boto3 where that is
# installed: a sixth of a second a process.  The stages read and write through
# pyarrow.fs (snm_core.io.storage), never Beam's filesystems, so Beam's first import
# skips S3's (it skips a filesystem whose import fails); anything that imports it
# afterwards gets it as usual.
if "apache_beam" not in sys.modules:
    sys.modules["apache_beam.io.aws.s3filesystem"] = None
    try:
        import apache_beam  # noqa: F401
    finally:
        del sys.modules["apache_beam.io.aws.s3filesystem"]
