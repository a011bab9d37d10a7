"""README.md's code, run as a reader would: every shell and Python block that uses the
shipped corpora (``../shared/corpora``) or what the worked example makes from them
(``runs/kernel``), in the README's order, in a directory beside a ``shared/`` that
holds the corpora.  The worked example's output is held to the README's listing of it.

Oracle: the README itself (the commands succeed, the stages it lists are the lines
printed, in order, and the Python blocks run).
"""

import os
import re
import subprocess
import sys

import pytest
from support import messages

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
#: A fenced block: its language tag and its text (indented fences included).
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)
SHIPPED = ("../shared/corpora", "runs/kernel/")


def readme_blocks():
    """``[(language, code)]`` of README.md, in order, dedented."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    return [(lang, "\n".join(line[len(indent):] for line in code.splitlines()))
            for indent, lang, code in FENCE.findall(text)]


def test_the_readme_tags_every_block():
    blocks = readme_blocks()
    assert blocks and all(lang in ("sh", "python", "text") for lang, _ in blocks)
    runnable = [code for lang, code in blocks if lang != "text"
                and any(s in code for s in SHIPPED)]
    assert len(runnable) >= 3  # the worked example, the API, KenLM's names


def test_the_readme_s_blocks_on_shipped_data_run(corpora, tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.symlink_to(os.path.dirname(corpora))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    blocks = readme_blocks()
    namespace, ran = {"print": lambda *args, **kwargs: None}, 0
    for i, (lang, code) in enumerate(blocks):
        if lang == "text" or not any(s in code for s in SHIPPED):
            continue
        ran += 1
        if lang == "python":
            exec(compile(code, f"README.md block {i}", "exec"), namespace)
            continue
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"README block {i}:\n{code}\n{proc.stderr[-3000:]}"
        if "snm train" in code and i + 1 < len(blocks) and blocks[i + 1][0] == "text":
            # The listing that follows the worked example: the same lines, in order.
            # (off a terminal a stage over 5 s also logs its progress: not a listed line)
            printed = proc.stdout.splitlines() + messages(proc.stderr)
            listed = blocks[i + 1][1].splitlines()
            assert len(printed) <= 8
            assert [line.split()[0] for line in printed] == \
                [line.split()[0] for line in listed]
    assert ran >= 3
    assert namespace["total"] == pytest.approx(namespace["model"].score("the kernel is ready"))
