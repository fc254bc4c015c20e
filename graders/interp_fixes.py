"""Defects of Triton's CPU interpreter that would turn an honest kernel's smoke run into a FAIL.

kaudit runs Triton kernels through the interpreter (`TRITON_INTERPRET=1`) for CPU smoke checks
and in CI. The interpreter keeps bfloat16 values as their raw uint16 bits, and its `create_dot`
upcasts only 8-bit floats before `np.matmul`: a bf16 `tl.dot` multiplies the bit patterns as
integers (Triton 3.9: max error ~1e11 on unit-scale data; seen on the global_flags_at_import
corpus case, session 10). The fix upcasts bf16 operands to fp32 first, exactly (a bf16 value is
the top half of its fp32 bits), which is what the GPU's tensor cores compute with fp32
accumulation. Applied only in interpreter mode, never on a GPU; idempotent.
"""

from __future__ import annotations

import os
from typing import Any

_MARK = "_kaudit_bf16_dot_fix"


def use_interpreter() -> None:
    """Run this process's Triton kernels through the CPU interpreter, with the fixes applied. Must
    precede the first @triton.jit the solution evaluates (triton reads the variable per decorator)."""
    os.environ["TRITON_INTERPRET"] = "1"
    apply()


def apply() -> bool:
    """Patch the interpreter in this process; True when the patch is (now) in place."""
    try:
        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter
    except Exception:  # no triton, or an interpreter layout this fix does not know
        return False
    builder = getattr(interpreter, "InterpreterBuilder", None)
    handle = getattr(interpreter, "TensorHandle", None)
    if builder is None or handle is None or not hasattr(builder, "create_dot"):
        return False
    original = builder.create_dot
    if getattr(original, _MARK, False):
        return True

    def upcast(h: Any) -> Any:
        if h.dtype.scalar != tl.bfloat16:
            return h
        bits = np.asarray(h.data).view(np.uint16).astype(np.uint32) << np.uint32(16)
        return handle(bits.view(np.float32), tl.float32)

    def create_dot(self: Any, a: Any, b: Any, d: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, upcast(a), upcast(b), d, *args, **kwargs)

    setattr(create_dot, _MARK, True)
    builder.create_dot = create_dot
    return True
