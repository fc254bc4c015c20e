"""Graded shapes (the hard deck table; group size 128) and CPU/interpreter smoke shapes."""

SHAPES = [
    {"M": 1, "N": 12288, "K": 4096},
    {"M": 32, "N": 12288, "K": 4096},
    {"M": 256, "N": 12288, "K": 4096},
    {"M": 1, "N": 4096, "K": 4096},
    {"M": 16, "N": 14336, "K": 4096},
]

# GEMV (M = 1), a partial M tile, N off a 64 tile, several groups along K.
SMALL_SHAPES = [
    {"M": 1, "N": 96, "K": 256},
    {"M": 5, "N": 64, "K": 384},
    {"M": 33, "N": 160, "K": 256},
]
