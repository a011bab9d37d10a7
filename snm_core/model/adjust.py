"""Applying the adjustment (the logic of ``snm apply``).

:func:`adjust_bucket` turns one count bucket into model rows: M_fw = c(w|f)
exp(A(f, w)) for every link and M_f* = sum_w M_fw for every feature.  A bucket
holds whole rows, so M_f* needs no shuffle.

Input: a count bucket's ``features-*`` and ``links-*`` tables (links grouped by
feature, in the features' order).  Output: the model's ``matrix-*`` and
``features-*`` tables of that bucket (:mod:`snm_core.io.tables`).
"""

import numpy as np
import pyarrow as pa

from snm_core.fit import kernels
from snm_core.io import tables
from snm_core.io.errors import SnmInputError


def adjust_bucket(features, links, theta, spec, type_fingerprint, num_feature_types):
    """Model rows of one count bucket.

    Parameters
    ----------
    features, links : pyarrow.Table, count schemas, one bucket (links grouped by feature)
    theta : float array (spec.hash_size,)
    spec : MetaFeatureSpec
    type_fingerprint : uint64 array indexed by type id (``FeatureExtractor.type_salts``)
    num_feature_types : int

    Returns
    -------
    matrix : pyarrow.Table, schema :data:`snm_core.io.tables.MATRIX`
    model_features : pyarrow.Table, schema :data:`snm_core.io.tables.MODEL_FEATURES`
    """
    key = features["feature"].to_numpy()
    type_id = (features["tag"].to_numpy().astype(np.int64) * num_feature_types
               + features["type"].to_numpy())
    feature_count = features["count"].to_numpy()
    diversity = features["diversity"].to_numpy()
    ptr = np.r_[0, np.cumsum(diversity)]
    if ptr[-1] != links.num_rows:
        raise SnmInputError("count bucket files disagree: diversities do not sum to the number "
                            "of links; re-run snm count")
    m, m_star = kernels.adjust_links(
        spec, key, type_fingerprint[type_id], feature_count, diversity, ptr,
        links["word"].to_numpy(), links["count"].to_numpy(), links["continuation"].to_numpy(),
        theta)
    matrix = pa.table({"feature": links["feature"], "word": links["word"],
                       "count": links["count"], "m": m}, schema=tables.MATRIX)
    return matrix, features.append_column("m_star", pa.array(m_star))
