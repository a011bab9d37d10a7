import subprocess
import sys

from snm.cli import main


def test_features_prints_the_paper_example(capsys):
    assert main(["features", "--config", "skip10gram",
                 "The quick brown fox jumps over the lazy dog"]) == 0
    lines = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    assert "[brown skip-* over the lazy]" in lines["dog"].split("  ")
    assert lines["The"].split("  ") == ["[]", "[<S>]"]


def test_features_summary_of_a_file(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text("a b c\n\nb c\n")
    assert main(["features", "--config", "5gram", "--input", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 sentences, 5 words, 7 events" in out
    assert "0-gram" in out


def test_bad_config_exits_2_with_the_reason(tmp_path):
    bad = tmp_path / "bad.cfg"
    bad.write_text("ngram_extractor { max_n: 2 min_m: 1 }\n")
    proc = subprocess.run([sys.executable, "-m", "snm", "features", "--config", str(bad), "x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "bad.cfg, line 1: unknown field 'min_m'" in proc.stderr


def test_unknown_command_exits_2(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_module_entry_runs_a_command_and_exits_with_its_status(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b c\n")
    proc = subprocess.run([sys.executable, "-m", "snm", "features", "--config", "5gram",
                           "--input", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "1 sentences, 3 words, 4 events" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "snm", "frobnicate"], capture_output=True,
                          text=True)
    assert proc.returncode == 2


def _train_args(tmp_path):
    from snm_core.text import synthetic
    train, dev, test = synthetic.write_corpus(str(tmp_path / "c"), 50, 10, 10, seed=1)
    return ["--config", "5gram", "--train", train, "--heldout", dev, "--test", test,
            "--out", str(tmp_path / "run")]


def test_a_mistyped_option_is_an_error_naming_the_closest(tmp_path, capsys):
    """Neither snm nor Beam knows it: exit 2 before any stage runs, one line naming the
    closest option of either (snm's own, or a Beam pipeline option)."""
    args = _train_args(tmp_path)
    for typo, meant in (("--min_cout", "--min_count"), ("--direct_num_workrs",
                                                         "--direct_num_workers")):
        assert main(["train"] + args + [typo, "2"]) == 2
        err = capsys.readouterr().err
        assert err == f"snm train: error: unknown option {typo}; did you mean {meant}?\n"
    assert main(["count", "--config", "5gram", "--train", args[3], "--min_count", "1",
                 "--out", str(tmp_path / "c2"), "--runnr", "dask"]) == 2
    assert "did you mean --runner?" in capsys.readouterr().err
    assert not (tmp_path / "run" / "vocab").exists()


def test_runner_short_names_and_options(tmp_path, capsys):
    """``--runner dask`` is Beam's DaskRunner, ``--dask_address`` its scheduler option;
    without an address the stage says what to give; real Beam options pass."""
    from pipelines import runners
    assert runners.normalize(["--runner", "Dask", "--dask_address=h:1", "--x"]) == [
        f"--runner={runners.DASK_RUNNER}", "--dask_client_address=h:1", "--x"]
    runners.check_options(["--runner=dask", "--dask_address", "h:1",
                           "--direct_num_workers", "2", "--experiments=a"])
    assert main(["count", "--config", "5gram", "--train", _train_args(tmp_path)[3],
                 "--min_count", "1", "--out", str(tmp_path / "c"), "--runner", "dask"]) == 2
    assert "--runner dask needs --dask_address HOST:PORT" in capsys.readouterr().err
