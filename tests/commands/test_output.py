"""What ``snm train`` prints: a line a stage and a short summary; on a terminal one progress
bar a Beam stage counting every worker's work, no log lines; ``-v`` adds each stage's
totals, the fit's epochs and the test reports.

Oracles: the stage list of the worked example (README: vocab given, so count, join, fit,
apply and eval run), what a terminal shows (the text after a line's last carriage return:
tqdm redraws a bar in place and clears it), and the counts the workers were given.
"""

import fcntl
import os
import pickle
import pty
import re
import struct
import subprocess
import sys
import termios
import threading

import pytest

from snm_core.io import progress

#: What the worked example prints, a line each: its stages, then the run's time and model.
LINES = ["count", "join", "fit", "apply", "eval", "total", "model"]
BEAM_STAGES = ("count", "join", "apply")


def train_args(corpora, out):
    root = os.path.join(corpora, "kernel-100k")
    return ["train", "--config", "5gram", "--train", os.path.join(root, "train.txt"),
            "--vocab", os.path.join(root, "vocab.txt"),
            "--heldout", os.path.join(root, "dev.txt"),
            "--test", os.path.join(root, "test.txt"), "--out", str(out),
            "--direct_num_workers=2"]  # two workers, one bar


def on_a_terminal(args, columns=120):
    """``snm ARGS`` with its standard output and error a terminal ``columns`` wide:
    ``(exit status, everything it wrote, line ends as the program wrote them)``."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    attributes = termios.tcgetattr(terminal)
    attributes[1] &= ~termios.ONLCR  # "\n" stays "\n": a redraw's "\r" is the bar's own
    termios.tcsetattr(terminal, termios.TCSANOW, attributes)
    proc = subprocess.Popen([sys.executable, "-m", "snm", *args], stdin=subprocess.DEVNULL,
                            stdout=terminal, stderr=terminal)
    os.close(terminal)
    written = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal's other end closed: the command is done
            break
        if not chunk:
            break
        written.append(chunk)
    os.close(controller)
    return proc.wait(), b"".join(written).decode("utf-8", "replace")


def shown(written):
    """The lines a terminal shows at the end: each line's text after its last carriage
    return (a bar cleared by tqdm leaves blanks), the blank ones left out."""
    lines = [line.rsplit("\r", 1)[-1].rstrip() for line in written.split("\n")]
    return [line for line in lines if line]


def bar_lines(written, stage):
    """The indexes of the written lines (up to a newline) that hold a redraw of
    ``stage``'s bar (a carriage return, then ``STAGE: ``)."""
    return [i for i, line in enumerate(written.split("\n")) if f"\r{stage}: " in line]


@pytest.fixture(scope="module")
def quiet_run(corpora, tmp_path_factory):
    return on_a_terminal(train_args(corpora, tmp_path_factory.mktemp("quiet") / "run"))


def test_a_train_prints_a_line_a_stage_and_a_short_summary(quiet_run):
    status, written = quiet_run
    assert status == 0, written
    lines = shown(written)
    assert [line.split()[0] for line in lines] == LINES, lines
    assert len(lines) <= 8
    # each stage's line ends with its seconds; the summary names the model directory
    assert all(re.search(r" \d+\.\d s$", line) for line in lines[:6]), lines
    assert lines[-1].split()[1].endswith(os.path.join("run", "model"))


def test_a_train_on_a_terminal_logs_nothing(quiet_run):
    _, written = quiet_run
    assert not re.search(r"INFO:|WARNING:snm", written), written


def test_each_beam_stage_shows_one_bar_counting_every_worker(quiet_run):
    _, written = quiet_run
    lines = written.split("\n")
    for stage in BEAM_STAGES:
        # one bar: its redraws share the line that the stage's own line then ends
        (line,) = bar_lines(written, stage)
        assert lines[line].rsplit("\r", 1)[-1].startswith(f"{stage} "), lines[line]
    # never two bars at once (tqdm would stack them, moving the cursor up)
    assert "\x1b[A" not in written
    # the two workers' buckets in one count: the bar reaches all 64 of them
    (line,) = bar_lines(written, "count")
    assert re.search(r"\rcount: buckets written: 100%\|[^\r]*\| 64\.0/64\.0", lines[line])


def test_verbose_adds_each_stage_s_totals_the_fit_s_epochs_and_the_reports(corpora, tmp_path):
    status, written = on_a_terminal(train_args(corpora, tmp_path / "run") + ["-v"])
    assert status == 0, written
    for title in ("== snm count: ", "== snm join: ", "== snm apply: "):
        assert title in written
    assert "Beam metric" in written
    assert re.search(r"epoch +1: held-out perplexity", written)
    assert "Perplexity including OOVs:" in written
    stage_lines = [line.split()[0] for line in shown(written)
                   if re.match(r"(count|join|fit|apply|eval|total) +\S.* \d+\.\d s$", line)]
    assert stage_lines == LINES[:-1]
    assert not re.search(r"INFO:|WARNING:snm", written)


