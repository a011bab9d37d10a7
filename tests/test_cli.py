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
