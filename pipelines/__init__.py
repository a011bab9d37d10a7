"""Apache Beam pipelines: thin wiring of snm_core logic into PTransforms."""

# Before apache_beam (which imports pyarrow): snm_core sets how Arrow allocates.
import snm_core  # noqa: F401
