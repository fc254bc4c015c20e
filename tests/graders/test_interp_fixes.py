"""Triton's CPU interpreter multiplies bf16 bit patterns in `tl.dot`; graders.interp_fixes upcasts.

Each check runs in a child process: TRITON_INTERPRET must be set before triton builds its @jit
objects, and the corpus solution below sets global torch flags at import, on purpose."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

KERNEL = textwrap.dedent(
    """
    import torch, triton, triton.language as tl
    from graders import interp_fixes

    @triton.jit
    def k(x_ptr, w_ptr, o_ptr, H, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.arange(0, BM)
        rn = tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(0, H, BK):
            rk = kk + tl.arange(0, BK)
            a = tl.load(x_ptr + rm[:, None] * H + rk[None, :])
            b = tl.load(w_ptr + rk[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc)

    if APPLY:
        assert interp_fixes.apply() and interp_fixes.apply()  # idempotent
    torch.manual_seed(0)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    w = torch.randn(64, 32, dtype=torch.bfloat16)
    o = torch.empty(32, 32, dtype=torch.float32)
    k[(1,)](x, w, o, 64, 32, BM=32, BN=32, BK=32)
    print(float((o - x.float() @ w.float()).abs().max()))
    """
)


def _run(code: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_bf16_dot_is_exact_after_the_fix() -> None:
    err = float(_run("APPLY = True\n" + KERNEL).split()[-1])
    assert err < 1e-3  # bf16 products are exact in fp32; only the summation order differs


def test_the_interpreter_defect_the_fix_exists_for() -> None:
    """Without the fix this Triton's interpreter is wrong by orders of magnitude; when an upgrade
    fixes it, this test says so and the shim can go."""
    err = float(_run("APPLY = False\n" + KERNEL).split()[-1])
    assert err > 1.0, f"the interpreter's bf16 tl.dot is right now ({err}): graders/interp_fixes.py can go"


def test_a_bf16_triton_grouped_gemm_passes_the_bundled_check_on_cpu() -> None:
    """The global_flags_at_import corpus solution (bf16 tl.dot, masked tiles) passes the 06 deck's
    check through the interpreter: run_check applies the fix."""
    code = textwrap.dedent(
        """
        from pathlib import Path
        from graders.correctness import run_check
        lines = []
        o = run_check(Path('tests/corpus/sources/global_flags_at_import/solution.py'),
                      Path('kernels/hard/06_sonic_moe_swiglu'), device='cpu', shapes='small', emit=lines.append)
        print('\\n'.join(lines))
        print('PASSED' if o.passed else 'FAILED')
        """
    )
    out = _run(code)
    assert out.strip().endswith("PASSED"), out[-2000:]
