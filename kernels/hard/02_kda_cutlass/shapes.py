"""Graded shapes (the hard deck table; K = V = 128, chunk 64) and CPU/interpreter smoke shapes."""

SHAPES = [
    {"B": 2, "T": 1024, "H": 8, "K": 128, "V": 128},
    {"B": 2, "T": 2048, "H": 8, "K": 128, "V": 128},
    {"B": 1, "T": 4096, "H": 8, "K": 128, "V": 128},
    {"B": 1, "T": 2048, "H": 4, "K": 128, "V": 128},
]

# Several chunks (state carried across boundaries), B > 1, H > 1; T off the chunk grid in one.
SMALL_SHAPES = [
    {"B": 1, "T": 128, "H": 2, "K": 32, "V": 32},
    {"B": 2, "T": 96, "H": 1, "K": 16, "V": 32},
]
