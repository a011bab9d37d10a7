"""What a user relies on to trust a run's files and to point commands at them.

* Every manifest records the xxh3_64 checksum of each file it lists, and
  ``snm validate`` finds a file overwritten in place (same size, headers intact)
  and names the stage that wrote it; ``--quick`` checks sizes and headers only.
* ``--model`` takes a run directory (its final model) and a scoring directory
  (the commands that score), and says plainly what it cannot take.
* An ``--out`` that holds another command's finished output is refused unless
  ``--force``.

One small ``snm train`` run and a scoring directory of its model (``snm compact
--out``) serve every test; a test that changes them works on a copy.  Oracles:
the ``xxhash`` package itself for checksums, the same command given the model
directory explicitly for ``--model RUN``, and bytes compared before and after a
refused command.
"""

import json
import os
import re
import shutil

import pyarrow.parquet as pq
import pytest
import xxhash

from snm import chain, cli
from snm_core.io import tables
from snm_core.stages import manifests
from snm_core.text import synthetic

HASH_SIZE = 1024
BUCKETS = 2
#: Every command that takes --model.
MODEL_COMMANDS = ("eval", "score", "query", "rescore", "export-arpa", "prune", "compact",
                  "sample")
#: Those of them that read the model's tables, which a scoring directory does not hold.
TABLE_COMMANDS = ("export-arpa", "prune", "compact", "sample")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``{"corpus": (train, dev, test), "run": DIR, "shipped": DIR, "nbest": FILE}``: a
    small run and a trie scoring directory of its model."""
    root = tmp_path_factory.mktemp("integrity")
    corpus = synthetic.write_corpus(str(root / "corpus"), num_train=300, num_dev=60,
                                    num_test=30, seed=5)
    out = root / "run"
    assert cli.main(run_args({"corpus": corpus}, out)) == 0
    shipped = root / "shipped"
    assert cli.main(["compact", "--model", str(out / "model"), "--layout", "trie",
                     "--out", str(shipped)]) == 0
    sentences = open(corpus[2], encoding="utf-8").read().splitlines()[:3]
    nbest = root / "nbest.txt"
    nbest.write_text("".join(f"u{i // 2}\t-{i}.5\t{s}\n" for i, s in enumerate(sentences)))
    return {"corpus": corpus, "run": out, "shipped": shipped, "nbest": str(nbest)}


def one_error(capsys, args, status=2):
    """Run ``snm ARGS`` expecting ``status``; its one stderr line."""
    capsys.readouterr()
    assert cli.main(args) == status
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def copy_run(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run["run"], copy)
    return copy


# --- checksums ----------------------------------------------------------------------------

def stage_directories(run):
    out = run["run"]
    return [out / name for name in ("vocab", "count", "join", "fit", "model")] + [
        out / "model" / "compact", run["shipped"], run["shipped"] / "compact"]


def test_every_manifest_records_the_checksum_of_each_file_it_lists(run):
    for directory in stage_directories(run):
        manifest = json.loads((directory / tables.MANIFEST).read_text())
        assert manifest["checksums"]["algorithm"] == "xxh3_64"
        recorded = manifest["checksums"]["files"]
        assert sorted(recorded) == sorted(manifest["files"]), directory
        for name in manifest["files"]:
            expected = xxhash.xxh3_64((directory / name).read_bytes()).hexdigest()
            assert recorded[name] == expected, directory / name


def overwrite(path, offset, size):
    """Invert ``size`` bytes of ``path`` from ``offset``: same size, other contents."""
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(size)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


def inside_parquet_data(path):
    """Overwrite the last bytes of the first column's data: its footer still reads."""
    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    overwrite(path, start + column.total_compressed_size - 8, 8)


