import filecmp
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from snm.commands.train import main
from snm_core.text import synthetic


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    return root, synthetic.write_corpus(str(root / "corpus"), num_train=1500, num_dev=150,
                                        num_test=150, seed=5)


def args(corpus, out):
    root, (train, dev, test) = corpus
    return ["--config", "skip5gram", "--train", train, "--heldout", dev, "--test", test,
            "--out", str(out), "--metafeatures", "unlexicalized", "--epochs", "2",
            "--hash_size", "65536", "--num_buckets", "4"]


def ran(printed):
    """The stages ``snm train`` ran, by its lines (a stage's line ends with its seconds)."""
    return re.findall(r"^(vocab|count|join|fit|apply|prune|eval) .* s$", printed, re.MULTILINE)


def all_files(directory):
    return sorted(os.path.relpath(os.path.join(d, f), directory)
                  for d, _, files in os.walk(directory) for f in files)


def test_killed_run_resumes_to_the_same_model(corpus, capsys):
    root, _ = corpus
    assert main(args(corpus, root / "whole")) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == [
        "vocab", "count", "join", "fit", "apply", "eval", "total", "model"]
    assert (root / "whole" / "heldout_perplexity.png").stat().st_size > 1000
    # Each stage records the run's peak RSS so far: the stage where it rises set it.
    state = json.loads((root / "whole" / "stages.json").read_text())
    peaks = [state[name]["peak_rss_mib"] for name in ("count", "join", "fit", "apply", "eval")]
    assert peaks == sorted(peaks) and peaks[0] > 50
    # ... and the largest size of the run directory while it ran: at least what it left.
    def tree_bytes(directory):
        return sum(os.path.getsize(os.path.join(d, f))
                   for d, _, files in os.walk(directory) for f in files)
    assert state["count"]["peak_disk_bytes"] >= tree_bytes(root / "whole" / "count") > 0
    left = tree_bytes(root / "whole") - (root / "whole" / "stages.json").stat().st_size
    assert state["eval"]["peak_disk_bytes"] >= left
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert "peak disk" in total

    # Kill a second run as soon as its count stage is complete (recorded in
    # stages.json once the count's manifest is written), i.e. during join.
    proc = subprocess.Popen([sys.executable, "-m", "snm", "train", *args(corpus, root / "killed")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = root / "killed" / "stages.json"

    def count_done():
        try:
            return "count" in json.loads(state.read_text())
        except (OSError, ValueError):
            return False

    deadline = time.monotonic() + 120
    while not count_done() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert count_done()
    assert not (root / "killed" / "model" / "manifest.json").exists()

    assert main(args(corpus, root / "killed")) == 0
    out = capsys.readouterr().out
    assert "count" not in ran(out) and "apply" in ran(out)
    whole, killed = root / "whole" / "model", root / "killed" / "model"
    assert all_files(whole) == all_files(killed)
    match, mismatch, errors = filecmp.cmpfiles(whole, killed, all_files(whole), shallow=False)
    assert not mismatch and not errors

    # Nothing changed: everything is skipped; new fit options redo fit, apply, eval only.
    assert main(args(corpus, root / "killed")) == 0
    assert capsys.readouterr().out.count("up to date") == 6
    assert main(args(corpus, root / "killed")[:-6] + ["--epochs", "1", "--hash_size", "65536",
                                                      "--num_buckets", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("up to date") == 3 and ran(out) == ["fit", "apply", "eval"]


def test_tagged_needs_tags(corpus):
    from snm_core.io.errors import SnmInputError
    with pytest.raises(SnmInputError, match="--tagged needs tagged sources"):
        main(args(corpus, corpus[0] / "x") + ["--tagged"])


def test_add_to_trains_on_the_sum_of_old_and_new_counts(tmp_path, capsys):
    """Counting part of the text, then the rest with --add_to, gives the model that
    counting all of it at once gives."""
    train, dev, test = synthetic.write_corpus(str(tmp_path / "corpus"), num_train=1200,
                                              num_dev=120, num_test=120, seed=11)
    lines = open(train).read().splitlines(keepends=True)
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("".join(lines[:700]))
    second.write_text("".join(lines[700:]))
    vocab = tmp_path / "vocab.txt"
    from snm_core.text.vocab import Vocabulary
    Vocabulary(sorted({w for line in lines for w in line.split()})).save(str(vocab))

    def run(out, *train_args):
        return main(["--config", "5gram", *train_args, "--heldout", dev, "--test", test,
                     "--out", str(out), "--metafeatures", "unlexicalized", "--epochs", "2",
                     "--hash_size", "65536", "--num_buckets", "4"])

    assert run(tmp_path / "all", "--train", str(first), "--train", str(second),
               "--vocab", str(vocab)) == 0
    assert run(tmp_path / "old", "--train", str(first), "--vocab", str(vocab)) == 0
    assert run(tmp_path / "new", "--train", str(second),
               "--add_to", str(tmp_path / "old" / "count")) == 0
    out = capsys.readouterr().out
    assert "vocab" not in [line.split()[0] for line in out.splitlines()]  # never run
    whole, added = tmp_path / "all" / "model", tmp_path / "new" / "model"
    names = [n for n in all_files(whole) if n.endswith((".parquet", ".npy"))]
    assert names and names == [n for n in all_files(added) if n.endswith((".parquet", ".npy"))]
    match, mismatch, errors = filecmp.cmpfiles(whole, added, names, shallow=False)
    assert not mismatch and not errors
    assert (json.loads((tmp_path / "all" / "eval.json").read_text())
            == json.loads((tmp_path / "new" / "eval.json").read_text()))

    # Re-run: everything current; new old counts would redo the count.
    assert run(tmp_path / "new", "--train", str(second),
               "--add_to", str(tmp_path / "old" / "count")) == 0
    assert capsys.readouterr().out.count("up to date") == 5


def test_a_second_run_on_one_directory_is_refused_until_the_first_is_gone(corpus, tmp_path):
    """A held lock names its holder and leaves the directory alone; a dead holder's
    lock is taken over."""
    from snm_core.io.errors import SnmInputError
    from snm_core.io.runlock import LOCK_NAME, run_lock

    out = tmp_path / "locked"
    with run_lock(str(out), "snm train (the first)"):
        with pytest.raises(SnmInputError, match=r"in use by snm train \(the first\) "
                                                r"\(host .*, pid %d" % os.getpid()):
            main(args(corpus, out))
        assert os.listdir(out) == [LOCK_NAME]  # nothing else written
    assert not (out / LOCK_NAME).exists()

    # A lock left by a process that is gone (a finished child's pid) is taken over.
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    import socket
    (out / LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(),
                                             "pid": int(child.stdout), "started": 0}))
    assert main(args(corpus, out)) == 0
    assert not (out / LOCK_NAME).exists()


def test_thresholds_reach_the_count_and_the_card_and_rerun_the_count(corpus, tmp_path, capsys):
    """--min_feature_count and --min_link_count go to the count (its manifest records
    them), the model card says what they left out, and other thresholds run the count
    and every stage after it again."""
    out = tmp_path / "run"
    thresholds = ["--min_feature_count", "skip=2", "--min_link_count", "2"]
    assert main(args(corpus, out) + thresholds) == 0
    count = json.loads((out / "count" / "manifest.json").read_text())
    assert count["min_feature_count"] and count["min_link_count"]["1-gram"] == 2
    left_out = count["totals"]["below_threshold_occurrences"]
    assert left_out > 0
    assert f"the links of {left_out:,} feature occurrences" in (
        out / "model" / "model_card.md").read_text()
    capsys.readouterr()
    assert main(args(corpus, out) + thresholds[:2]) == 0
    assert ran(capsys.readouterr().out) == ["count", "join", "fit", "apply", "eval"]
