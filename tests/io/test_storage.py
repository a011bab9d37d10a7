"""The storage layer against a real S3-protocol server (moto's, on localhost), and locally.

The server runs in its own process; the client is pyarrow's S3 filesystem,
configured as users configure it (``AWS_ENDPOINT_URL`` and keys in the
environment): no patched calls.  The server is the ``s3`` fixture (tests/conftest.py), which logs every request.
"""

import bz2
import contextlib
import gzip
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from support import s3server

from snm.commands.train import main as train_main
from snm_core.io import atomic_files, local_copies, storage, tables, textfile
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests
from snm_core.text import synthetic

BUCKET = "snm-test"  # the s3 fixture's (tests/conftest.py)


class Requests:
    """The requests the server answered from the block's start on, as
    ``[(operation, path, range, bytes)]`` (:func:`s3server.operations`)."""

    def __init__(self, log):
        self.log, self.start = log, os.path.getsize(log)

    def __call__(self):
        return s3server.operations(self.log, self.start)[0]


def test_atomic_writes_glob_and_removal_on_s3(s3):
    base = f"{s3}/unit"
    storage.write_json({"a": 1}, f"{base}/x/manifest.json")
    storage.write_bytes(b"one", f"{base}/x/part-1.txt")
    storage.write_bytes(b"two", f"{base}/x/part-2.txt")
    storage.write_bytes(b"other", f"{base}/x/sub/part-3.txt")
    assert storage.read_json(f"{base}/x/manifest.json") == {"a": 1}
    assert storage.glob(f"{base}/x/part-*.txt") == [f"{base}/x/part-1.txt",
                                                    f"{base}/x/part-2.txt"]
    assert storage.listdir(f"{base}/x") == ["manifest.json", "part-1.txt", "part-2.txt"]
    assert storage.isfile(f"{base}/x/part-1.txt") and not storage.isfile(f"{base}/x/nope")

    # A write that fails leaves neither the file nor its temporary object.
    with pytest.raises(ZeroDivisionError):
        with storage.atomic_output(f"{base}/x/broken.bin") as f:
            f.write(b"half")
            1 / 0
    assert storage.listdir(f"{base}/x") == ["manifest.json", "part-1.txt", "part-2.txt"]

    storage.write_npy(np.arange(5, dtype=np.int32), f"{base}/x/a.npy")
    assert storage.read_npy(f"{base}/x/a.npy").tolist() == [0, 1, 2, 3, 4]
    storage.write_parquet(pa.table({"feature": pa.array([3, 1], pa.uint64())}),
                          f"{base}/x/t.parquet")
    assert storage.read_parquet(f"{base}/x/t.parquet")["feature"].to_pylist() == [3, 1]

    storage.remove_tree(f"{base}/x")
    assert storage.glob(f"{base}/x/**") == [] and not storage.exists(f"{base}/x/manifest.json")


#: Just over pyarrow's S3 part size (10 MiB, fixed in Arrow's s3fs.cc): a multipart upload.
OVER_ONE_PART = (10 << 20) + (64 << 10)


def _stored(s3, key):
    """The bytes of object ``key`` read with pyarrow alone, or None if there is none."""
    fs = pafs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"])
    if fs.get_file_info(f"{BUCKET}/{key}").type != pafs.FileType.File:
        return None
    with fs.open_input_stream(f"{BUCKET}/{key}") as f:
        return f.read()


