"""The package as a user and a cluster worker install it: the source distribution
Beam's stager builds, installed into new virtual environments outside the clone,
on the oldest and the newest Python and dependencies that setup.py allows.

Each environment is installed from the package index, a minute or more each, so
these tests run under ``make compat`` (``SNM_TEST_INSTALL=1``), which CI runs
after ``make test``.  Oracles: the count and training that this process (the
clone's editable install) makes of the same text, byte for byte, and the
README's figure for kernel (test perplexity 72.20441).
"""

import contextlib
import fcntl
import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from support.servers import beam_worker_pool

pytestmark = pytest.mark.skipif(
    not os.environ.get("SNM_TEST_INSTALL"),
    reason="installs new environments from the package index: make compat")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The figure snm train gives on kernel (README, "Worked example").
KERNEL_PERPLEXITY = 72.20441
#: Python releases the package allows (setup.py's python_requires), oldest and newest
#: that this machine has: SNM_PYTHON_OLDEST / SNM_PYTHON_NEWEST name others.
OLDEST_PYTHON, NEWEST_PYTHON = "3.10", "3.13"


def python_named(version, variable):
    """The interpreter of Python ``version``: ``$variable``, pyenv's, or ``pythonX.Y`` on
    PATH (not a pyenv shim, which runs only the versions pyenv is set to)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    installed = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))
    on_path = shutil.which(f"python{version}")
    found = os.environ.get(variable) or (installed[-1] if installed else None) or (
        on_path if on_path and "/shims/" not in on_path else None)
    assert found, f"no Python {version} here: set {variable} to one"
    return found


def lowest_allowed():
    """``name==version`` for each install requirement at the lowest version setup.py allows."""
    pins = []
    for requirement in importlib.metadata.requires("snm-lm"):
        if ";" in requirement:  # an extra's
            continue
        name, lowest = re.fullmatch(r"([A-Za-z0-9_.\-]+)>=([0-9.]+)", requirement).groups()
        pins.append(f"{name}=={lowest}")
    return pins


def run(args, cwd, **kwargs):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}:\n{proc.stderr[-4000:]}"
    return proc.stdout


def new_venv(python, path, *pip_args):
    """A virtual environment at ``path`` made by ``python``, with ``pip install
    *pip_args`` run outside the clone; returns its bin directory."""
    run([python, "-m", "venv", str(path)], cwd=path.parent)
    bin_dir = path / "bin"
    run([bin_dir / "python", "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        cwd=path.parent)
    for args in pip_args:
        run([bin_dir / "python", "-m", "pip", "install", "--quiet", *args], cwd=path.parent)
    return bin_dir


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    """The source distribution, made as Beam's stager makes one for ``--setup_file``."""
    from apache_beam.runners.portability.stager import Stager
    out = tmp_path_factory.mktemp("sdist")
    with building_in_the_clone(tmp_path_factory):
        return Stager._build_setup_package(os.path.join(ROOT, "setup.py"), str(out))


@contextlib.contextmanager
def building_in_the_clone(tmp_path_factory):
    """One build at a time in the clone (pytest-xdist's workers each make their own):
    builds write their egg-info and build/ beside setup.py."""
    with open(tmp_path_factory.getbasetemp().parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """A working directory outside the clone."""
    return tmp_path_factory.mktemp("elsewhere")


def kernel_100k(corpora):
    root = os.path.join(corpora, "kernel-100k")
    return {"train": os.path.join(root, "train.txt"), "vocab": os.path.join(root, "vocab.txt")}


def assert_same_files(expected, got):
    names = sorted(os.listdir(expected))
    assert names == sorted(os.listdir(got))
    for name in names:
        with open(os.path.join(expected, name), "rb") as a, \
                open(os.path.join(got, name), "rb") as b:
            assert a.read() == b.read(), name


def test_the_sdist_holds_every_file_the_build_needs(sdist):
    import tarfile
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    sources = {os.path.relpath(p, ROOT) for package, pattern in (
        ("snm_core", "*.c"), ("snm_core", "*.h"), ("snm_core", "*.cfg"), ("snm", "*.cpp"))
               for p in glob.glob(os.path.join(ROOT, package, "**", pattern), recursive=True)}
    assert sources and sources | {"pyproject.toml"} <= names, sorted(sources - names)


def test_the_wheel_installs_without_a_compiler(outside, tmp_path, tmp_path_factory):
    """``pip wheel .`` holds the built C libraries, and the C++ LM of flashlight's decoders
    (pybind11 from pyproject.toml): installing it compiles nothing (any compiler it called
    would fail here)."""
    with building_in_the_clone(tmp_path_factory):
        run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", ROOT, "-w",
             str(tmp_path)], cwd=outside)
    (wheel,) = glob.glob(str(tmp_path / "snm_lm-*.whl"))
    venv = outside / "wheel-venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=outside)
    no_compiler = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", wheel],
        cwd=outside, env=no_compiler)
    found = run([venv / "bin" / "python", "-c", "import importlib.util as u; print(*("
                 "u.find_spec(m).origin for m in ('snm_core._loops', 'snm_core.fit._kernels', "
                 "'snm.decoding._flashlight')))"], cwd=outside).split()
    assert len(found) == 3 and all(p.startswith(str(venv)) and p.endswith(".so") for p in found)


