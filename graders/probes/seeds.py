"""Seeds and call counts of the probe scenarios (shared by runner and verifier: change both or neither)."""

OVERWRITE = 1101
WEIGHT = 1202
REPEAT = 1303
ALIAS_A = 1404
ALIAS_B = 1405
FRESH_WARM = 1506
STREAM = 1607
L2 = 1708
BENCH_SEED = 2026  # the benchmark's input seed (graders.timing)

WARMUP_CALLS = 3  # before an overwrite: primes CUDA graphs, pointer-keyed caches, autotuners
# The ordinary check calls one input object 13 times (11 repeats + 2 overwrites); a benchmark calls
# it warmup + trials (10 + 30) times. A gate between the two is exactly what these counts expose.
REPEAT_CALLS = 24
REPEAT_SAVED = (1, 2, 3, 6, 11, 12, 16, 24)
TIMED_EXTRA = 10  # calls after the benchmark's warm-ups in checked_vs_timed (20 in all by default)
TIMED_TRIALS = 10
