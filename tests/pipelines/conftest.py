"""The small corpus and the reference ``snm train`` run that the runner, launcher and
fault tests compare their runs with (read-only: built once a session)."""

import pytest
from support.runs import train_argv

from snm.commands import train as train_cmd
from snm_core.text import synthetic


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """``{"root", "train", "dev", "test"}``: the synthetic corpus of the runs."""
    root = tmp_path_factory.mktemp("launch-corpus")
    train, dev, test = synthetic.write_corpus(str(root), 600, 80, 80, seed=4)
    return {"root": root, "train": train, "dev": dev, "test": test}


@pytest.fixture(scope="session")
def reference_run(corpus, tmp_path_factory):
    """``snm train`` on the default runner (FnApiRunner, in process)."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert train_cmd.main(train_argv(corpus, out)) == 0
    return out
