"""The SNM language model: pure Python and numpy (never imports apache_beam).

Modules: ``config`` (extraction configuration), ``vocab``, ``text`` (tokenising),
``features`` (events and feature keys), ``hashing``, ``synthetic`` (test corpus).
"""

__version__ = "0.1.0"
