"""The count's worker-side parts (pipelines/reading.py, shuffle.py, count_directory.py):
sharded readers, the array shuffle, the vocabulary workers share."""

import gzip
import threading

import numpy as np
import pytest

from pipelines import count_directory
from pipelines.reading import FIRST_INVALID, ShardReader, TextShard, check_invalid_lines
from pipelines.shuffle import ArrayShuffle
from snm_core.io.errors import SnmInputError
from snm_core.io.textfile import MAX_INVALID_SHARE
from snm_core.text.vocab import Vocabulary


def test_sharded_readers_together_read_every_batch_once(tmp_path):
    """Reader i of n keeps batches i, i + n, ... with the file's own line numbers."""
    lines = [f"line {i} " + "word " * (i % 7) for i in range(60)]
    body = "\n".join(lines).encode() + b"\n\xff bad line\nlast line, no newline"
    plain, packed = str(tmp_path / "t.txt"), str(tmp_path / "t.txt.gz")
    with open(plain, "wb") as f:
        f.write(body)
    with gzip.open(packed, "wb") as f:
        f.write(body)
    for path in (plain, packed):
        whole = [(b.first_line, b.lines) for b in ShardReader(64).batches(TextShard(0, path))]
        assert len(whole) > 5 and whole[-1][1][-1] == "last line, no newline"
        for n in (1, 2, 3):
            parts = [(b.first_line, b.lines) for i in range(n)
                     for b in ShardReader(64).batches(TextShard(0, path, i, n))]
            assert sorted(parts) == whole


def test_each_shard_names_its_first_undecodable_line_by_the_files_numbering(tmp_path):
    """A shard adds its first line that does not decode, numbered as in the file, to its
    totals; over every reader of a file the first is the file's first.  The oracle: the
    line numbers the file was written with."""
    lines = [f"line {i} " + "word " * (i % 7) for i in range(200)]
    bad = [37, 38, 120, 181]  # 1-based
    body = b"".join(b"\xe9t\xe9 " + line.encode() + b"\n" if number in bad
                    else line.encode() + b"\n" for number, line in enumerate(lines, 1))
    path = str(tmp_path / "latin1.txt")
    with open(path, "wb") as f:
        f.write(body)
    for n in (1, 2, 3):
        firsts = []
        for i in range(n):
            totals = {}
            read = [b for b in ShardReader(256).batches(TextShard(0, path, i, n, 4), totals)]
            undecoded = [b.first_line + k for b in read for k, line in enumerate(b.lines)
                         if line is None]
            entries = totals.get(FIRST_INVALID, [])
            assert [e[:3] for e in entries] == ([[4, undecoded[0], path]] if undecoded else [])
            firsts += entries
        assert min(e[1] for e in firsts) == bad[0]
        assert firsts[0][3].startswith("not valid UTF-8 (invalid continuation byte")


def test_stage_totals_over_the_share_name_the_first_line_of_the_first_file():
    """The check where a stage sums its totals: the share is over all lines read; the
    error names the lowest line of the lowest file number, whatever order the shards
    reported in; a share at most MAX_INVALID_SHARE, or --skip_invalid, passes."""
    lines = 10_000
    over = {"sentences": lines - 30, "invalid_lines": 30, "empty_lines": 0,
            FIRST_INVALID: [[1, 5, "b.txt", "not valid UTF-8 (x)"],
                            [0, 900, "a.txt", "not valid UTF-8 (y)"],
                            [0, 700, "a.txt", "not valid UTF-8 (z)"]]}
    with pytest.raises(SnmInputError) as raised:
        check_invalid_lines(dict(over))
    assert str(raised.value).startswith("a.txt, line 700: not valid UTF-8 (z); 30 of 10,000 "
                                        "lines")
    check_invalid_lines(dict(over), skip_invalid=True)
    within = {**over, "invalid_lines": int(MAX_INVALID_SHARE * lines),
              "sentences": lines - int(MAX_INVALID_SHARE * lines)}
    check_invalid_lines(within)
    assert FIRST_INVALID not in within  # taken out: never a manifest total


@pytest.mark.parametrize("mode, compress, by_bucket", [
    ("files", False, False), ("files", True, False), ("files", False, True),
    ("files", True, True), ("beam", False, False)])
