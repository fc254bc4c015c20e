"""Read and reset the persisting-L2 state through the CUDA driver API (libcuda, always present).

torch exposes neither `cuCtxGetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)` nor a stream's
access-policy window, so we call the driver directly with ctypes on the context torch made current.
"""

from __future__ import annotations

import ctypes
from typing import Any

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1


class _AccessPolicyWindow(ctypes.Structure):
    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),
        ("missProp", ctypes.c_int),
    ]


class _AttrValue(ctypes.Union):
    _fields_ = [("window", _AccessPolicyWindow), ("pad", ctypes.c_char * 64)]


_lib: Any = None


def _cuda() -> Any:
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
    return _lib


def persisting_l2_limit() -> int | None:
    value = ctypes.c_size_t(0)
    try:
        rc = _cuda().cuCtxGetLimit(ctypes.byref(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
    except (OSError, AttributeError):
        return None
    return int(value.value) if rc == 0 else None


def set_persisting_l2_limit(nbytes: int) -> bool:
    try:
        return int(_cuda().cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(nbytes))) == 0
    except (OSError, AttributeError):
        return False


def reset_persisting_l2() -> bool:
    try:
        return int(_cuda().cuCtxResetPersistingL2Cache()) == 0
    except (OSError, AttributeError):
        return False


def stream_access_window(stream_handle: int) -> dict[str, Any] | None:
    """The access-policy window attribute of a stream (0 = legacy default stream)."""
    value = _AttrValue()
    try:
        fn = _cuda().cuStreamGetAttribute
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        rc = fn(ctypes.c_void_p(stream_handle), CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, ctypes.byref(value))
    except (OSError, AttributeError):
        return None
    if rc != 0:
        return {"error": int(rc)}
    w = value.window
    return {
        "base_ptr": int(w.base_ptr or 0),
        "num_bytes": int(w.num_bytes),
        "hit_ratio": float(w.hitRatio),
        "hit_prop": int(w.hitProp),
        "miss_prop": int(w.missProp),
    }