def inside_npy_data(path, size=1000):
    """Overwrite up to ``size`` bytes at the middle of an array's data: its header stays."""
    total = os.path.getsize(path)
    size = min(size, total // 4)
    overwrite(path, total // 2, size)


def config_edited(path):
    text = open(path, encoding="utf-8").read()
    assert "max_n: 4" in text
    open(path, "w", encoding="utf-8").write(text.replace("max_n: 4", "max_n: 3"))


def one_word_capitalised(path):
    """One word's first letter upper-cased: same size, another vocabulary."""
    words = open(path, encoding="utf-8").read().split("\n")
    i = next(i for i, w in enumerate(words) if w[:1].islower() and w.capitalize() not in words)
    words[i] = words[i].capitalize()
    open(path, "w", encoding="utf-8").write("\n".join(words))


#: (stage directory, file, damage, command that wrote it, --quick still passes)
DAMAGE = {
    "a count Parquet table": ("count", "links-00001-of-00002.parquet", inside_parquet_data,
                              "snm count", True),
    "a model Parquet table": ("model", "m-00000-of-00002.parquet", inside_parquet_data,
                              "snm apply", True),
    "a compact/ array": ("model", "compact/link_entries.npy", inside_npy_data, "snm apply",
                         True),
    "the model's theta.npy": ("model", "theta.npy", inside_npy_data, "snm apply", True),
    "the fit's theta.npy": ("fit", "theta.npy", inside_npy_data, "snm fit", True),
    "the model's configuration": ("model", "config.cfg", config_edited, "snm apply", True),
    "the model's vocab.txt": ("model", "vocab.txt", one_word_capitalised, "snm apply",
                              False),  # its fingerprint is checked on load too
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_validate_names_a_file_overwritten_in_place(run, tmp_path, capsys, case):
    stage, name, damage, command, quick_passes = DAMAGE[case]
    directory = tmp_path / stage
    shutil.copytree(run["run"] / stage, directory)
    size = os.path.getsize(directory / name)
    damage(str(directory / name))
    assert os.path.getsize(directory / name) == size
    line = one_error(capsys, ["validate", str(directory)])
    assert str(directory / name) in line
    if quick_passes:
        assert line == (f"snm validate: {directory / name}: contents changed since "
                        f"'{command}' wrote it (checksum differs); re-run {command}")
    capsys.readouterr()
    assert cli.main(["validate", "--quick", str(directory)]) == (0 if quick_passes else 2)


def test_validate_of_a_run_names_the_damaged_file_and_the_stage_to_re_run(run, tmp_path,
                                                                          capsys):
    """The issue's case: 1,000 bytes overwritten inside compact/link_entries.npy."""
    copy = copy_run(run, tmp_path)
    damaged = copy / "model" / "compact" / "link_entries.npy"
    inside_npy_data(str(damaged))
    capsys.readouterr()
    assert cli.main(["validate", str(copy)]) == 2
    out = capsys.readouterr().out
    assert f"{copy}: snm train run, 1 problem(s)" in out
    assert (f"  apply: {damaged}: contents changed since 'snm apply' wrote it (checksum "
            f"differs); re-run snm apply (or delete {copy / 'model' / tables.MANIFEST} and "
            "re-run snm train, which then re-runs that stage)") in out.splitlines()
    assert "  fit: ok, a fit directory (snm fit)" in out
    assert cli.main(["validate", "--quick", str(copy)]) == 0


def test_what_validate_advises_for_a_run_repairs_it(run, tmp_path, capsys):
    copy = copy_run(run, tmp_path)
    inside_npy_data(str(copy / "model" / "compact" / "link_entries.npy"))
    os.remove(copy / "model" / tables.MANIFEST)
    train, dev, test = run["corpus"]
    assert cli.main(["train", "--config", "5gram", "--train", train, "--heldout", dev,
                     "--test", test, "--out", str(copy), "--metafeatures", "unlexicalized",
                     "--epochs", "1", "--hash_size", str(HASH_SIZE),
                     "--num_buckets", str(BUCKETS)]) == 0
    capsys.readouterr()
    assert cli.main(["validate", str(copy)]) == 0


def test_a_manifest_written_before_checksums_validates_with_a_note(run, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(run["run"] / "model", model)
    for path in (model / tables.MANIFEST, model / "compact" / tables.MANIFEST):
        manifest = json.loads(path.read_text())
        del manifest["checksums"]
        path.write_text(json.dumps(manifest))
    config_edited(str(model / "config.cfg"))  # not detectable without checksums
    capsys.readouterr()
    assert cli.main(["validate", str(model)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{model}: ok, a model directory (snm apply)")
    assert "contents cannot be verified: its manifest predates checksums" in out


def test_loading_a_model_reads_no_file_whole_for_its_checksum(run, monkeypatch, capsys):
    from snm.evaluation import load_scorer

    def refuse(path):
        raise AssertionError(f"checksum of {path} computed on load")

    monkeypatch.setattr(manifests, "file_checksum", refuse)
    for model in (run["run"] / "model", run["shipped"]):
        assert load_scorer(str(model)).score("a b c") < 0
    assert cli.main(["eval", "--model", str(run["run"]), run["corpus"][2]]) == 0


# --- validate names the stage that writes each directory ----------------------------------

def test_validate_names_the_stage_whose_directory_is_missing(run, tmp_path, capsys):
    copy = copy_run(run, tmp_path)
    shutil.rmtree(copy / "fit")
    capsys.readouterr()
    assert cli.main(["validate", str(copy)]) == 2
    fit_line = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("  fit: ")]
    assert fit_line == [f"  fit: {copy / 'fit'} is missing; re-run snm fit, or snm train "
                        "(which re-runs the stages whose output is missing)"]
    (copy / "fit").mkdir()  # there, but unfinished
    assert cli.main(["validate", str(copy)]) == 2
    fit_line = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("  fit: ")]
    assert fit_line == [f"  fit: {copy / 'fit'}: no manifest.json; not the output of a "
                        "finished 'snm fit' run (re-run that stage)"]


# --- --model: a run directory, a scoring directory, nothing -------------------------------

def model_command(command, model, run, out):
    """``snm COMMAND --model MODEL ...`` writing what it writes under ``out``."""
    test = run["corpus"][2]
    return {
        "eval": ["eval", "--model", model, test, "--json"],
        "score": ["score", "--model", model, test],
        "query": ["query", "--model", model, test],
        "rescore": ["rescore", "--model", model, run["nbest"]],
        "export-arpa": ["export-arpa", "--model", model, "--out", f"{out}.arpa"],
        "prune": ["prune", "--model", model, "--out", f"{out}-pruned", "--target_links",
                  "500"],
        "compact": ["compact", "--model", model, "--layout", "small", "--out",
                    f"{out}-small"],
        "sample": ["sample", "--model", model, "--words", "200", "--out", f"{out}-sample"],
    }[command]


def what_it_made(command, out, capsys):
    """What a command that succeeded wrote or printed, with the model's path left out."""
    printed = capsys.readouterr().out
    if command in ("eval", "score", "query", "rescore"):
        return printed
    if command == "export-arpa":
        return open(f"{out}.arpa", encoding="utf-8").read()
    directory = {"prune": f"{out}-pruned", "compact": f"{out}-small",
                 "sample": f"{out}-sample"}[command]
    files = json.load(open(os.path.join(directory, tables.MANIFEST)))["files"]
    return {name: open(os.path.join(directory, name), "rb").read() for name in files
            if not name.endswith(".md")}  # the card names its directory


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_a_run_directory_stands_for_its_model(run, tmp_path, capsys, command):
    model = str(run["run"] / "model")
    capsys.readouterr()
    assert cli.main(model_command(command, model, run, tmp_path / "given")) == 0
    expected = what_it_made(command, tmp_path / "given", capsys)
    assert cli.main(model_command(command, str(run["run"]), run, tmp_path / "run")) == 0
    assert what_it_made(command, tmp_path / "run", capsys) == expected
    if command in ("prune", "compact", "sample"):  # the model it read, recorded
        directory = {"prune": "run-pruned", "compact": "run-small",
                     "sample": "run-sample"}[command]
        manifest = json.load(open(tmp_path / directory / tables.MANIFEST))
        source = {"prune": lambda m: m["pruning"]["source"],
                  "compact": lambda m: m["scoring_only"]["source"],
                  "sample": lambda m: m["model"]}[command](manifest)
        assert source == model


def run_args(run, out, *more):
    """The fixture's ``snm train`` arguments, into ``out``, and ``more``."""
    corpus = run["corpus"]
    return ["train", "--config", "5gram", "--train", corpus[0], "--heldout", corpus[1],
            "--test", corpus[2], "--out", str(out), "--metafeatures", "unlexicalized",
            "--epochs", "1", "--hash_size", str(HASH_SIZE), "--num_buckets", str(BUCKETS),
            *more]


def test_a_run_directory_stands_for_the_final_model_of_its_last_train(run, tmp_path,
                                                                        capsys):
    """Pruned when the last ``snm train`` pruned; its model when it did not, though an
    earlier train left a ``pruned/`` (the same run directory trained again)."""
    copy = copy_run(run, tmp_path)
    test = run["corpus"][2]

    def evaluated(model):
        capsys.readouterr()
        assert cli.main(["eval", "--model", str(model), test, "--json"]) == 0
        return capsys.readouterr().out

    assert cli.main(run_args(run, copy, "--prune_to", "400")) == 0
    pruned = evaluated(copy / "pruned")
    assert evaluated(copy / "model") != pruned  # the two models differ
    assert evaluated(copy) == pruned
    assert cli.main(run_args(run, copy)) == 0  # trained again without --prune_to
    assert (copy / "pruned").is_dir()  # left as it was
    assert evaluated(copy) == evaluated(copy / "model")
    state = copy / chain.STATE
    state.write_text(json.dumps(  # a run from before the record
        {k: v for k, v in json.loads(state.read_text()).items() if k != chain.FINAL_MODEL}))
    assert evaluated(copy) == pruned  # then the first model directory there, as before


def test_a_log_linear_run_directory_stands_for_its_log_linear_model(loglinear_run, capsys):
    test = loglinear_run["test"]
    capsys.readouterr()
    assert cli.main(["eval", "--model", str(loglinear_run["model"]), test, "--json"]) == 0
    expected = capsys.readouterr().out
    assert "loglinear" in json.loads(expected)
    assert cli.main(["eval", "--model", str(loglinear_run["out"]), test, "--json"]) == 0
    assert capsys.readouterr().out == expected


def test_the_run_models_are_the_stage_table_s_model_directories():
    """``--model RUN`` looks for the directories the chain writes its models to."""
    from snm import evaluation
    assert evaluation.RUN_STATE == chain.STATE
    assert evaluation.RUN_FINAL_MODEL == chain.FINAL_MODEL
    assert sorted(evaluation.RUN_MODELS) == sorted(
        stage.directory for stage in chain.STAGES if stage.kind in ("model", "loglinear"))


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_a_scoring_directory_serves_scoring_and_says_what_it_cannot_serve(run, tmp_path,
                                                                          capsys, command):
    shipped = str(run["shipped"])
    args = model_command(command, shipped, run, tmp_path / "out")
    if command not in TABLE_COMMANDS:
        capsys.readouterr()
        assert cli.main(args) == 0
        assert capsys.readouterr().out
        return
    source = str(run["run"] / "model")
    assert one_error(capsys, args) == (
        f"snm {command}: error: {shipped}: a scoring directory ('snm compact --out' from "
        f"{source}) cannot serve 'snm {command}', which reads the model's tables; give the "
        f"model it came from, --model {source}")
    assert not [p for p in os.listdir(tmp_path) if p.startswith("out")]


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_a_model_that_does_not_exist_is_named_so(run, tmp_path, capsys, command):
    missing = str(tmp_path / "nonexistent")
    line = one_error(capsys, model_command(command, missing, run, tmp_path / "out"))
    assert line.startswith(f"snm {command}: error: {missing}: no such file or directory"), line


@pytest.mark.parametrize("stale", ["missing", "older"])
def test_loading_never_writes_a_model_without_its_arrays_names_snm_compact(run, tmp_path,
                                                                          capsys, stale):
    import snm
    from snm_core.io.errors import SnmInputError
    model = copy_run(run, tmp_path) / "model"
    compact = model / "compact"
    if stale == "missing":
        shutil.rmtree(compact)
    else:  # a layout version no build writes any more
        manifest = json.loads((compact / tables.MANIFEST).read_text())
        (compact / tables.MANIFEST).write_text(json.dumps({**manifest, "layout": "trie-1"}))
    before = files_of(model)
    advice = f"build them with 'snm compact --model {model} --layout"
    with pytest.raises(SnmInputError, match=re.escape(advice)):
        snm.load(str(model))
    assert one_error(capsys, ["eval", "--model", str(model), run["corpus"][2]]
                     ).startswith(f"snm eval: error: {model}: ")
    assert files_of(model) == before  # a read wrote nothing
    layout = "trie" if stale == "older" else "hashed"
    assert cli.main(["compact", "--model", str(model), "--layout", layout]) == 0
    assert snm.load(str(model)).perplexity("a b c") > 0


# --- outputs are not replaced silently ----------------------------------------------------

def files_of(directory):
    return {os.path.relpath(os.path.join(d, n), directory):
            open(os.path.join(d, n), "rb").read()
            for d, _, names in os.walk(directory) for n in names}


def test_sample_refuses_to_replace_a_sample_or_a_file_without_force(run, tmp_path, capsys):
    model = str(run["run"] / "model")
    sample = tmp_path / "sample"
    assert cli.main(["sample", "--model", model, "--words", "300", "--out", str(sample)]) == 0
    before = files_of(sample)
    line = one_error(capsys, ["sample", "--model", model, "--words", "300", "--seed", "1",
                              "--out", str(sample)])
    assert line == (f"snm sample: error: {sample}: holds the finished output of an earlier "
                    "'snm sample' run, which this one would replace: give another --out, or "
                    "--force to replace it")
    assert files_of(sample) == before
    assert cli.main(["sample", "--model", model, "--words", "300", "--seed", "1",
                     "--out", str(sample), "--force"]) == 0
    assert files_of(sample) != before and json.load(open(sample / "manifest.json"))["seed"] == 1

    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    line = one_error(capsys, ["sample", "--model", model, "--words", "300",
                              "--out", str(a_file)])
    assert line.startswith(f"snm sample: error: {a_file}: an existing file")
    assert a_file.read_text() == "mine\n"
    assert cli.main(["sample", "--model", model, "--words", "300", "--out", str(a_file),
                     "--force"]) == 0
    assert (a_file / "manifest.json").is_file()


def stage_into(command, run, out):
    """``snm COMMAND`` of a stage writing ``out``, from the run's inputs."""
    train, dev, test = run["corpus"]
    directory = run["run"]
    return {
        "count": ["count", "--config", "5gram", "--train", train,
                  "--vocab", str(directory / "vocab"), "--out", out],
        "join": ["join", "--count", str(directory / "count"), "--heldout", dev, "--out", out],
        "fit": ["fit", "--join", str(directory / "join"), "--out", out,
                "--metafeatures", "unlexicalized", "--epochs", "1",
                "--hash_size", str(HASH_SIZE)],
        "apply": ["apply", "--count", str(directory / "count"), "--fit", str(directory / "fit"),
                  "--out", out],
        "train": ["train", "--config", "5gram", "--train", train, "--heldout", dev,
                  "--test", test, "--out", out],
    }[command]


@pytest.mark.parametrize("command, holds, written_by", [
    ("count", "model", "'snm apply' (a model directory)"),
    ("join", "fit", "'snm fit' (a fit directory)"),
    ("fit", "count", "'snm count' (a count directory)"),
    ("apply", "shipped", "'snm compact --out' (a scoring directory)"),
    ("train", "model", "'snm apply' (a model directory)"),
])
def test_a_stage_refuses_an_out_holding_another_command_s_output(run, tmp_path, capsys,
                                                                 command, holds, written_by):
    source = run["shipped"] if holds == "shipped" else run["run"] / holds
    out = tmp_path / holds
    shutil.copytree(source, out)
    before = files_of(out)
    line = one_error(capsys, stage_into(command, run, str(out)))
    assert line == (f"snm {command}: error: {out}: holds the finished output of "
                    f"{written_by}, which 'snm {command}' would replace: give another --out, "
                    "or --force to replace it")
    assert files_of(out) == before


def test_force_writes_into_another_command_s_output_and_a_stage_re_runs_into_its_own(
        run, tmp_path, capsys):
    out = tmp_path / "fit"
    shutil.copytree(run["run"] / "fit", out)
    assert cli.main(stage_into("join", run, str(out)) + ["--force"]) == 0
    assert manifests.kind_of(str(out)) == "join"
    assert cli.main(stage_into("join", run, str(out))) == 0  # its own output: a re-run


def test_train_resumes_its_own_run_as_before(run, tmp_path, capsys):
    copy = copy_run(run, tmp_path)
    train, dev, test = run["corpus"]
    capsys.readouterr()
    assert cli.main(["train", "--config", "5gram", "--train", train, "--heldout", dev,
                     "--test", test, "--out", str(copy), "--metafeatures", "unlexicalized",
                     "--epochs", "1", "--hash_size", str(HASH_SIZE),
                     "--num_buckets", str(BUCKETS)]) == 0
    out = capsys.readouterr().out
    for stage in ("join", "fit", "apply", "eval"):
        assert re.search(rf"^{stage} .* up to date$", out, re.MULTILINE), out