def test_a_remote_file_streams_to_its_name_without_a_copy(s3_log, tmp_path):
    """Over the part size, a write is one multipart upload to the file's own name (no
    temporary object, no CopyObject, which S3 refuses past 5 GB); under it, one PutObject."""
    s3, log = s3_log
    array = np.arange(OVER_ONE_PART // 8, dtype=np.uint64)
    expected = io.BytesIO()
    np.save(expected, array)
    requests = Requests(log)
    storage.write_npy(array, f"{s3}/streamed/link_entries.npy")
    made = [op for op, _, _, _ in requests()]
    assert made == ["CreateMultipartUpload", "UploadPart", "UploadPart",
                    "CompleteMultipartUpload"]
    assert {path for _, path, _, _ in requests()} == {f"/{BUCKET}/streamed/link_entries.npy"}
    assert _stored(s3, "streamed/link_entries.npy") == expected.getvalue()

    requests = Requests(log)
    for name, data in (("big.npy", expected.getvalue()), ("small.json", b"{}"),
                       ("manifest.json", b"{}")):
        (tmp_path / name).write_bytes(data)
    local_copies.upload_tree(str(tmp_path), f"{s3}/streamed/tree", last="manifest.json")
    made = [(op, path.rsplit("/", 1)[1]) for op, path, _, _ in requests()]
    assert made[-1] == ("PutObject", "manifest.json")
    assert sorted(made) == sorted([("CreateMultipartUpload", "big.npy"),
                                   ("UploadPart", "big.npy"), ("UploadPart", "big.npy"),
                                   ("CompleteMultipartUpload", "big.npy"),
                                   ("PutObject", "small.json"), ("PutObject", "manifest.json")])
    assert _stored(s3, "streamed/tree/big.npy") == expected.getvalue()


def test_a_file_given_a_second_name_keeps_its_bytes(tmp_path):
    """``link_or_copy`` (a model's rows are its count's files): one inode where one file
    system holds both names, no temporary name left when done again (a resumed apply),
    and the second name keeps its bytes when the first is rewritten (a stage's rename)
    or removed.  Across file systems, a copy."""
    name = "links-00000-of-00001.parquet"
    source, linked = tmp_path / "count" / name, tmp_path / "model" / name
    storage.write_bytes(b"first", str(source))
    for _ in range(2):
        storage.link_or_copy(str(source), str(linked))
        assert os.path.samefile(source, linked)
        assert os.listdir(tmp_path / "model") == [name]
    storage.write_bytes(b"second", str(source))
    assert linked.read_bytes() == b"first"
    os.unlink(source)
    assert linked.read_bytes() == b"first"
    with pytest.raises(SnmInputError, match="not found; re-run"):
        storage.link_or_copy(str(source), str(linked))
    assert linked.read_bytes() == b"first"

    other = "/dev/shm"
    if not os.access(other, os.W_OK) or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system to copy to")
    copied = os.path.join(other, f"snm-test-{os.getpid()}", name)
    try:
        storage.link_or_copy(str(linked), copied)
        assert open(copied, "rb").read() == b"first"
        assert os.listdir(os.path.dirname(copied)) == [name]
    finally:
        shutil.rmtree(os.path.dirname(copied), ignore_errors=True)


def test_a_remote_write_that_fails_leaves_no_object(s3_log):
    """A write that fails or is interrupted leaves nothing under its name: before the
    first part is full nothing is sent (an earlier file stays as it was); after it,
    the upload pyarrow completes is deleted; a killed process completes nothing."""
    s3, log = s3_log
    path = f"{s3}/failing/model.npy"
    storage.write_bytes(b"earlier", path)
    requests = Requests(log)
    with pytest.raises(ZeroDivisionError):
        with storage.atomic_output(path) as f:
            f.write(b"x" * 1000)
            1 / 0
    assert requests() == [] and _stored(s3, "failing/model.npy") == b"earlier"

    requests = Requests(log)
    with pytest.raises(KeyboardInterrupt):
        with storage.atomic_output(path) as f:
            f.write(bytes(OVER_ONE_PART))
            raise KeyboardInterrupt
    made = [op for op, _, _, _ in requests()]
    assert "UploadPart" in made and "CopyObject" not in made
    assert _stored(s3, "failing/model.npy") is None
    assert storage.listdir(f"{s3}/failing") == []

    killed = subprocess.run([sys.executable, "-c", f"""
import os, signal
from snm_core.io import storage
with storage.atomic_output({path!r}) as f:
    f.write(bytes({OVER_ONE_PART}))
    f.write(bytes({OVER_ONE_PART}))
    os.kill(os.getpid(), signal.SIGKILL)
"""], env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert killed.returncode == -9
    assert _stored(s3, "failing/model.npy") is None


def test_remote_text_is_read_in_large_ranges(s3_log, tmp_path):
    """A reader's small reads (a decompressor's, a batch of lines) do not each become a
    request: a 3 MB text file read in 64 KiB batches is one GET."""
    s3, log = s3_log
    text = "".join(f"line {i} of some text\n" for i in range(150_000)).encode()
    storage.write_bytes(text, f"{s3}/text/plain.txt")
    requests = Requests(log)
    batches = list(textfile.line_batches(f"{s3}/text/plain.txt", batch_bytes=64 << 10))
    assert sum(len(lines) for _, lines in batches) == 150_000 and len(batches) > 40
    assert [op for op, _, _, _ in requests()] == ["HeadObject", "GetObject"]


def test_count_requests_do_not_grow_with_the_batches(s3_log, tmp_path):
    """``snm count --out s3://`` on a local runner keeps its scratch parts on this
    machine: cutting the text into ten times as many flushes (each a part that every
    bucket reads) makes not one request more."""
    from snm.commands.count import main as count_main
    s3, log = s3_log
    train, _, _ = synthetic.write_corpus(str(tmp_path), num_train=3000, num_dev=10,
                                         num_test=10, seed=3)
    made = {}
    for flush_links in (2_000, 20_000):
        requests = Requests(log)
        assert count_main(["--config", "5gram", "--train", train, "--min_count", "1",
                           "--out", f"{s3}/count-{flush_links}", "--num_buckets", "4",
                           "--flush_links", str(flush_links)]) == 0
        made[flush_links] = sorted((op, path.rsplit("/", 1)[1]) for op, path, _, _ in requests())
    assert made[2_000] == made[20_000]
    assert not any("scratch" in name for _, name in made[2_000])
    written = [name for op, name in made[2_000] if op == "PutObject"]
    assert written == sorted([".snm.lock", *(f"{kind}-{b:05d}-of-00004.parquet"
                                             for kind in ("features", "links") for b in range(4)),
                              "manifest.json", "manifest.json", "vocab.txt", "vocab.txt",
                              "word_counts.parquet"])  # count/ and its vocab/, each once


def test_manifest_checks_listed_files_on_s3(s3):
    directory = f"{s3}/manifest-check"
    storage.write_json({"kind": "fit", "format_version": tables.FORMAT_VERSION,
                        "files": ["theta.npy"]}, f"{directory}/manifest.json")
    with pytest.raises(SnmInputError, match="theta.npy is listed"):
        manifests.Fit.read(directory)
    with pytest.raises(SnmInputError, match="expected 'snm count'"):
        manifests.Count.read(directory)
    with pytest.raises(SnmInputError, match="no manifest.json"):
        manifests.Fit.read(f"{s3}/nothing-here")


@pytest.mark.parametrize("name, compress", [
    ("plain.txt", lambda b: b), ("text.txt.gz", gzip.compress), ("text.txt.bz2", bz2.compress),
    ("text.txt.zst", lambda b: pa.compress(b, "zstd", asbytes=True))])
def test_one_text_reader_for_every_compression(tmp_path, name, compress):
    data = "a b\n\n  \nc\xa0d\n".encode() + b"\xff bad\nlast"
    if name.endswith(".zst"):  # a zstd frame, as the zstd tool writes it
        stream = pa.BufferOutputStream()
        with pa.CompressedOutputStream(stream, "zstd") as f:
            f.write(data)
        blob = stream.getvalue().to_pybytes()
    else:
        blob = compress(data)
    (tmp_path / name).write_bytes(blob)
    assert textfile.read_lines(str(tmp_path / name)) == ["a b", "", "  ", "c\xa0d", None, "last"]


def test_a_damaged_gz_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / "cut.txt.gz"
    text = "".join(f"{i} {i * 7919 % 10007}\n" for i in range(20000)).encode()
    path.write_bytes(gzip.compress(text)[:2000])
    with pytest.raises(SnmInputError, match="cut.txt.gz: cannot decompress"):
        textfile.read_lines(str(path))
    (tmp_path / "fake.txt.gz").write_bytes(b"plain text\n")
    with pytest.raises(SnmInputError, match="fake.txt.gz: cannot decompress"):
        textfile.read_lines(str(tmp_path / "fake.txt.gz"))


def _files(directory):
    """Relative paths of the files under a local or remote directory, and their bytes."""
    fs, inner = storage.filesystem(directory)
    infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True))
    out = {}
    for info in infos:
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as f:
                out[info.path[len(inner) + 1:]] = f.read()
    return out


