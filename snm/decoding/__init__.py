"""Any SNM (skip-grams included) or log-linear model inside a CTC beam-search decoder.

* :class:`PyctcdecodeLM`: pyctcdecode's language model (``pip install pyctcdecode``),
  in :mod:`snm.decoding.pyctcdecode_lm`;
* :class:`FlashlightLM`: flashlight's ``LM`` (``pip install flashlight-text``), for its
  ``LexiconDecoder`` and ``LexiconFreeDecoder`` and so torchaudio's ``ctc_decoder``,
  in :mod:`snm.decoding.flashlight_lm`.

Each is imported on first use, so that a decoder's package is needed only by the
adapter that uses it.
"""

__all__ = ["PyctcdecodeLM", "FlashlightLM"]

_MODULES = {"PyctcdecodeLM": "pyctcdecode_lm", "FlashlightLM": "flashlight_lm"}


def __getattr__(name):
    if name in _MODULES:
        import importlib
        return getattr(importlib.import_module(f"snm.decoding.{_MODULES[name]}"), name)
    raise AttributeError(f"module 'snm.decoding' has no attribute {name!r}")
