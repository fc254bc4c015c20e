"""Graded shapes (the hard deck table) and CPU/interpreter smoke shapes."""

SHAPES = [
    {"BATCH": 1, "N": 131072, "K": 64},
    {"BATCH": 64, "N": 8192, "K": 8},
    {"BATCH": 32, "N": 16384, "K": 32},
    {"BATCH": 16, "N": 12000, "K": 16},  # n not a power of two
    {"BATCH": 128, "N": 4096, "K": 1},
]

# A multi-chunk row, a non-power-of-two n, and k = 1.
SMALL_SHAPES = [
    {"BATCH": 1, "N": 5000, "K": 16},
    {"BATCH": 4, "N": 300, "K": 5},
    {"BATCH": 8, "N": 256, "K": 1},
]
