"""Damaged stage directories: each consumer refuses them with one line naming the file.

One small ``snm train`` run gives real count, join, fit and model directories;
each test copies the one it damages and runs the command that reads it
(``snm.cli.main``, in this process, and two through a real ``python -m snm``).
"""

import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from snm import cli
from snm.commands.train import main as train
from snm_core.io import tables
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests, validation
from snm_core.text import synthetic

HASH_SIZE = 1024
BUCKETS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``{"corpus": (train, dev, test), "count": DIR, "join": DIR, "fit": DIR,
    "model": DIR}`` of one small run."""
    root = tmp_path_factory.mktemp("validation")
    corpus = synthetic.write_corpus(str(root / "corpus"), num_train=300, num_dev=60,
                                    num_test=30, seed=5)
    out = root / "run"
    assert train(["--config", "5gram", "--train", corpus[0], "--heldout", corpus[1],
                  "--test", corpus[2], "--out", str(out), "--metafeatures", "unlexicalized",
                  "--epochs", "1", "--hash_size", str(HASH_SIZE),
                  "--num_buckets", str(BUCKETS)]) == 0
    return {"corpus": corpus, **{name: str(out / name)
                                 for name in ("count", "join", "fit", "model")}}


# --- damage -------------------------------------------------------------------------------

def truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])


def garbage(path):
    size = os.path.getsize(path)
    open(path, "wb").write(random.Random(7).randbytes(size))


def damage_page_header(path, offset):
    """Overwrite the data page header at ``offset``: the footer stays readable, reading
    that page fails."""
    data = bytearray(open(path, "rb").read())
    data[offset:offset + 36] = b"\xff" * 36
    open(path, "wb").write(bytes(data))


def damage_first_page(path):
    """The first data page's header (after the 4-byte magic) overwritten."""
    damage_page_header(path, 4)


def damage_first_page_of(column):
    """``damage_first_page`` of ``column``'s first data page: a column a stage reads (the
    join takes a link's key from its feature, not from the links file)."""
    def damage(path):
        meta = pq.ParquetFile(path).metadata.row_group(0)
        chunk = next(meta.column(i) for i in range(meta.num_columns)
                     if meta.column(i).path_in_schema == column)
        damage_page_header(path, chunk.data_page_offset)
    return damage


def float64_theta(path):
    np.save(path, np.zeros(HASH_SIZE, np.float64))


def edit_vocabulary(path):
    words = open(path, encoding="utf-8").read().split("\n")
    words[10] += "x"  # one word changed
    open(path, "w", encoding="utf-8").write("\n".join(words))


def future_version(path):
    manifest = json.load(open(path))
    manifest["format_version"] = tables.FORMAT_VERSION + 1
    json.dump(manifest, open(path, "w"))


def other_bucket(path):
    """Swap a model's bucket file with the same file of the other bucket (of two)."""
    other = path.replace("-00000-of-", "-00001-of-")
    os.rename(path, path + ".swap")
    os.rename(other, path)
    os.rename(path + ".swap", other)


def remove(path):
    os.unlink(path)


def other_schema(path):
    """A valid Parquet file of another table (the count's links) in its place."""
    pq.write_table(pq.read_table(path).select(["feature", "word", "count", "continuation"]), path)


def fewer_rows(path):
    """A valid file of the right schema that lost its last row."""
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 1), path)


# --- the commands that read each directory ----------------------------------------------

def join(run, dirs, out):
    return ["join", "--count", dirs.get("count", run["count"]),
            "--heldout", run["corpus"][1], "--out", out]


def fit(run, dirs, out):
    return ["fit", "--join", dirs.get("join", run["join"]), "--out", out,
            "--metafeatures", "unlexicalized", "--epochs", "1", "--hash_size", str(HASH_SIZE)]


def apply(run, dirs, out):
    return ["apply", "--count", dirs.get("count", run["count"]),
            "--fit", dirs.get("fit", run["fit"]), "--out", out]


def evaluate(run, dirs, out):
    return ["eval", "--model", dirs.get("model", run["model"]), run["corpus"][2]]


def export_arpa(run, dirs, out):
    return ["export-arpa", "--model", dirs.get("model", run["model"]),
            "--out", os.path.join(out, "model.arpa")]


def add_to(run, dirs, out):
    return ["count", "--config", "5gram", "--train", run["corpus"][0],
            "--add_to", dirs.get("count", run["count"]), "--out", out]


