import numpy as np
import pytest

from snm_core.fit import metafeatures as mf
from snm_core.io.errors import SnmInputError


def test_count_buckets_floor_ceil_and_exact_powers_of_two():
    buckets, weights = mf.count_buckets(np.array([1, 2, 3, 6, 1024, 1025]))
    assert buckets.tolist() == [[0, 0], [1, 1], [1, 2], [2, 3], [10, 10], [10, 11]]
    assert np.allclose(weights.sum(axis=1), 1.0)
    # At an exact power of two: one bucket, weight 1 (the pseudo-code would give 0 and 0).
    assert weights[[0, 1, 4]].tolist() == [[1.0, 0.0]] * 3
    level = np.log2(6)
    assert np.allclose(weights[3], [3 - level, level - 2])
    with pytest.raises(ValueError):
        mf.count_buckets(np.array([0]))


def test_each_kind_has_its_own_namespace():
    fc = mf.Group.elementary("feature_count", np.array([3]))
    lc = mf.Group.elementary("link_count", np.array([3]))
    dv = mf.Group.elementary("diversity", np.array([3]))
    assert len({fc.hashes[0, 0], lc.hashes[0, 0], dv.hashes[0, 0]}) == 3


def test_conjunction_weights_multiply_and_order_matters():
    a = mf.Group.elementary("link_count", np.array([[1, 2]]), np.array([[0.25, 0.75]]))
    b = mf.Group.elementary("type", np.array([7]))
    c = mf.Group.elementary("feature_count", np.array([[3, 4]]), np.array([[0.5, 0.5]]))
    ab = a.conjoin(b)
    assert ab.name == "link_count&type" and ab.weights.tolist() == [[0.25, 0.75]]
    ac = a.conjoin(c)
    assert ac.weights.tolist() == [[0.125, 0.125, 0.375, 0.375]]
    assert len(set(ac.hashes[0].tolist())) == 4
    assert b.conjoin(a).hashes[0, 0] != ab.hashes[0, 0]


def names(variant, diversity=False):
    spec = mf.MetaFeatureSpec(variant, 1 << 10, diversity)
    rows = mf.feature_groups(spec, np.array([5], np.uint64), np.array([9], np.uint64),
                             np.array([6]), np.array([3]))
    links = mf.link_groups(spec, rows, np.array([0]), np.array([4]), np.array([2]))
    return [g.name for g in rows], [g.name for g in links]


def test_variants_follow_appendix_c():
    rows, links = names("lexicalized")
    assert rows == ["feature", "type", "feature_count"]
    assert links == ["target", "target&feature", "target&type", "target&feature_count",
                     "link_count", "link_count&feature", "link_count&type",
                     "link_count&feature_count", "link_count&target",
                     "link_count&target&feature", "link_count&target&type",
                     "link_count&target&feature_count"]
    rows, links = names("unlexicalized", diversity=True)
    assert rows == ["type", "feature_count", "diversity"]
    assert links == ["link_count", "link_count&type", "link_count&feature_count",
                     "link_count&diversity"]
    rows, links = names("feature-only")
    assert rows == ["feature", "type", "feature_count"] and links == []


def test_stack_maps_into_the_table():
    spec = mf.MetaFeatureSpec("unlexicalized", 97)
    rows = mf.feature_groups(spec, np.arange(3, dtype=np.uint64), np.arange(3, dtype=np.uint64),
                             np.array([1, 5, 9]), np.array([1, 1, 1]))
    index, weight = mf.stack(rows, spec.hash_size, 3)
    assert index.shape == weight.shape == (3, 3)
    assert index.min() >= 0 and index.max() < 97


def test_bad_spec_is_rejected():
    with pytest.raises(SnmInputError, match="unknown meta-feature variant"):
        mf.MetaFeatureSpec("lexical")