def test_shuffle_sends_each_bucket_its_rows_of_every_part(tmp_path, mode, compress,
                                                          by_bucket):
    """A bucket gets its rows of every part, in part order, dtypes and row shapes kept;
    the buckets of one send share a file (or, by bucket, each bucket's file is appended
    to); a group of several payloads reads back as one concatenation; a bucket asked for
    without rows comes back empty but typed.  Compressed files give the same arrays."""
    shuffle = ArrayShuffle(mode, str(tmp_path / "_scratch"), release=by_bucket,
                           compress=compress)
    words = np.arange(24, dtype=np.int32).reshape(8, 3)
    keys = np.array([3, 2**63 + 5, 7, 9, 11], np.uint64)
    first = {"feature": keys[:3], "count": np.arange(3)}
    second = {"feature": keys[3:], "count": np.arange(3, 5)}
    groups = {"links": [(first, [0, 1, 1, 3, 3]), (second, np.array([0, 0, 0, 1, 2]))],
              "features": [({"words": words[:4]}, [0, 2, 2, 3, 4])]}
    payloads = shuffle.send_cut(groups, by_bucket=by_bucket)
    assert sorted(payloads) == [0, 2, 3]
    if mode == "files":  # an entry's last field: its stored bytes, None for raw
        assert [entry[5] is None for entry in payloads[2][1]] == [not compress] * 3
    expected = {0: ([0], [0], [0, 1]), 2: ([1, 2, 3], [1, 2, 3], [2]), 3: ([4], [4], [3])}
    for bucket, (feature_rows, counts, word_rows) in expected.items():
        back = shuffle.receive(payloads[bucket])
        assert back["links"]["feature"].dtype == np.uint64
        assert back["links"]["feature"].tolist() == keys[feature_rows].tolist()
        assert back["links"]["count"].tolist() == counts
        assert back["features"]["words"].dtype == np.int32
        np.testing.assert_array_equal(back["features"]["words"], words[word_rows])
    both = shuffle.receive_group([payloads[3], payloads[0]], "features")
    np.testing.assert_array_equal(both["words"], words[[3, 0, 1]])
    empty = shuffle.receive(shuffle.send_cut(groups, buckets=[1], by_bucket=by_bucket)[1])
    assert empty["features"]["words"].shape == (0, 3)
    assert empty["features"]["words"].dtype == np.int32
    assert empty["links"]["feature"].dtype == np.uint64 and len(empty["links"]["feature"]) == 0
    one = shuffle.receive(shuffle.send({"links": first}))
    assert one["links"]["count"].tolist() == [0, 1, 2]


def test_a_damaged_compressed_part_names_its_file(tmp_path):
    """A compressed block that does not decode is an error naming its scratch file (a
    block's bytes carry no checksum: like raw parts, a change that still decodes is not
    seen)."""
    shuffle = ArrayShuffle("files", str(tmp_path / "_scratch"), compress=True)
    payload = shuffle.send({"links": {"feature": np.arange(0, 9000, 3, dtype=np.uint64)}})
    path, ((_, _, _, _, offset, stored),) = payload
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * stored)
    with pytest.raises(IOError, match="damaged") as raised:
        shuffle.receive_group([payload], "links")
    assert path in str(raised.value)


def test_shuffle_refuses_a_column_of_two_dtypes(tmp_path):
    """Raw bytes of one dtype read as another would be wrong counts: refused on both sides."""
    shuffle = ArrayShuffle("files", str(tmp_path / "_scratch"))
    wide = {"links": {"count": np.arange(3, dtype=np.int64)}}
    narrow = {"links": {"count": np.arange(3, dtype=np.int32)}}
    with pytest.raises(ValueError, match="links.count"):
        shuffle.send_cut({"links": [(wide["links"], [0, 3]), (narrow["links"], [0, 3])]})
    payloads = [shuffle.send(wide), shuffle.send(narrow)]
    with pytest.raises(ValueError, match="links.count"):
        shuffle.receive_group(payloads, "links")


def test_workers_share_one_vocabulary_and_notice_a_changed_file(tmp_path):
    path = str(tmp_path / "vocab.txt")
    Vocabulary(["a", "b"]).save(path)
    fingerprint = Vocabulary.load(path).fingerprint()
    got = []
    threads = [threading.Thread(target=lambda: got.append(count_directory.shared_vocabulary(
        path, fingerprint))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(v is got[0] for v in got)  # read once, shared
    assert got[0].ids(["b", "c"]).tolist() == [4, 2]

    # The writer's own copy is handed out as it is.
    written = Vocabulary(["x", "y", "z"])
    written.save(path)
    assert count_directory.shared_vocabulary(path, count_directory.share_vocabulary(path, written)) is written

    # A file that no longer matches the fingerprint the pipeline was built with.
    other = str(tmp_path / "other.txt")
    Vocabulary(["a"]).save(other)
    with pytest.raises(SnmInputError, match="other.txt changed while the pipeline was running"):
        count_directory.shared_vocabulary(other, fingerprint)