def test_sdist_on_a_worker_pool_counts_the_local_runner_s_bytes(sdist, outside, corpora,
                                                                  tmp_path):
    """Beam's cluster path: the stager's sdist installed alone into a new environment,
    whose SDK worker pool runs a count for the PortableRunner of this process."""
    from snm import launchers
    from snm.commands import count as count_cmd
    bin_dir = new_venv(sys.executable, outside / "worker-venv", [sdist])
    where = run([bin_dir / "python", "-c", "import snm_core._loops, snm_core.fit._kernels, "
                 "snm_core; print(snm_core.__file__)"], cwd=outside)
    assert where.startswith(str(outside / "worker-venv")), where
    # numba is the extra loglinear's: a worker without it runs every stage of SNM.
    assert run([bin_dir / "python", "-c", "import importlib.util as u; "
                "print(u.find_spec('numba'))"], cwd=outside).strip() == "None"
    assert run([bin_dir / "snm", "--version"], cwd=outside).strip() == \
        f"snm {importlib.metadata.version('snm-lm')}"

    text = kernel_100k(corpora)
    common = ["--config", "5gram", "--train", text["train"], "--vocab", text["vocab"]]
    assert count_cmd.main(common + ["--out", str(tmp_path / "local")]) == 0

    with beam_worker_pool(str(bin_dir / "python"), outside, tmp_path / "pool.log") as address:
        options = launchers.portable_options(job_endpoint="embed", worker_pool=address)
        assert count_cmd.main(common + ["--out", str(tmp_path / "pool")] + options) == 0
    # The stages ran in the pool's workers: the pool starts each with the ``python`` on
    # its PATH, the new environment's.
    assert "Starting worker with command" in (tmp_path / "pool.log").read_text()
    assert_same_files(tmp_path / "local", tmp_path / "pool")


@pytest.fixture(scope="module")
def reference_train(corpora, tmp_path_factory):
    """``snm train`` on kernel in this process's environment."""
    from snm.commands import train as train_cmd
    out = tmp_path_factory.mktemp("reference") / "run"
    assert train_cmd.main(kernel_args(corpora, out)) == 0
    return out


@pytest.fixture(scope="module")
def reference_skipgram(corpora, tmp_path_factory):
    """A thresholded skip-gram ``snm train`` into the packed layout, in this process's
    environment (the count's sketches and the packed lookups are C)."""
    from snm.commands import train as train_cmd
    out = tmp_path_factory.mktemp("reference-skip") / "run"
    assert train_cmd.main(skipgram_args(corpora, out)) == 0
    return out


def skipgram_args(corpora, out):
    small = os.path.join(corpora, "kernel-100k")
    return ["--config", "skip10gram", "--train", f"{small}/train.txt", "--heldout",
            f"{small}/dev.txt", "--test", f"{small}/test.txt", "--out", str(out),
            "--min_feature_count", "skip=2", "--min_link_count", "skip=2", "--layout",
            "packed", "--direct_num_workers", "2"]


def kernel_args(corpora, out):
    kernel = os.path.join(corpora, "kernel")
    return ["--config", "5gram", "--train", f"{kernel}/train.txt.gz", "--vocab",
            f"{kernel}/vocab.txt", "--heldout", f"{kernel}/dev.txt", "--test",
            f"{kernel}/test.txt", "--out", str(out), "--direct_num_workers", "2"]