def test_train_in_a_bucket_matches_the_local_run(s3_log, tmp_path, capsys, monkeypatch):
    s3, log = s3_log
    monkeypatch.setenv("SNM_CACHE", str(tmp_path / "cache"))
    train, dev, test = synthetic.write_corpus(str(tmp_path / "corpus"), num_train=1500,
                                              num_dev=150, num_test=150, seed=7)
    remote = {}
    for path in (train, dev, test):  # inputs in the bucket too, one compressed
        name = os.path.basename(path) + (".gz" if "train" in path else "")
        remote[path] = f"{s3}/corpus/{name}"
        with open(path, "rb") as f:
            data = f.read()
        storage.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data,
                            remote[path])

    def args(inputs, out):
        return ["--config", "skip5gram", "--train", inputs[train], "--heldout", inputs[dev],
                "--test", inputs[test], "--out", out, "--metafeatures", "unlexicalized",
                "--epochs", "2", "--hash_size", "65536", "--num_buckets", "4"]

    local_out = str(tmp_path / "local")
    assert train_main(args({p: p for p in remote}, local_out)) == 0
    remote_out = f"{s3}/runs/first"
    requests = Requests(log)
    assert train_main(args(remote, remote_out)) == 0
    capsys.readouterr()
    made = {op for op, _, _, _ in requests()}
    assert "CopyObject" not in made and not any("scratch" in r[1] for r in requests())

    local, bucket = _files(local_out), _files(remote_out)
    assert sorted(local) == sorted(bucket)
    for name in local:
        if name.endswith((".parquet", ".npy", "vocab.txt")):
            assert local[name] == bucket[name], name
    assert json.loads(local["eval.json"]) == json.loads(bucket["eval.json"])

    # A second run finds every stage finished and current.
    assert train_main(args(remote, remote_out)) == 0
    assert capsys.readouterr().out.count("up to date") == 6

    # eval reads compressed text like plain text (the README's promise).
    from snm.cli import main as snm_main
    with open(test, "rb") as f, open(tmp_path / "test.txt.gz", "wb") as g:
        g.write(gzip.compress(f.read()))
    assert snm_main(["eval", "--model", f"{local_out}/model", "--json",
                     str(tmp_path / "test.txt.gz")]) == 0
    assert json.loads(capsys.readouterr().out)["adjusted"]["perplexity"] == pytest.approx(
        json.loads(local["eval.json"])["adjusted"]["perplexity"], rel=1e-12)

    # eval and score read the remote model (its arrays cached locally).
    from snm.commands.score import main as score_main
    from snm.evaluation import evaluate
    assert evaluate(f"{remote_out}/model", remote[test]) == json.loads(bucket["eval.json"])
    assert os.listdir(tmp_path / "cache")  # the scoring arrays, copied on first load
    assert score_main(["--model", f"{remote_out}/model", remote[test],
                       "--out", f"{s3}/scores.tsv"]) == 0
    scored = storage.read_text(f"{s3}/scores.tsv").splitlines()
    assert len(scored) == 150 and all(len(line.split("\t")) == 4 for line in scored)


