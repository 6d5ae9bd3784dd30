"""A toy world the tiny Wan pipeline can learn on a laptop CPU: coloured shapes moving on a plain
background (``data``), a detector that checks a clip against its prompt (``detect``), training
(``train``) and generation + scoring (``evaluate``). The trained pipeline folder is committed in
``models/toy_shapes`` (see ``scripts/train_toy.py``)."""

from pathlib import Path

# The trained pipeline folder: the default model of `ppdit demo` and `ppdit generate`. A path
# only (this package imports nothing heavy, so `ppdit --help` can name it without torch).
FOLDER = Path(__file__).resolve().parents[2] / "models" / "toy_shapes"