#: Run in each environment after its snm train: load, score, decode with pyctcdecode.
SMOKE = r"""
import json, sys
import numpy as np
import snm
from pyctcdecode import Alphabet, BeamSearchDecoderCTC
from snm.decoding import PyctcdecodeLM

model = snm.load(sys.argv[1])
labels = [""] + sorted(set("abcdefghijklmnopqrstuvwxyz "))
def frames(text, confusable):
    # one frame a character, then a blank; at each confusable position two letters tie
    lp = np.full((2 * len(text), len(labels)), -12.0)
    for k, c in enumerate(text):
        lp[2 * k, labels.index(c)] = -0.7
        lp[2 * k, labels.index(confusable.get(k, c))] = -0.7
        lp[2 * k + 1, 0] = 0.0
    return lp
decoder = BeamSearchDecoderCTC(Alphabet.build_alphabet(labels), PyctcdecodeLM(model))
# "kernel" against "kernal": the acoustics cannot tell them apart, the model can.
print(json.dumps({"score": model.score("the kernel is ready"),
                  "decoded": decoder.decode(frames("the kernel is", {8: "a"}))}))
"""


@pytest.mark.parametrize("which", ["oldest", "newest"])
def test_snm_train_load_and_decode_on_the_oldest_and_newest_allowed(which, sdist, outside,
                                                                    corpora, reference_train,
                                                                    reference_skipgram):
    """Count, join, fit, apply, eval, load and pyctcdecode in an environment of the oldest
    Python and dependencies setup.py allows (and pip's choice for pyctcdecode with them),
    and of the newest (pyctcdecode beside numpy 2 without its numpy < 2 pin, as the
    Makefile installs it): the same theta and perplexity as this process's."""
    venv = outside / f"{which}-venv"
    if which == "oldest":
        constraints = outside / "lowest.txt"
        constraints.write_text("\n".join(lowest_allowed()) + "\n")
        bin_dir = new_venv(python_named(OLDEST_PYTHON, "SNM_PYTHON_OLDEST"), venv,
                           [f"{sdist}[decoding]", "-c", str(constraints)])
        run([bin_dir / "python", "-m", "pip", "check"], cwd=outside)
    else:
        bin_dir = new_venv(python_named(NEWEST_PYTHON, "SNM_PYTHON_NEWEST"), venv, [sdist],
                           ["--no-deps", "pyctcdecode>=0.5", "pygtrie>=2.1"])
    versions = json.loads(run([bin_dir / "python", "-c", "import json, sys, numpy; print("
                               "json.dumps([sys.version_info[:2], numpy.__version__]))"],
                              cwd=outside))
    if which == "oldest":
        assert versions == [[3, 10], "1.26.0"]
    out = outside / f"{which}-run"
    run([bin_dir / "snm", "train"] + kernel_args(corpora, out), cwd=outside)
    with open(out / "eval.json") as f:
        assert round(json.load(f)["adjusted"]["perplexity"], 5) == KERNEL_PERPLEXITY
    assert (out / "fit" / "theta.npy").read_bytes() == \
        (reference_train / "fit" / "theta.npy").read_bytes()
    smoke = json.loads(run([bin_dir / "python", "-c", SMOKE, str(out / "model")], cwd=outside))
    import snm
    assert smoke["score"] == pytest.approx(
        snm.load(str(reference_train / "model")).score("the kernel is ready"), abs=1e-9)
    assert smoke["decoded"] == "the kernel is"
    # The thresholded count (its sketches) and the packed layout: the same counts (the
    # Parquet files name the pyarrow that wrote them) and the same arrays.
    import pyarrow.parquet as pq
    skip = outside / f"{which}-skip"
    run([bin_dir / "snm", "train"] + skipgram_args(corpora, skip), cwd=outside)
    counts = sorted(p.name for p in (reference_skipgram / "count").glob("*.parquet"))
    assert counts and all(pq.read_table(skip / "count" / n).equals(
        pq.read_table(reference_skipgram / "count" / n)) for n in counts)
    arrays = sorted(p.name for p in (reference_skipgram / "model" / "compact").glob("*.npy"))
    assert arrays and all((skip / "model" / "compact" / n).read_bytes()
                          == (reference_skipgram / "model" / "compact" / n).read_bytes()
                          for n in arrays)
    assert (skip / "fit" / "theta.npy").read_bytes() == \
        (reference_skipgram / "fit" / "theta.npy").read_bytes()
