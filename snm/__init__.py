"""The SNM language-model toolkit: the ``snm`` command, and a Python API for decoders.

>>> import snm                                    # doctest: +SKIP
>>> model = snm.load("runs/kernel/model")         # doctest: +SKIP
>>> model.score("the kernel is ready")            # doctest: +SKIP

See :mod:`snm.api` (loading and scoring) and :mod:`snm.decoding` (CTC beam search).
"""

__all__ = ["load", "State", "StateBatch"]


def __getattr__(name):
    # Imported on first use, so that the command line does not load the scorers.
    if name in __all__:
        from snm import api
        return getattr(api, name)
    raise AttributeError(f"module 'snm' has no attribute {name!r}")
