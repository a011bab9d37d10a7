import platform
import re
import sys

from setuptools import Extension, find_packages, setup

#: flashlight's decoders ship as wheels for CPython 3.10 to 3.12 only (no compiler asked).
FLASHLIGHT = "flashlight-text>=0.0.7; python_version < '3.13'"
NUMBA = "numba>=0.59"



def flashlight_extension():
    """``snm.decoding._flashlight``: the C++ LM flashlight's decoders call without Python
    (``snm.decoding.FlashlightLM`` of a hashed or packed model).  Optional: without a C++
    compiler, or pybind11 (pyproject.toml asks for it; ``setup.py sdist`` runs without),
    FlashlightLM is its Python class.  flashlight-text's wheels are built by GCC 10, whose
    ABI tag pybind11 writes into the name of the registry modules share: a module built
    by another GCC would not find flashlight's ``LM`` class to derive from."""
    try:
        import pybind11
    except ImportError:
        return []
    return [Extension("snm.decoding._flashlight", ["snm/decoding/flashlight_native.cpp"],
                      include_dirs=[pybind11.get_include()], language="c++",
                      define_macros=[("PYBIND11_BUILD_ABI", '"_cxxabi1014"')],
                      extra_compile_args=["-O2", "-std=c++17", "-fvisibility=hidden"],
                      optional=True)]


setup(
    name="snm-lm",
    # One version, snm_core.__version__ (snm --version, the model card), read without
    # importing the package (its dependencies are not installed yet).
    version=re.search(r'^__version__ = "([^"]+)"', open("snm_core/__init__.py").read(),
                      re.M).group(1),
    description="Sparse Non-negative Matrix language models trained with Apache Beam",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["snm_core", "snm_core.*", "pipelines", "pipelines.*",
                                    "snm", "snm.*"]),
    package_data={"snm_core.text.presets": ["*.cfg"]},
    install_requires=[
        "apache-beam>=2.60",
        "numpy>=1.26",
        "pyarrow>=14",
        "xxhash>=3.0",
        # isal: gzip through Intel's ISA-L, which inflates several times as fast as
        # zlib; every local reader of a .gz corpus inflates all of it.
        "isal>=1.6",
        # scipy: L-BFGS-B (bounds W >= 0) fits the log-linear family's separable
        # penalties to their optimum (snm train --family loglinear --optimizer lbfgs).
        "scipy>=1.11",
        # snm train plots held-out perplexity per epoch as a PNG.
        "matplotlib>=3.5",
        # tqdm: the progress bars of long stages on a terminal (rate, time left, terminal
        # width and redrawing done right); elsewhere they are log lines (io/progress.py).
        "tqdm>=4.60",
    ],
    extras_require={
        # kenlm: the tests load our ARPA export with KenLM and compare perplexities.
        # moto[server]: a real S3-protocol server on localhost for the storage tests.
        # apache-beam[dask]: Beam's DaskRunner and dask/distributed, whose scheduler and
        # worker processes the cluster tests start on localhost.
        # pygtrie: what pyctcdecode needs besides numpy (see the Makefile).
        # pytest-xdist: the suite keeps one core busy on average (most of its time is
        # subprocesses starting and small pipelines), so two workers use both.
        # flashlight-text: flashlight's CTC decoders (snm.decoding.FlashlightLM).
        # numba: the log-linear family's tests (the extra loglinear).
        "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "kenlm", "moto[server]>=5",
                 "apache-beam[dask]", "boto3>=1.35", "pygtrie>=2.1", FLASHLIGHT, NUMBA],
        # snm.decoding.PyctcdecodeLM: pyctcdecode's CTC beam search with any SNM.  Its
        # metadata asks for numpy < 2, so with this extra pip installs numpy 1.26, which
        # snm supports (make compat tests it); pyctcdecode runs on numpy 2 as well, which
        # is how the Makefile installs it (--no-deps) for the tests.
        "decoding": ["pyctcdecode>=0.5"],
        # snm.decoding.FlashlightLM: flashlight's lexicon and lexicon-free CTC decoders
        # (torchaudio's ctc_decoder).
        "flashlight": [FLASHLIGHT],
        # snm train --family loglinear: numba compiles the log-linear family's loops;
        # every other loop is C, so a process that never trains or scores that family
        # never loads numba (its start and its memory a process).
        "loglinear": [NUMBA],
        # --runner dask: Beam's DaskRunner against a Dask cluster (launch/dask.sh).
        "dask": ["apache-beam[dask]"],
        # boto3: the run lock of an s3:// directory is a conditional write (If-None-Match),
        # which pyarrow.fs cannot make.
        "s3": ["boto3>=1.35"],
    },
    # The fit's and apply's loops in C, called through ctypes: a process that loads
    # numba holds more memory than a whole fit may use; this library costs well under
    # 1 MiB.  Any C compiler builds it (gcc on Debian).
    ext_modules=[Extension("snm_core.fit._kernels", ["snm_core/fit/_kernels.c"],
                           extra_compile_args=["-O3", "-std=c11", "-fno-math-errno"]
                           # popcount as one instruction (every x86-64 CPU since 2008)
                           + (["-mpopcnt"] if platform.machine() in ("x86_64", "AMD64")
                              else [])),
                 # Counting's, the text layer's, the scoring layouts', ARPA's and sampling's
                 # loops, through ctypes: numba's start costs a short command more than
                 # its work (snm_core/io/native.py).
                 Extension("snm_core._loops", ["snm_core/loops.c", "snm_core/io/radix.c",
                                               "snm_core/io/record_sort.c",
                                               "snm_core/io/scratch_codec.c",
                                               "snm_core/count/sketch.c",
                                               "snm_core/count/link_sums.c",
                                               "snm_core/text/words.c",
                                               "snm_core/scoring/layouts/hashed_loops.c",
                                               "snm_core/scoring/layouts/trie_loops.c",
                                               "snm_core/arpa/arpa_loops.c",
                                               "snm_core/prune/reestimate_loops.c",
                                               "snm_core/sample/sample_loops.c"],
                           extra_compile_args=["-O3", "-std=c11"])]
                + (flashlight_extension() if sys.version_info < (3, 13) else []),
    entry_points={"console_scripts": ["snm=snm.cli:entry"]},
)
