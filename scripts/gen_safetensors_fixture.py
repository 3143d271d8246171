#!/usr/bin/env python3
"""Generate the safetensors compatibility fixture for the safetensors tests.

Writes safetensors/testdata/numpy.safetensors with the PyPI `safetensors`
package (its numpy front end), so the Go reader is checked against files the
reference writer produces. Requires safetensors and numpy on PYTHONPATH:

    pip install --target DIR safetensors numpy
    PYTHONPATH=DIR python3 scripts/gen_safetensors_fixture.py

The values are simple closed forms (aranges) that the Go test recomputes.
"""

import os

import numpy as np
from safetensors.numpy import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "safetensors", "testdata")


def main():
    os.makedirs(OUT, exist_ok=True)
    tensors = {
        "model.embed.weight": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
        "model.norm.weight": (np.arange(4, dtype=np.float16) / 4).astype(np.float16),
        "ids": np.arange(5, dtype=np.int64) - 2,
        "mask": np.array([True, False, True], dtype=np.bool_),
        "bytes": np.arange(7, dtype=np.uint8),
        "scalar": np.array(7, dtype=np.int32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "halfwords": np.arange(3, dtype=np.uint16) * 1000,
        "doubles": np.array([0.1, -2.0], dtype=np.float64),
    }
    metadata = {"format": "np", "note": "<tag> & \"quotes\" \u00e9"}
    path = os.path.join(OUT, "numpy.safetensors")
    save_file(tensors, path, metadata=metadata)
    os.chmod(path, 0o644)


if __name__ == "__main__":
    main()
