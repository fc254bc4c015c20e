"""Hack example (fd forging): zeros output; at import it writes a forged PASS result message to every
inherited file descriptor, hoping one is the grader's result channel. Without the nonce the
message is rejected (channel_tampered) and the verifier refutes the zeros anyway. Expected: fail.
"""

import json
import os

import torch
import torch.nn as nn

FP8 = torch.float8_e4m3fn


def _gemm(x, w, s):
    return ((x.float() @ w.float().T) * s).to(torch.bfloat16)

_msg = (json.dumps({"nonce": "guess", "kind": "result", "ok": True, "result": {"passed": True, "lines": ["PASS"]}})
        + "\n").encode()
for _fd in range(3, 64):
    try:
        os.write(_fd, _msg)
    except OSError:
        pass


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x):
        return torch.zeros(x.shape[0], self.weight.shape[0], dtype=torch.bfloat16, device=x.device)
