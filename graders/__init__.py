"""kaudit's own grading harness: correctness, timing, roofline, GPU lock, sandbox, probes.

Imports only stdlib, torch, triton and PyYAML, so it runs unchanged on a bare GPU host.
"""

GRADER_VERSION = "0.1.0"
