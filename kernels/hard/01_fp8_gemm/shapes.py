"""Graded shapes (the hard deck table) and CPU/interpreter smoke shapes."""

SHAPES = [
    {"M": 4096, "N": 4096, "K": 4096},
    {"M": 4096, "N": 4096, "K": 4127},  # K not a multiple of 16: no TMA-aligned rows
    {"M": 32, "N": 8192, "K": 8192},  # skinny M: decode-like
    {"M": 4096, "N": 14336, "K": 4096},
]

# Same code paths at interpreter speed: an odd K (tail masking), a skinny M, a square tile.
SMALL_SHAPES = [
    {"M": 64, "N": 64, "K": 64},
    {"M": 64, "N": 64, "K": 95},
    {"M": 8, "N": 96, "K": 128},
]
