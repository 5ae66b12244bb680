"""stream_rater — an event-driven streaming skill-rating service.

Layers (dependencies point down): ``rating`` (pure math) → ``events``/``codecs`` →
``store`` → ``processor`` → ``app`` (faust worker) → ``cli``.
"""

__version__ = "0.1.0"
