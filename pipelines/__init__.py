"""Apache Beam pipelines: thin wiring of snm_core logic into PTransforms."""
