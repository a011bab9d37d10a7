import os
import stat
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


def test_local_stages_use_every_usable_cpu_unless_told():
    """As lmplz does: Beam's own default is one worker."""
    from apache_beam.options.pipeline_options import DirectOptions

    from pipelines import running
    cpus = len(os.sched_getaffinity(0))
    workers = [running.pipeline_options(args).view_as(DirectOptions).direct_num_workers
               for args in ([], ["--direct_running_mode=multi_processing"],
                            ["--direct_num_workers", "1"], ["--direct_num_workers=3"])]
    assert workers == [cpus, cpus, 1, 3]
    assert running.workers_per_process([]) == cpus  # threads sharing the budget
    assert running.workers_per_process(["--direct_running_mode=multi_processing"]) == 1


# --- a newcomer's mistakes, each its own line ------------------------------------------

def _corpus(tmp_path):
    from snm_core.text import synthetic
    return synthetic.write_corpus(str(tmp_path / "corpus"), 200, 40, 40, seed=2)


def test_empty_training_text_is_refused_before_any_stage(tmp_path, capsys):
    train, dev, test = _corpus(tmp_path)
    empty, blank = tmp_path / "empty.txt", tmp_path / "blank.txt"
    empty.write_text("")
    blank.write_text("\n  \n\t\n")
    for command in (["train", "--heldout", dev, "--test", test], ["count", "--min_count", "1"]):
        out = tmp_path / ("out-" + command[0])
        assert main([command[0], "--config", "5gram", "--train", str(empty), "--train",
                     str(blank), "--out", str(out), *command[1:]]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert f"--train {empty}, {blank}: no words (the training text is empty or blank)" \
            in err
        assert not (out / "vocab").exists() and not (out / "count").exists()


def test_a_file_where_a_directory_belongs_and_the_reverse(tmp_path, capsys):
    train, dev, test = _corpus(tmp_path)
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x\n")
    argv = ["train", "--config", "5gram", "--train", train, "--heldout", dev, "--test", test]
    assert main(argv + ["--out", str(a_file)]) == 2
    assert f"--out {a_file}: a file, not a directory" in capsys.readouterr().err
    assert main(["train", "--config", "5gram", "--train", train, "--heldout", str(tmp_path),
                 "--test", test, "--out", str(tmp_path / "run")]) == 2
    assert f"--heldout {tmp_path}: a directory, expected a file" in capsys.readouterr().err
    assert main(["eval", "--model", str(tmp_path), str(tmp_path)]) == 2  # neither a model
    assert main(["count", "--config", "5gram", "--train", train, "--vocab", str(tmp_path),
                 "--out", str(tmp_path / "c")]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_order_is_the_plain_ngram_configuration(tmp_path, capsys):
    from snm_core.text.config import load_config, preset
    assert load_config("5gram").to_text() == preset("5gram").to_text()
    assert load_config("3gram").ngram_order == 3
    assert main(["features", "--config", "2gram", "a b"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "</S>\t[]  [b]"
    train, dev, test = _corpus(tmp_path)
    assert main(["count", "--order", "3", "--train", train, "--min_count", "1",
                 "--out", str(tmp_path / "c")]) == 0
    from snm_core.stages import manifests
    assert manifests.Count.read(str(tmp_path / "c")).feature_types == ["0-gram", "1-gram",
                                                                        "2-gram"]
    capsys.readouterr()
    assert main(["count", "--order", "0", "--train", train, "--min_count", "1",
                 "--out", str(tmp_path / "d")]) == 2
    assert "--order must be between 1 and" in capsys.readouterr().err


def test_each_subcommand_s_usage_names_it(capsys):
    import pytest

    from snm.cli import COMMANDS
    for command in COMMANDS:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert capsys.readouterr().out.startswith(f"usage: snm {command} "), command


def test_outputs_are_created_with_the_user_s_umask(tmp_path):
    from snm_core.io import storage
    old = os.umask(0o022)
    try:
        storage.write_text("x", str(tmp_path / "a.txt"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o644


def test_a_memory_budget_too_small_is_one_line_saying_what_to_give(tmp_path, capsys):
    train, dev, test = _corpus(tmp_path)
    argv = ["train", "--config", "5gram", "--train", train, "--heldout", dev, "--test", test,
            "--out", str(tmp_path / "run"), "--min_count", "1"]
    assert main(argv + ["--memory", "150M"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "count: the memory budget --memory 150M (150.0 MiB) is less than the" in err
    assert "the process 200.0 MiB" in err and "give --memory " in err
    assert not (tmp_path / "run" / "count" / "manifest.json").exists()
    assert main(argv + ["--memory", "lots"]) == 2
    assert "--memory lots: expected a size such as 8G" in capsys.readouterr().err
    # A budget the count fits but not the fit's weights: the fit says so before it starts.
    assert main(argv + ["--memory", "500M", "--hash_size", str(1 << 25)]) == 2
    err = capsys.readouterr().err
    assert "fit: the memory budget --memory 500M" in err and "weights 512.0 MiB" in err
    assert (tmp_path / "run" / "join" / "manifest.json").exists()


def test_the_count_s_buckets_grow_with_the_text_within_the_budget():
    import pytest

    from snm_core.count.budget import DEFAULT_NUM_BUCKETS, MERGE_CHUNK_ROWS, plan_memory
    from snm_core.io.errors import SnmInputError
    from snm_core.io.memory import MemoryBudget
    small, big, huge = (MemoryBudget.parse(size) for size in ("1G", "8G", "200G"))
    assert plan_memory(big, 2, 3_300_000, 5).num_buckets == DEFAULT_NUM_BUCKETS
    plan = plan_memory(big, 2, 2_000_000_000, 5, 250_000)
    assert plan.num_buckets > DEFAULT_NUM_BUCKETS and plan.flush_links == 250_000
    merging = 2 * 2_000_000_000 * 5 * 100 // plan.num_buckets
    assert merging <= big.bytes - 200 * 2 ** 20 - 2 * 70_000_000 - 2 * 250_000 * 45
    assert plan_memory(small, 2, 2_000_000_000, 5).num_buckets > plan.num_buckets
    # A merge reads a bounded chunk of partials, smaller when the budget needs it.
    assert plan.merge_rows == MERGE_CHUNK_ROWS
    tight = plan_memory(small, 2, 2_000_000_000, 5)
    assert 2 * tight.merge_rows * 100 <= small.bytes - 200 * 2 ** 20 - 2 * 70_000_000
    with pytest.raises(SnmInputError, match="give --num_buckets"):
        plan_memory(small, 2, 500_000_000, 5, 250_000, num_buckets=64)
    # However large the budget, a bucket's merge stays the same size as the text grows
    # (a flat peak), and each flush sends a few thousand links a bucket.
    for words in (500_000_000, 1_000_000_000, 2_000_000_000):
        plan = plan_memory(huge, 2, words, 5)
        assert 7_000_000 <= words * 5 / plan.num_buckets <= 8_000_000
        assert 2_000 <= plan.flush_links / plan.num_buckets <= 8_000


def test_a_command_loads_beam_without_its_s3_filesystem():
    """Beam's S3 filesystem (and boto3) stays out of a command's process: the stages use
    pyarrow.fs.  Code that imports it afterwards gets it as usual; a command without
    Beam (eval) does not load Beam at all."""
    code = ("import contextlib, io, sys\n"
            "from snm.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), "
            "contextlib.suppress(SystemExit):\n"
            "    main([sys.argv[1], '--help'])\n"
            "print('apache_beam' in sys.modules, 'boto3' in sys.modules)\n"
            "if 'apache_beam' in sys.modules:\n"
            "    import apache_beam.io.aws.s3filesystem\n"
            "    from apache_beam.io.filesystems import FileSystems\n"
            "    print(type(FileSystems.get_filesystem('s3://bucket/key')).__name__)\n")
    runs = {command: subprocess.run([sys.executable, "-c", code, command], capture_output=True,
                                    text=True, check=True).stdout.split("\n")
            for command in ("count", "eval")}
    assert runs["count"][:2] == ["True False", "S3FileSystem"]
    assert runs["eval"][0] == "False False"


def test_version(capsys):
    from snm_core import __version__
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"snm {__version__}\n"


def test_an_unbuilt_source_tree_in_the_working_directory_is_named(tmp_path, monkeypatch,
                                                                   capsys):
    """A clone whose C libraries are not built, in the directory a multi-processing stage
    starts its workers in: they would import it ahead of the installed package.  One line
    naming the tree and what to do, before any worker starts."""
    clone = tmp_path / "clone"
    (clone / "snm_core" / "fit").mkdir(parents=True)
    for name in ("setup.py", "snm_core/__init__.py", "snm_core/fit/__init__.py"):
        (clone / name).write_text("")
    text = tmp_path / "t.txt"
    text.write_text("a b c\nb c d\n")
    monkeypatch.chdir(clone)
    args = ["count", "--config", "5gram", "--train", str(text), "--min_count", "1", "--out",
            str(tmp_path / "out"), "--direct_running_mode", "multi_processing"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "snm_core._loops is not built" in err
    assert f"source tree {clone / 'snm_core'}" in err and f"pip install -e {clone}" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_stage_run_again_removes_what_a_killed_run_left_unfinished(tmp_path):
    """A writer killed outright leaves its temporary file; the stage's next run removes
    it, so the directory holds the stage's files only."""
    args = ["train"] + _train_args(tmp_path) + ["--epochs", "1", "--variants", "unlexicalized"]
    assert main(args) == 0
    join = tmp_path / "run" / "join"
    left = join / ".events-00000-of-00064.parquet.0123456789ab.tmp"
    left.write_bytes(b"half a file")
    (join / "manifest.json").unlink()  # as if the run had been killed in the join
    assert main(args) == 0
    assert not left.exists() and (join / "manifest.json").exists()
