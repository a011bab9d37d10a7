"""End to end on the real kernel corpus, against figures computed independently
(../shared/benchmarks/reference.md): the unadjusted dev perplexity and the
number of unlexicalized meta-feature weights."""

import os

import numpy as np
import pytest

from snm.commands import count as count_cmd
from snm.commands import join as join_cmd
from snm_core.fit.metafeatures import MetaFeatureSpec
from snm_core.fit.heldout import load_join
from snm_core.fit.trainer import perplexity


@pytest.fixture(scope="module")
def kernel_join(corpora, tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel")
    count_cmd.main(["--config", "5gram",
                     "--train", os.path.join(corpora, "kernel", "train.txt.gz"),
                     "--vocab", os.path.join(corpora, "kernel", "vocab.txt"),
                     "--out", str(root / "counts"), "--direct_running_mode=multi_threading",
                     "--direct_num_workers=2"])
    join_cmd.main(["--count", str(root / "counts"), "--heldout",
                    os.path.join(corpora, "kernel", "dev.txt"), "--out", str(root / "heldout")])
    return str(root / "heldout")


@pytest.mark.parametrize("diversity, weights", [(False, 366), (True, 638)])
def test_kernel_dev_unadjusted_perplexity_and_weight_count(kernel_join, diversity, weights):
    prob, _ = load_join(kernel_join, MetaFeatureSpec("unlexicalized", 1 << 22, diversity))
    assert prob.num_events == 52377 and prob.num_unseen_targets == 0
    ppl = perplexity(prob.log_likelihood(np.zeros(prob.num_params)), prob.num_events)
    assert ppl == pytest.approx(88.09196, rel=1e-6)
    assert prob.num_params == weights
