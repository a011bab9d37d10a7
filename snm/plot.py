"""The fit's plot, ``heldout_perplexity.png``, and the helper process that draws it.

matplotlib's import takes a third of a second of a core, most of a kernel ``snm
train``'s eval stage.  In a thread it would hold the GIL the stages need, so the
CLI starts ``snm train`` with a helper process (:func:`start_helper`), before the
command's own imports, while one core is idle: the helper imports matplotlib, then
waits for :func:`draw`'s request, which the eval stage makes before it scores the
test text.  Without a helper (the Python API, tests), :func:`draw` draws in a
thread of this process.  This module imports only what starting the helper needs.

    python -m snm.plot      (the helper: one request on stdin, JSON [fit_dir, png])
"""

import concurrent.futures
import importlib
import io
import json
import os
import subprocess
import sys

_HELPER = None


def _pyplot():
    """matplotlib's pyplot on the Agg backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_perplexity(fit_dir, path):
    """PNG of held-out perplexity per epoch: the final run and each selection run."""
    from snm_core.io import storage
    log = [json.loads(line) for line in
           storage.read_text(storage.join(fit_dir, "train_log.jsonl")).splitlines()]
    storage.write_bytes(_png(log), path)


def _png(log):
    """The plot of a fit's log entries, as PNG bytes."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant in sorted({e["metafeatures"] for e in log if e["run"] == "select"}):
        runs = [e for e in log if e["run"] == "select" and e["metafeatures"] == variant]
        ax.plot([e["epoch"] for e in runs], [e["valid_perplexity"] for e in runs], "--",
                marker=".", label=f"{variant}: held-back tenth (selection)")
    final = [e for e in log if e["run"] == "final"]
    ax.plot([e["epoch"] for e in final], [e["train_perplexity"] for e in final], "-",
            marker="o", color="black", label=f"{final[0]['metafeatures']}: all held-out (final)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("held-out perplexity")
    ax.set_title("SNM adjustment training")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return png.getvalue()


def start_helper():
    """Start the helper process that :func:`draw` then uses (once a process)."""
    global _HELPER
    _HELPER = _HELPER or subprocess.Popen(
        [sys.executable, "-m", "snm.plot"], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_helper():
    """End the helper if it was not used."""
    global _HELPER
    if _HELPER is not None:
        _HELPER.kill()
        _HELPER.communicate()
        _HELPER = None


def draw(fit_dir, path):
    """Start drawing :func:`plot_perplexity` of ``fit_dir`` into ``path``: by the helper
    if one was started, else on a thread.  Returns ``wait()``, which raises
    :class:`~snm_core.io.errors.SnmStageError` (one line) if the helper failed."""
    global _HELPER
    helper, _HELPER = _HELPER, None
    if helper is None:
        pool = concurrent.futures.ThreadPoolExecutor(1)
        future = pool.submit(plot_perplexity, fit_dir, path)
        pool.shutdown(wait=False)
        return future.result
    try:
        helper.stdin.write(json.dumps([fit_dir, path]) + "\n")
        helper.stdin.flush()
    except BrokenPipeError:  # it ended early: wait() reports why
        pass

    def wait():
        from snm_core.io.errors import SnmStageError
        _, errors = helper.communicate()
        if helper.returncode:
            last = (errors.strip().splitlines() or ["no message"])[-1]
            raise SnmStageError(f"plotting {path} failed: {last}")
    return wait


def _warm_up():
    """Draw a throw-away plot: what a first figure loads (the backend, fonts, legend
    and PNG code) is then loaded before the request, as is what reading and writing
    need."""
    importlib.import_module("snm_core.io.storage")
    _png([{"run": "select", "metafeatures": "a", "epoch": 0, "valid_perplexity": 2.0},
          {"run": "final", "metafeatures": "a", "epoch": 0, "train_perplexity": 1.0}])


if __name__ == "__main__":
    _warm_up()
    request = sys.stdin.readline()
    if request:
        plot_perplexity(*json.loads(request))
    # The PNG is written and closed: skip the interpreter's teardown of matplotlib,
    # which the eval stage would wait for.
    os._exit(0)