def test_a_run_directory_in_s3_is_locked_by_a_conditional_write(s3):
    """Two runs on one s3:// --out: the second is refused naming the holder, whose lock
    object (created with If-None-Match) is left alone; released at the end; a dead
    holder's lock (this host, no such process) is taken over."""
    import json
    import socket

    from snm_core.io.errors import SnmInputError
    from snm_core.io.runlock import LOCK_NAME, run_lock

    out = f"{s3}/locked-run"
    lock = storage.join(out, LOCK_NAME)
    with run_lock(out, "snm train (the first)"):
        held = storage.read_bytes(lock)
        assert json.loads(held)["command"] == "snm train (the first)"
        with pytest.raises(SnmInputError, match=r"locked-run is in use by snm train \(the "
                                                r"first\) \(host .*, pid %d" % os.getpid()):
            with run_lock(out, "snm train (the second)"):
                pass
        assert storage.read_bytes(lock) == held
    assert not storage.exists(lock)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    storage.write_text(json.dumps({"host": socket.gethostname(), "pid": int(child.stdout),
                                   "command": "snm count", "started": 0}), lock)
    with run_lock(out, "snm train (after a crash)"):
        assert json.loads(storage.read_bytes(lock))["command"] == "snm train (after a crash)"
    assert not storage.exists(lock)