#: (directory damaged, file in it, damage, command, what the message says)
CASES = {
    "count links truncated": ("count", "links-00001-of-00002.parquet", truncate, join,
                              "not a readable Parquet file"),
    "count features garbage": ("count", "features-00000-of-00002.parquet", garbage, apply,
                               "not a readable Parquet file"),
    "count links data page damaged": ("count", "links-00000-of-00002.parquet",
                                      damage_first_page_of("word"), join,
                                      "cannot read as Parquet"),
    "count vocab edited": ("count", "vocab.txt", edit_vocabulary, join,
                           "does not match its manifest"),
    "count vocab edited, add_to": ("count", "vocab.txt", edit_vocabulary, add_to,
                                   "does not match its manifest"),
    "count links truncated, add_to": ("count", "links-00000-of-00002.parquet", truncate,
                                      add_to, "not a readable Parquet file"),
    "count features missing": ("count", "features-00001-of-00002.parquet", remove, apply,
                               "is listed in manifest.json but missing"),
    "count from the future": ("count", "manifest.json", future_version, join,
                              "upgrade snm"),
    "join small_m garbage": ("join", "small_m-00000-of-00002.parquet", garbage, fit,
                             "not a readable Parquet file"),
    "join events truncated": ("join", "events-0000-000000001.parquet", truncate, fit,
                              "not a readable Parquet file"),
    "join small_m data page damaged": ("join", "small_m-00001-of-00002.parquet",
                                       damage_first_page, fit, "cannot read as Parquet"),
    "join small_m of another schema": ("join", "small_m-00000-of-00002.parquet",
                                       other_schema, fit, "column 'feature_count' is missing"),
    "join from the future": ("join", "manifest.json", future_version, fit, "upgrade snm"),
    "fit theta truncated": ("fit", "theta.npy", truncate, apply, "truncated or damaged"),
    "fit theta float64": ("fit", "theta.npy", float64_theta, apply,
                          "float64 of shape (1024,), expected float32"),
    "fit theta garbage": ("fit", "theta.npy", garbage, apply, "not a readable .npy array"),
    "fit theta missing": ("fit", "theta.npy", remove, apply, "is listed"),
    "model vocab edited, eval": ("model", "vocab.txt", edit_vocabulary, evaluate,
                                 "does not match its manifest"),
    "model vocab edited, export": ("model", "vocab.txt", edit_vocabulary, export_arpa,
                                   "does not match its manifest"),
    "model from the future": ("model", "manifest.json", future_version, evaluate,
                              "upgrade snm"),
    "model links truncated": ("model", "links-00000-of-00002.parquet", truncate,
                              export_arpa, "not a readable Parquet file"),
    "model values truncated": ("model", "m-00001-of-00002.parquet", truncate,
                               export_arpa, "not a readable Parquet file"),
    "model values of the other bucket": ("model", "m_star-00000-of-00002.parquet",
                                         other_bucket, export_arpa, "they were changed after"),
    "model features missing": ("model", "features-00001-of-00002.parquet", remove,
                               export_arpa, "is listed"),
    "model theta float64": ("model", "theta.npy", float64_theta, evaluate,
                            "expected float32"),
    "model compact array truncated": ("model", "compact/link_entries.npy", truncate, evaluate,
                                      "build the arrays again: snm compact --model"),
    "model compact array garbage": ("model", "compact/feature_entries.npy", garbage, evaluate,
                                    "cannot load"),
}


def damaged_copy(run, tmp_path, kind, name, damage):
    directory = str(tmp_path / kind)
    shutil.copytree(run[kind], directory)
    damage(os.path.join(directory, name))
    return directory


def refused(args, capsys, out):
    """Run the CLI; its one stderr line (it must exit 2 and write no manifest)."""
    capsys.readouterr()
    assert cli.main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"snm {args[0]}: error: ")
    assert not os.path.exists(os.path.join(out, tables.MANIFEST))
    assert not os.path.exists(os.path.join(out, "model.arpa"))
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_input_is_one_line_naming_the_file(run, tmp_path, capsys, case):
    kind, name, damage, command, says = CASES[case]
    directory = damaged_copy(run, tmp_path, kind, name, damage)
    out = str(tmp_path / "out")
    line = refused(command(run, {kind: directory}, out), capsys, out)
    assert os.path.join(directory, name) in line
    assert says in line


def test_rows_that_do_not_add_up_name_the_files(run, tmp_path, capsys):
    directory = damaged_copy(run, tmp_path, "count", "links-00001-of-00002.parquet",
                             fewer_rows)
    out = str(tmp_path / "out")
    line = refused(join(run, {"count": directory}, out), capsys, out)
    assert f"{directory}: its links-*.parquet files hold" in line
    assert "re-run it" in line


@pytest.mark.parametrize("command, option, given, found", [
    (join, "count", "model", "a model directory (the output of 'snm apply'), expected "
                              "'snm count' output"),
    (fit, "join", "count", "a count directory (the output of 'snm count'), expected "
                               "'snm join' output"),
    (apply, "fit", "join", "a join directory (the output of 'snm join'), expected "
                                 "'snm fit' output"),
    (evaluate, "model", "fit", "a fit directory (the output of 'snm fit'), expected "
                                  "'snm apply' output (a model directory)"),
])
def test_another_stage_s_directory_is_named_as_such(run, tmp_path, capsys, command, option,
                                                     given, found):
    out = str(tmp_path / "out")
    line = refused(command(run, {option: run[given]}, out), capsys, out)
    assert f"{os.path.join(run[given], 'manifest.json')}: this is {found}" in line


