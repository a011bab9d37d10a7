"""Applying the adjustment (the logic of ``snm apply``).

:func:`adjust_bucket` turns one count bucket into the model's values: M_fw =
c(w|f) exp(A(f, w)) for every link and M_f* = sum_w M_fw for every feature.  A
bucket holds whole rows, so M_f* needs no shuffle.

Input: a count bucket's ``features-*`` and ``links-*`` tables (links grouped by
feature, in the features' order).  Output: the values the model keeps beside
those files, row for row (:mod:`snm_core.io.model_files`).
"""

import numpy as np

from snm_core.fit import kernels
from snm_core.io.errors import SnmInputError


def adjust_bucket(features, links, theta, spec, type_fingerprint, num_feature_types):
    """The model's values of one count bucket.

    Parameters
    ----------
    features, links : pyarrow.Table, count schemas (the features' ``words`` not needed),
        one bucket (links grouped by feature)
    theta : float array (spec.hash_size,)
    spec : MetaFeatureSpec
    type_fingerprint : uint64 array indexed by type id (``FeatureExtractor.type_salts``)
    num_feature_types : int

    Returns
    -------
    m : float32 array, M_fw of each link
    m_star : float64 array, M_f* of each feature
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
    return kernels.adjust_links(
        spec, key, type_fingerprint[type_id], feature_count, diversity, ptr,
        links["word"].to_numpy(), links["count"].to_numpy(), links["continuation"].to_numpy(),
        theta)
