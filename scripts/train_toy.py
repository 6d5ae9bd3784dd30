"""Train the toy shapes pipeline and write it as a diffusers Wan 2.1 pipeline folder.

    PYTHONPATH=$PWD .venv/bin/python scripts/train_toy.py --out models/toy_shapes

Stages (each resumable from its checkpoint in --work): vae -> dit (then its first-frame
fine-tune) -> folder + eval.json + loss.png. See ppdit/toy/train.py for what each does.

    PYTHONPATH=$PWD .venv/bin/python scripts/train_toy.py --tune-from models/toy_shapes \
        --out models/toy_shapes

runs only the first-frame fine-tune on a trained folder (how models/toy_shapes got it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ppdit.toy.run import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("models/toy_shapes"))
    parser.add_argument("--work", type=Path, default=Path("out/train_toy"),
                        help="checkpoints of finished stages (a rerun skips them)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads (on a heavily shared machine 1 is faster)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override any TrainConfig field, e.g. --set dit_steps=600")
    parser.add_argument("--eval-n", type=int, default=20, help="held-out prompt/seed pairs")
    parser.add_argument("--tune-from", type=Path, default=None, metavar="FOLDER",
                        help="only fine-tune this trained folder's DiT for the first frame")
    parser.add_argument("--stop-after", choices=("vae", "dit", "all"), default="all")
    sys.exit(main(parser.parse_args()))