def test_a_model_without_compact_checks_its_tables_before_building_it(run, tmp_path, capsys):
    directory = damaged_copy(run, tmp_path, "model", "features-00000-of-00002.parquet",
                             truncate)
    shutil.rmtree(os.path.join(directory, "compact"))
    line = refused(evaluate(run, {"model": directory}, ""), capsys, str(tmp_path))
    assert os.path.join(directory, "features-00000-of-00002.parquet") in line
    assert not os.path.exists(os.path.join(directory, "compact", tables.MANIFEST))


def test_undamaged_directories_pass_and_return_their_vocabulary(run):
    for kind, directory in (("count", run["count"]), ("join", run["join"]),
                            ("fit", run["fit"]), ("model", run["model"])):
        checked = validation.validate_directory(directory, kind)
        assert checked.manifest["kind"] == kind
        assert (checked.vocabulary is not None) == (kind in ("count", "model"))
    vocab = os.path.join(os.path.dirname(run["count"]), "vocab")
    assert len(validation.validate_directory(vocab, "vocab").vocabulary) > 3
    with pytest.raises(SnmInputError, match="expected 'snm count' output"):
        validation.validate_directory(run["model"], "count")


@pytest.mark.parametrize("kind, name, damage, command", [
    ("count", "links-00000-of-00002.parquet", damage_first_page_of("word"), join),  # a worker
    ("model", "compact/link_c.npy", truncate, evaluate),
])
def test_the_command_prints_one_line_and_exits_2(run, tmp_path, kind, name, damage, command):
    """The real command line: nothing but snm's line on stderr (no Beam log, no traceback)."""
    directory = damaged_copy(run, tmp_path, kind, name, damage)
    out = str(tmp_path / "out")
    proc = subprocess.run([sys.executable, "-m", "snm", *command(run, {kind: directory}, out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and os.path.join(directory, name) in lines[0], proc.stderr
    assert not os.path.exists(os.path.join(out, tables.MANIFEST))


# --- snm validate, and the stage directories' one name ------------------------------------

def test_validate_checks_every_stage_of_a_run_and_names_what_is_wrong(run, tmp_path, capsys):
    run_dir = os.path.dirname(run["model"])
    assert cli.main(["validate", run_dir]) == 0
    out = capsys.readouterr().out
    for stage in ("vocab", "count", "join", "fit", "apply", "eval"):
        assert f"  {stage}: " in out, out
    assert "count: ok, a count directory (snm count)" in out
    copy = str(tmp_path / "run")
    shutil.copytree(run_dir, copy)
    truncate(os.path.join(copy, "join", "small_m-00001-of-00002.parquet"))
    os.remove(os.path.join(copy, "eval.json"))
    assert cli.main(["validate", copy]) == 2
    out = capsys.readouterr().out
    assert f"{copy}: snm train run, 2 problem(s)" in out
    assert os.path.join(copy, "join", "small_m-00001-of-00002.parquet") in out
    assert f"eval: {os.path.join(copy, 'eval.json')} is missing" in out


def test_validate_takes_any_stage_directory(run, tmp_path, capsys):
    assert cli.main(["validate", run["count"], run["fit"], run["model"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{run['count']}: ok, a count directory")
    assert lines[2].startswith(f"{run['model']}: ok, a model directory")
    damaged = damaged_copy(run, tmp_path, "model", "compact/link_c.npy", truncate)
    (tmp_path / "empty").mkdir()
    assert cli.main(["validate", damaged, str(tmp_path / "nothing"),
                     str(tmp_path / "empty")]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 3
    assert os.path.join(damaged, "compact", "link_c.npy") in errors[0]
    assert errors[1] == f"snm validate: {tmp_path / 'nothing'}: no such file or directory"
    assert "no manifest.json" in errors[2]


def test_a_manifest_reads_back_as_its_class(run):
    count = manifests.Count.read(run["count"])
    assert count.num_buckets == BUCKETS and count.tags == [""]
    assert count.totals["links"] == sum(
        pq.read_metadata(os.path.join(run["count"], n)).num_rows
        for n in count.files if n.startswith("links-"))
    model = manifests.Model.read(run["model"])
    assert model.fit == manifests.Fit.read(run["fit"]).summary()
    assert model.suffix_closed and model.pruning is None
    # keys a class does not declare are kept, and written back unchanged
    data = {**count.to_dict(), "written_by_a_later_release": [1, 2]}
    again = manifests.Count.from_dict(data)
    assert again.extra == {"written_by_a_later_release": [1, 2]}
    assert again.to_dict() == data


def test_the_flags_before_one_name_per_stage_still_work(run, tmp_path, capsys, caplog):
    out = str(tmp_path / "join")
    assert cli.main(["join", "--counts", run["count"], "--heldout", run["corpus"][1],
                     "--out", out]) == 0
    assert "--counts: this flag is now --count" in caplog.text
    assert manifests.Join.read(out).counts == run["count"]
    with pytest.raises(SystemExit):
        cli.main(["join", "--counts", run["count"], "--count", run["count"],
                  "--heldout", run["corpus"][1], "--out", out])
    assert "give --count only" in capsys.readouterr().err
