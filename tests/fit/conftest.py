"""The count and join directories that the join's and the fit's tests read."""

import pytest
from support.counts import write_lines

from snm.commands import count as count_cmd
from snm.commands import join as join_cmd
from snm_core.text import synthetic


@pytest.fixture(scope="session")
def joined(tmp_path_factory):
    """``(root, held-out lines)``: ``root/counts`` (skip5gram, two tagged sources) and
    ``root/heldout`` (its join), read-only."""
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