def test_a_trie_layout_is_built_and_read_in_a_bucket(s3, ngram_model, tmp_path, monkeypatch):
    """``compact/`` in the trie layout for a model in a bucket: built locally, uploaded,
    read back through the local cache, scoring as the local model does."""
    from snm_core.scoring.compact import compile_model, load_model
    from snm_core.scoring.layouts.trie import TrieModel
    monkeypatch.setenv("SNM_CACHE", str(tmp_path / "cache"))
    local, test = tmp_path / "built", ngram_model[1]
    shutil.copytree(ngram_model[0], local)
    remote = f"{s3}/models/ngram"
    local_copies.upload_tree(str(local), remote, last="manifest.json")
    for model_dir in (remote, str(local)):
        compile_model(model_dir, "trie")
    loaded = load_model(remote)
    assert isinstance(loaded, TrieModel)
    assert loaded.evaluate_lines(test) == load_model(str(local)).evaluate_lines(test)


def test_an_arpa_export_from_and_to_a_bucket_is_written_once_under_its_name(
        s3, tmp_path, tagged_ngram_model):
    """A model in a bucket exported to a bucket, compressed, in partitions of 2 MiB: the
    local export's text, and no temporary object beside it (the upload is streamed)."""
    from snm.cli import main as snm_main
    local = tagged_ngram_model[0]
    remote = f"{s3}/models/tagged"
    local_copies.upload_tree(str(local), remote, last="manifest.json")
    assert snm_main(["export-arpa", "--model", str(local), "--out",
                     str(tmp_path / "local.arpa")]) == 0
    out = f"{s3}/exports/model.arpa.gz"
    assert snm_main(["export-arpa", "--model", remote, "--out", out, "--memory", "204M"]) == 0
    assert gzip.decompress(storage.read_bytes(out)) == (tmp_path / "local.arpa").read_bytes()
    assert storage.listdir(f"{s3}/exports") == ["model.arpa.gz"]


def test_unfinished_local_writes_are_removed_at_exit(tmp_path):
    """A file still being written when the process ends (another worker thread's, after
    one failed) leaves no temporary behind: the exit hook removes it."""
    import threading

    from snm_core.io import storage
    writing, release = threading.Event(), threading.Event()

    def write():
        with contextlib.suppress(OSError), storage.atomic_output(str(tmp_path / "f.bin")) as f:
            f.write(b"partial")
            writing.set()
            release.wait(10)

    thread = threading.Thread(target=write)
    thread.start()
    assert writing.wait(10)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    atomic_files.remove_unfinished()  # what the exit hook does
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    release.set()
    thread.join(10)
    assert not os.listdir(tmp_path)  # its rename found nothing to rename
