"""The fit's plot drawn by snm train's helper process (snm.plot): the same PNG as drawn
in-process, a failure reported in one line, an unused helper ended."""

import json

import pytest

from snm import plot
from snm_core.io.errors import SnmStageError


@pytest.fixture
def fit_dir(tmp_path):
    log = [{"run": "select", "metafeatures": v, "epoch": e, "valid_perplexity": 90.0 - e - i}
           for i, v in enumerate(("unlexicalized", "lexicalized")) for e in range(4)]
    log += [{"run": "final", "metafeatures": "unlexicalized", "epoch": e,
             "train_perplexity": 85.0 - 2 * e} for e in range(3)]
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
    return tmp_path


def test_the_helper_draws_the_png_this_process_draws(fit_dir, tmp_path):
    plot.start_helper()
    plot.draw(str(fit_dir), str(tmp_path / "helper.png"))()
    plot.plot_perplexity(str(fit_dir), str(tmp_path / "here.png"))
    png = (tmp_path / "helper.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png == (tmp_path / "here.png").read_bytes()
    plot.draw(str(fit_dir), str(tmp_path / "thread.png"))()  # no helper left: a thread
    assert (tmp_path / "thread.png").read_bytes() == png


def test_a_failed_plot_is_one_line(tmp_path):
    plot.start_helper()
    wait = plot.draw(str(tmp_path / "no-fit"), str(tmp_path / "p.png"))  # no train_log
    with pytest.raises(SnmStageError, match=r"^plotting .*p\.png failed: .*train_log") as error:
        wait()
    assert "\n" not in str(error.value)


def test_an_unused_helper_is_ended():
    plot.start_helper()
    helper = plot._HELPER
    plot.stop_helper()
    assert helper.returncode is not None and plot._HELPER is None
