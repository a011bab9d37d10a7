"""Fixtures several test folders share.

The model fixtures are built once a session by the real stages
(:func:`support.models.build_model`) and are read-only: a test that changes a
model works on a copy of its directory.
"""

import os

import pytest

# The shared corpora sit beside the checkout (../shared); SNM_SHARED overrides.
_SHARED = os.environ.get("SNM_SHARED") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                        "shared")
CORPORA = os.path.abspath(os.path.join(_SHARED, "corpora"))
CORPORA = CORPORA if os.path.isdir(CORPORA) else ""


@pytest.fixture(scope="session")
def corpora():
    """Path of ../shared/corpora; tests that need real text skip where it is absent."""
    if not CORPORA:
        pytest.skip("../shared/corpora is not present (set SNM_SHARED to its parent)")
    return CORPORA


@pytest.fixture(scope="session")
def ngram_model(tmp_path_factory):
    """``(model dir, test lines)``: a pooled 5-gram model (unlexicalized meta-features)."""
    from support.models import build_model  # the stages import Beam: only when asked for
    return build_model(tmp_path_factory.mktemp("ngram"), "5gram", tagged=False)


@pytest.fixture(scope="session")
def tagged_ngram_model(tmp_path_factory):
    """``(model dir, test lines)``: a 5-gram model of two tagged sources."""
    from support.models import build_model
    return build_model(tmp_path_factory.mktemp("tagged-ngram"), "5gram", tagged=True)


@pytest.fixture(scope="session")
def tagged_skip_model(tmp_path_factory):
    """``(model dir, test lines)``: :data:`support.models.SKIP` on two tagged sources,
    lexicalized meta-features."""
    from support.models import SKIP, build_model
    return build_model(tmp_path_factory.mktemp("tagged-skip"), SKIP, tagged=True,
                       variant="lexicalized")


@pytest.fixture(scope="session")
def joined(tmp_path_factory):
    """The join's and the fit's tests' input, ``(root, held-out lines)``: ``root/counts``
    (skip5gram, two tagged sources) and ``root/heldout`` (its join), read-only."""
    from support.counts import write_lines  # the commands import Beam: only when asked for

    from snm.commands import count as count_cmd
    from snm.commands import join as join_cmd
    from snm_core.text import synthetic
    root = tmp_path_factory.mktemp("join")
    train = synthetic.generate(300, seed=11)
    write_lines(str(root / "a.txt"), train[:150])
    write_lines(str(root / "b.txt"), train[150:])
    heldout = synthetic.generate(40, seed=12) + ["", "begin1 zebra unknown words"]
    write_lines(str(root / "dev.txt"), heldout)
    count_cmd.main(["--config", "skip5gram", "--train", f"a={root}/a.txt",
                     "--train", f"b={root}/b.txt", "--min_count", "2", "--out",
                     str(root / "counts"), "--num_buckets", "3"])
    join_cmd.main(["--count", str(root / "counts"), "--heldout", str(root / "dev.txt"),
                    "--out", str(root / "heldout")])
    return root, heldout


S3_BUCKET = "snm-test"


#: The request log of the session's S3 server (:func:`s3_log`).
_S3_LOG = []


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """``s3://snm-test``: a bucket on a moto S3 server started for these tests, which logs
    every request it answers (``support/s3server.py``; :func:`s3_log`).

    One server a session: ``snm_core.io.storage`` keeps one S3 filesystem per bucket for
    the process, made with the endpoint it first saw, so a second server on another port
    would not be reached.
    """
    from support import s3server
    log = str(tmp_path_factory.mktemp("moto") / "requests.tsv")
    with s3server.running(log, bucket=S3_BUCKET) as env:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        _S3_LOG.append(log)
        try:
            yield f"s3://{S3_BUCKET}"
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture
def s3_log(s3):
    """``(s3://snm-test, the server's request log)``."""
    return s3, _S3_LOG[-1]


@pytest.fixture(scope="session")
def loglinear_run(tmp_path_factory):
    """``snm train --family loglinear`` (wt2, order 4) on a synthetic corpus: its inputs,
    ``out`` and ``model`` (the loglinear/ directory)."""
    from snm.commands.train import main as train_main
    from snm_core.text import synthetic

    root = tmp_path_factory.mktemp("loglinear")
    train, dev, test = synthetic.write_corpus(str(root / "corpus"), num_train=800, num_dev=100,
                                              num_test=100, seed=5)
    out = root / "run"
    assert train_main(["--family", "loglinear", "--penalty", "wt2", "--alpha", "0.8",
                       "--config", "4gram",
                       "--train", train, "--heldout", dev, "--test", test, "--out", str(out),
                       "--lam", "1e-5,1e-4", "--epochs", "4", "--num_buckets", "4"]) == 0
    return {"train": train, "dev": dev, "test": test, "out": out, "model": out / "loglinear"}