def test_a_re_run_prints_each_stage_up_to_date(corpora, tmp_path):
    args = train_args(corpora, tmp_path / "run")
    assert on_a_terminal(args)[0] == 0
    status, written = on_a_terminal(args)
    assert status == 0, written
    lines = shown(written)
    assert [line.split()[0] for line in lines] == LINES
    assert all(line.endswith("up to date") for line in lines[:5]), lines


def test_a_train_into_a_pipe_prints_the_same_lines(corpora, tmp_path):
    done = subprocess.run([sys.executable, "-m", "snm", *train_args(corpora, tmp_path / "run")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == LINES
    # progress off a terminal: a log line every few seconds at most, nothing else
    assert all(line.startswith("INFO:snm.progress:") for line in done.stderr.splitlines())


# --- the stage's one display, fed by its workers -------------------------------------------

def test_worker_threads_and_processes_add_to_one_display():
    """Threads of this process add to the open display; a child process (a
    multi-processing worker) through the file the display names in the environment."""
    merged = progress.WorkerProgress("count", "buckets merged", "bucket", 64)
    shipped = pickle.dumps(merged)  # as Beam ships a DoFn to its workers
    with progress.StageProgress("count", bar=False) as display:
        threads = [threading.Thread(target=lambda: [pickle.loads(shipped).update()
                                                    for _ in range(16)]) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        child = ("import pickle, sys\n"
                 "worker = pickle.loads(sys.stdin.buffer.read())\n"
                 "for _ in range(32): worker.update()\n")
        subprocess.run([sys.executable, "-c", child], input=shipped, check=True)
    assert display.current()[:4] == ("buckets merged", "bucket", 64, 64)
    assert progress.CHANNEL_ENV not in os.environ


def test_the_display_shows_the_phase_that_started_last_with_the_total_only_it_knows():
    with progress.StageProgress("count", {"text read": 1000}, channel=False,
                                bar=False) as display:
        progress.WorkerProgress("count", "text read", "B").update(400)
        assert display.current()[:4] == ("text read", "B", 1000, 400)
        progress.WorkerProgress("count", "buckets merged", "bucket", 64).update(3)
        assert display.current()[:4] == ("buckets merged", "bucket", 64, 3)


def test_off_a_terminal_the_display_logs_every_few_seconds_what_all_workers_did(caplog):
    caplog.set_level("INFO", logger="snm.progress")
    with progress.StageProgress("apply", channel=False, bar=False, every=0.05) as display:
        for _ in range(3):
            progress.WorkerProgress("apply", "buckets", "bucket", 8).update(2)
        deadline = threading.Event()
        while not caplog.records and not deadline.wait(0.05):
            pass
    assert display.current()[3] == 6
    assert caplog.records
    assert re.fullmatch(r"apply: buckets: 6 of 8 \(75%\) buckets, [\d,]+ buckets/s",
                        caplog.records[0].getMessage())


def test_a_remote_worker_logs_one_line_for_every_copy_of_its_dofn(monkeypatch, caplog):
    """Without a display (a Dask or Dataflow worker), the copies of a DoFn in one process
    share one progress line: no line per copy, and their sum."""
    caplog.set_level("INFO", logger="snm.progress")
    monkeypatch.delenv(progress.CHANNEL_ENV, raising=False)
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    shipped = pickle.dumps(progress.WorkerProgress("join", "buckets", "bucket", 64))
    for copy in (pickle.loads(shipped), pickle.loads(shipped)):
        copy.update(5)
    lines = [record.getMessage() for record in caplog.records]
    assert lines[-1].startswith("join: buckets: 10 of 64 (16%) buckets")


@pytest.mark.parametrize("name", ["text.txt", "text.txt.gz"])
@pytest.mark.parametrize("readers", [1, 3])
def test_the_readers_of_a_file_report_its_size_as_stored(name, readers, tmp_path):
    """A stage's text progress counts the file's bytes as stored (compressed for a
    compressed file: its total is known before any is read); its readers' reports add up
    to the file's size."""
    import gzip
    from snm_core.io import textfile
    text = "".join(f"sentence {i} of some words here\n" for i in range(20000)).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    reported = []
    for reader in range(readers):
        for _ in textfile.line_batches(str(path), 4096, reader, readers,
                                       progress=reported.append):
            pass
    assert sum(reported) == path.stat().st_size
    assert len(reported) > readers  # a report a batch, not one at the end


def test_a_killed_run_s_channel_file_is_removed_by_the_next_stage(tmp_path, monkeypatch):
    """SIGKILL leaves the channel file of the killed process; the next stage's display
    removes the files of processes that are gone, never a live one's."""
    monkeypatch.setattr(progress.tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphan = tmp_path / f"{progress.CHANNEL_PREFIX}{gone.pid}-abc.tsv"
    live = tmp_path / f"{progress.CHANNEL_PREFIX}{os.getppid()}-def.tsv"
    orphan.touch()
    live.touch()
    with progress.StageProgress("count", bar=False):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name]
