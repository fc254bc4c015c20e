"""Builders of REAL run archives for tests: plausible KBH run folders, and every bad archive.

Every builder writes actual tar / tar.gz / zip bytes with the stdlib (crafted headers where the
stdlib refuses, e.g. NUL in a name), so tests exercise the real unpacker. All are small and fast.

Good archives::

    deck = make_deck(tmp / "deck")                       # a tiny deck (7 files per problem)
    tree = build_run_tree(tmp, deck_problem_dir=deck / "01_fp8_gemm")
    tar = make_tar(tree, tmp / "run.tar.gz")             # top folder = run id
    z = make_zip(tree, tmp / "run.zip", top_folder=False)

Bad archives: `bad_<what>(tmp, fmt)` with fmt in {"tar", "tar.gz", "zip"} where it applies;
`BAD_ARCHIVES` maps a name to (builder, formats, expected RejectReason value, Limits kwargs).
"""

from __future__ import annotations

import io
import json
import random
import shutil
import stat
import struct
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

DEFAULT_RUN_ID = "20260801_224338_claude_claude-opus-4-8_01_fp8_gemm"
DEFAULT_PROBLEM = "01_fp8_gemm"
DECK_FILE_NAMES = (
    "PROMPT.txt",
    "problem.yaml",
    "reference.py",
    "check.py",
    "benchmark.py",
    "shapes.py",
    "sota.py",
)

DEFAULT_SOLUTION = '''"""FP8 GEMM in Triton: fp8 tl.dot with fp32 accumulation and a per-channel scale epilogue."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gemm(x_ptr, w_ptr, s_ptr, o_ptr, M, N, K, sxm, swn, som,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(x_ptr + rm[:, None] * sxm + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * swn + (k0 + rk)[:, None],
                    mask=(rn[None, :] < N) & ((k0 + rk)[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc)
    scale = tl.load(s_ptr + rn, mask=rn < N, other=0.0)
    out = (acc * scale[None, :]).to(tl.bfloat16)
    tl.store(o_ptr + rm[:, None] * som + rn[None, :], out, mask=(rm[:, None] < M) & (rn[None, :] < N))


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=torch.float8_e4m3fn))
        self.register_buffer("weight_scale", torch.ones(N))

    def forward(self, x):
        M, K = x.shape
        N = self.weight.shape[0]
        out = torch.empty((M, N), device=x.device, dtype=torch.bfloat16)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        _gemm[grid](x, self.weight, self.weight_scale, out, M, N, K,
                    x.stride(0), self.weight.stride(0), out.stride(0), BM=64, BN=64, BK=64)
        return out
'''

DEFAULT_CHECK_LOG = "PROPERTY_SEED: 1234\nframework: triton\nPASS\n"
DEFAULT_BENCHMARK_LOG = "\n".join(
    [
        "benchmark_event event=variant_start shape=0 variant=solution ts=1754088000.0",
        "benchmark_event event=variant_end shape=0 variant=solution ts=1754088003.5 elapsed_s=3.5 ms=0.2100",
        "shape=0 variant=solution tflops=654.321 gbps=480.000 ms=0.2100",
        "shape=0 solution_peak_fraction=0.3306",
        "benchmark_event event=variant_start shape=1 variant=solution ts=1754088004.0",
        "benchmark_event event=variant_end shape=1 variant=solution ts=1754088006.0 elapsed_s=2.0 ms=0.3000",
        "shape=1 variant=solution tflops=500.000 gbps=400.000 ms=0.3000",
        "shape=1 solution_peak_fraction=0.2527",
        "peak_fraction: 0.2890",
        "RESULT: OK",
        "",
    ]
)
DEFAULT_GPU_LOCK_LOG = "\n".join(
    [
        "2026-08-01T22:50:00+00:00 wait pid=4242 cmd=check",
        "2026-08-01T22:50:12+00:00 start pid=4242 cmd=check args=--shapes all",
        "2026-08-01T22:51:12+00:00 end pid=4242 cmd=check status=0 elapsed_s=60.0",
        "2026-08-01T22:51:13+00:00 start pid=4250 cmd=benchmark",
        "2026-08-01T22:52:13+00:00 end pid=4250 cmd=benchmark status=0 elapsed_s=60.0",
        "",
    ]
)


def default_transcript(run_id: str = DEFAULT_RUN_ID) -> list[dict[str, Any]]:
    """A short claude stream-json session: init, thinking, a Bash call, a Write, the result."""
    return [
        {"type": "system", "subtype": "init", "session_id": "s-1", "model": "claude-opus-4-8",
         "cwd": f"/work/outputs/runs/{run_id}/repo", "tools": ["Bash", "Edit", "Write", "Read"]},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Start by reading the reference."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash",
             "input": {"command": "cat problems/01_fp8_gemm/reference.py"}}]}},
        {"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "import torch\n..."}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_2", "name": "Write",
             "input": {"file_path": "solution.py", "content": "import torch\n"}}]}},
        {"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "ok"}]}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "The solution is written."}]}},
        {"type": "result", "subtype": "success", "is_error": False, "result": "done", "num_turns": 3,
         "total_cost_usd": 1.25, "usage": {"input_tokens": 1200, "output_tokens": 5400,
                                           "cache_read_input_tokens": 100, "cache_creation_input_tokens": 50}},
    ]


def default_result(run_id: str, problem: str, harness: str, model: str) -> dict[str, Any]:
    """result.json with every key of the spec."""
    return {
        "run_id": run_id,
        "run_group": "20260801_group",
        "problem": problem,
        "harness": harness,
        "model": model,
        "reasoning_effort": "",
        "started_at": "2026-08-01T22:43:38+00:00",
        "harness_finished_at": "2026-08-01T23:40:00+00:00",
        "finished_at": "2026-08-01T23:52:00+00:00",
        "start_epoch": 1754088218,
        "harness_end_epoch": 1754091600,
        "end_epoch": 1754092320,
        "elapsed_seconds": 3382,
        "total_elapsed_seconds": 4102,
        "harness_exit_code": 0,
        "has_solution": True,
        "session_complete": True,
        "correct": True,
        "failure_reason": "pass",
        "retryable_infra_failure": False,
        "check_exit_code": 0,
        "benchmark_exit_code": 0,
        "check_elapsed_seconds": 60,
        "benchmark_elapsed_seconds": 60,
        "check_timeout_seconds": 1800,
        "benchmark_timeout_seconds": 1800,
        "peak_fraction": 0.289,
        "template_mutated": False,
        "usage": {
            "input_tokens": 1200,
            "output_tokens": 5400,
            "cache_read_tokens": 100,
            "cache_creation_tokens": 50,
            "reasoning_tokens": None,
            "total_cost_usd": 1.25,
        },
    }


def make_deck(root: Path, problems: Iterable[str] = (DEFAULT_PROBLEM,), *, salt: str = "") -> Path:
    """A tiny deck folder: `<root>/<problem>/` with the 7 deck files (plus examples/ to ignore).

    `salt` changes every file's bytes, to build a second, different deck.
    """
    root.mkdir(parents=True, exist_ok=True)
    for p in problems:
        d = root / p
        d.mkdir(parents=True, exist_ok=True)
        for name in DECK_FILE_NAMES:
            (d / name).write_text(f"# {name} of {p}{salt}\nVALUE = {len(name)}\n")
        (d / "examples").mkdir(exist_ok=True)
        (d / "examples" / "genuine_x.py").write_text('"""genuine example, not a deck file"""\n')
    return root


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


def build_run_tree(
    tmp: Path,
    *,
    run_id: str = DEFAULT_RUN_ID,
    problem: str = DEFAULT_PROBLEM,
    harness: str = "claude",
    model: str = "claude-opus-4-8",
    result: Mapping[str, Any] | None = None,
    result_raw: str | bytes | None = None,
    solution: str | None = DEFAULT_SOLUTION,
    transcript: list[dict[str, Any]] | str | bytes | None = None,
    check_log: str | None = DEFAULT_CHECK_LOG,
    benchmark_log: str | None = DEFAULT_BENCHMARK_LOG,
    gpu_lock_log: str | None = DEFAULT_GPU_LOCK_LOG,
    deck_problem_dir: Path | None = None,
    template: bool = True,
    repo_problem: bool = True,
    trusted_src: Mapping[str, str] | None = None,
    repo_src: Mapping[str, str] | None = None,
    extra_files: Mapping[str, str | bytes] | None = None,
    drop: Iterable[str] = (),
) -> Path:
    """Write a plausible KBH run folder `tmp/<run_id>/` and return it.

    `result` is merged over the default result.json (a None value deletes the key);
    `result_raw` replaces result.json bytes entirely. With `deck_problem_dir`, the deck files are
    copied into template_files/ and repo/problems/<problem>/ (each togglable). `extra_files`
    adds or overwrites files (archive paths); `drop` removes paths at the end.
    """
    run = tmp / run_id
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    res = default_result(run_id, problem, harness, model)
    for k, v in (result or {}).items():
        if v is None:
            res.pop(k, None)
        else:
            res[k] = v
    _write(run / "result.json", result_raw if result_raw is not None else json.dumps(res, indent=2))
    if solution is not None:
        _write(run / "solution.py", solution)
    if transcript is None:
        transcript = default_transcript(run_id)
    if isinstance(transcript, list):
        _write(run / "transcript.jsonl", "".join(json.dumps(o) + "\n" for o in transcript))
    else:
        _write(run / "transcript.jsonl", transcript)
    if check_log is not None:
        _write(run / "check.log", check_log)
    if benchmark_log is not None:
        _write(run / "benchmark.log", benchmark_log)
    if gpu_lock_log is not None:
        _write(run / "gpu_lock.log", gpu_lock_log)
    _write(run / "stderr.log", "")
    _write(run / "scratch" / "framework.txt", "triton\n")
    if deck_problem_dir is not None:
        for name in DECK_FILE_NAMES + ("baseline.py",):
            src = deck_problem_dir / name
            if not src.is_file():
                continue
            if template:
                _write(run / "template_files" / name, src.read_bytes())
            if repo_problem:
                _write(run / "repo" / "problems" / problem / name, src.read_bytes())
        if repo_problem:
            _write(run / "repo" / "problems" / problem / "solution.py", solution or "")
            _write(run / "repo" / "problems" / problem / "__pycache__" / "reference.cpython-311.pyc", b"\x00pyc")
    for rel, text in (trusted_src or {}).items():
        _write(run / "trusted_src" / rel, text)
    for rel, text in (repo_src or {}).items():
        _write(run / "repo" / "src" / rel, text)
    for rel, data in (extra_files or {}).items():
        _write(run / rel, data)
    for rel in drop:
        target = run / rel
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    return run


# ---------------------------------------------------------------------------------------------
# Packing good trees


def _tree_entries(tree: Path, top_folder: bool) -> list[tuple[str, Path]]:
    prefix = f"{tree.name}/" if top_folder else ""
    out = []
    for p in sorted(tree.rglob("*")):
        rel = p.relative_to(tree).as_posix()
        out.append((prefix + rel + ("/" if p.is_dir() else ""), p))
    return out


def make_tar(tree: Path, path: Path, gz: bool = True, top_folder: bool = True) -> Path:
    """Pack a run folder as .tar(.gz); with `top_folder` everything sits under `<tree.name>/`."""
    with tarfile.open(path, "w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as tf:
        if top_folder:
            tf.add(tree, arcname=tree.name, recursive=False)
        for name, p in _tree_entries(tree, top_folder):
            tf.add(p, arcname=name.rstrip("/"), recursive=False)
    return path


def make_zip(tree: Path, path: Path, top_folder: bool = True) -> Path:
    """Pack a run folder as .zip (deflated)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, p in _tree_entries(tree, top_folder):
            if p.is_dir():
                zf.writestr(zipfile.ZipInfo(name), b"")
            else:
                zf.write(p, name)
    return path


# ---------------------------------------------------------------------------------------------
# Low-level crafted archives

Member = tuple[str, bytes | None, dict[str, Any]]  # (name, data or None for non-regular, options)

GOOD_RESULT = json.dumps({"run_id": DEFAULT_RUN_ID, "problem": DEFAULT_PROBLEM}).encode()


def _tar_bytes(members: list[Member], gz: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data, opts in members:
            ti = tarfile.TarInfo(opts.get("header_name", name))
            ti.mtime = int(time.time())
            if "pax_path" in opts:
                ti.pax_headers = {"path": opts["pax_path"]}
            ti.type = opts.get("type", tarfile.DIRTYPE if name.endswith("/") else tarfile.REGTYPE)
            ti.linkname = opts.get("linkname", "")
            if ti.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                ti.devmajor, ti.devminor = 1, 3
            if data is not None and ti.type == tarfile.REGTYPE:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            else:
                ti.mode = 0o755 if ti.type == tarfile.DIRTYPE else 0o644
                tf.addfile(ti)
    return buf.getvalue()


def _zip_bytes(members: list[Member]) -> bytes:
    buf = io.BytesIO()
    patches: list[tuple[bytes, bytes]] = []
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, opts in members:
            zname = opts.get("zip_placeholder", name)
            if zname != name:
                patches.append((zname.encode(), name.encode()))
            zi = zipfile.ZipInfo(zname, date_time=(2026, 8, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            if "unix_mode" in opts:
                zi.create_system = 3
                zi.external_attr = opts["unix_mode"] << 16
            with_warnings_off(lambda zi=zi, data=data: zf.writestr(zi, data if data is not None else b""))
    raw = buf.getvalue()
    for placeholder, real in patches:
        assert len(placeholder) == len(real)
        raw = raw.replace(placeholder, real)
    return raw


def with_warnings_off(fn: Callable[[], Any]) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def write_members(tmp: Path, members: list[Member], fmt: str, name: str = "bad") -> Path:
    """Write crafted members as `fmt` ("tar", "tar.gz" or "zip") and return the file."""
    if fmt == "zip":
        data = _zip_bytes(members)
    else:
        data = _tar_bytes(members, gz=fmt == "tar.gz")
    path = tmp / f"{name}.{fmt}"
    path.write_bytes(data)
    return path


def _run(extra: list[Member], *, result: bytes | None = GOOD_RESULT, top: str = "run") -> list[Member]:
    members: list[Member] = []
    if result is not None:
        members.append((f"{top}/result.json", result, {}))
    members.append((f"{top}/solution.py", b"print('hi')\n", {}))
    return members + extra


# ---------------------------------------------------------------------------------------------
# Bad archives. Each returns the archive path; the docstring says what is wrong.


def bad_symlink(tmp: Path, fmt: str) -> Path:
    """A symlink member pointing at /etc/passwd."""
    if fmt == "zip":
        m: Member = ("run/link", b"/etc/passwd", {"unix_mode": stat.S_IFLNK | 0o777})
    else:
        m = ("run/link", None, {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"})
    return write_members(tmp, _run([m]), fmt)


def bad_hardlink(tmp: Path, fmt: str) -> Path:
    """A tar hard link to another member (tar only: zip has no hard links)."""
    return write_members(tmp, _run([("run/hard", None, {"type": tarfile.LNKTYPE, "linkname": "run/solution.py"})]), fmt)


def bad_device(tmp: Path, fmt: str) -> Path:
    """A character device (/dev/null-like) member, crafted in the header (no root needed)."""
    if fmt == "zip":
        m: Member = ("run/dev", b"", {"unix_mode": stat.S_IFCHR | 0o644})
    else:
        m = ("run/dev", None, {"type": tarfile.CHRTYPE})
    return write_members(tmp, _run([m]), fmt)


def bad_fifo(tmp: Path, fmt: str) -> Path:
    """A FIFO member."""
    if fmt == "zip":
        m: Member = ("run/fifo", b"", {"unix_mode": stat.S_IFIFO | 0o644})
    else:
        m = ("run/fifo", None, {"type": tarfile.FIFOTYPE})
    return write_members(tmp, _run([m]), fmt)


def bad_absolute(tmp: Path, fmt: str) -> Path:
    """A member named /tmp/kaudit-pwned."""
    return write_members(tmp, _run([("/tmp/kaudit-pwned", b"x", {})]), fmt)


def bad_traversal(tmp: Path, fmt: str) -> Path:
    """A member named run/../../escape.txt."""
    return write_members(tmp, _run([("run/../../escape.txt", b"x", {})]), fmt)


def bad_backslash(tmp: Path, fmt: str) -> Path:
    """A member named run\\..\\evil.txt (a Windows traversal)."""
    return write_members(tmp, _run([("run\\..\\evil.txt", b"x", {})]), fmt)


def bad_nul(tmp: Path, fmt: str) -> Path:
    """A member whose name holds a NUL byte (pax path in tar; patched raw name in zip)."""
    if fmt == "zip":
        m: Member = ("run/a\x00b.txt", b"x", {"zip_placeholder": "run/aXb.txt"})
    else:
        m = ("run/placeholder.txt", b"x", {"pax_path": "run/a\x00b.txt"})
    return write_members(tmp, _run([m]), fmt)


def bad_duplicate(tmp: Path, fmt: str) -> Path:
    """The same name twice (solution.py)."""
    return write_members(tmp, _run([("run/solution.py", b"other\n", {})]), fmt)


def bad_duplicate_normalized(tmp: Path, fmt: str) -> Path:
    """`run/./solution.py` duplicates `run/solution.py` after normalisation."""
    return write_members(tmp, _run([("run/./solution.py", b"other\n", {})]), fmt)


def bad_file_folder_clash(tmp: Path, fmt: str) -> Path:
    """`run/solution.py` is a file and also a folder (`run/solution.py/x`)."""
    return write_members(tmp, _run([("run/solution.py/x", b"x", {})]), fmt)


def bad_too_many_members(tmp: Path, fmt: str) -> Path:
    """30 members; use Limits(max_members=10)."""
    return write_members(tmp, _run([(f"run/scratch/f{i}.txt", b"x", {}) for i in range(28)]), fmt)


def bad_file_too_large(tmp: Path, fmt: str) -> Path:
    """One 64 KiB member; use Limits(max_file_bytes=10_000)."""
    return write_members(tmp, _run([("run/big.bin", bytes(range(256)) * 256, {})]), fmt)


def bad_total_too_large(tmp: Path, fmt: str) -> Path:
    """Ten 8 KiB members (80 KiB); use Limits(max_file_bytes=10_000, max_total_bytes=50_000)."""
    return write_members(tmp, _run([(f"run/part{i}.bin", bytes(range(256)) * 32, {}) for i in range(10)]), fmt)


def bad_bomb(tmp: Path, fmt: str) -> Path:
    """50 MB of zeros compressing to ~50 KB: ratio ~1000:1, above the default 200:1."""
    return write_members(tmp, _run([("run/zeros.bin", bytes(50 << 20), {})]), fmt)


def bad_overlapping_zip(tmp: Path, fmt: str = "zip") -> Path:
    """Two central-directory entries pointing at the same local header (overlapping data).

    Built from a valid zip holding result.json and big.txt: the central entry of big.txt is
    rewritten to point at result.json's local header, so both entries share one byte range.
    """
    assert fmt == "zip"
    payload = b"A" * 4096
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("run/result.json", (2026, 8, 1, 0, 0, 0)), GOOD_RESULT)
        zf.writestr(zipfile.ZipInfo("run/big.txt", (2026, 8, 1, 0, 0, 0)), payload)
    raw = bytearray(buf.getvalue())
    eocd = raw.rfind(b"PK\x05\x06")
    cd_offset = struct.unpack_from("<I", raw, eocd + 16)[0]
    pos = cd_offset
    entries = []
    while raw[pos : pos + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", raw, pos + 28)
        entries.append(pos)
        pos += 46 + name_len + extra_len + comment_len
    # Second entry's relative offset of local header (at +42) -> the first entry's header (0).
    struct.pack_into("<I", raw, entries[1] + 42, 0)
    path = tmp / "bad.zip"
    path.write_bytes(bytes(raw))
    return path


def _local_header(name: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(data)
    return struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, len(data), len(data), len(name), 0) + name


def _central_entry(name: bytes, data: bytes, offset: int) -> bytes:
    crc = zlib.crc32(data)
    return struct.pack(
        "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, crc, len(data), len(data), len(name),
        0, 0, 0, 0, 0, offset,
    ) + name


def bad_overlapping_zip_nested(tmp: Path, fmt: str = "zip") -> Path:
    """Entry B's local header and data lie INSIDE entry A's stored data (quoted-overlap bomb).

    Every header is valid and every CRC right; only the byte ranges overlap, which is what the
    non-recursive zip bomb relies on (one kernel of data referenced by many entries).
    """
    assert fmt == "zip"
    name_b, data_b = b"run/result.json", GOOD_RESULT
    inner = _local_header(name_b, data_b) + data_b
    name_a, data_a = b"run/big.txt", inner
    lh_a = _local_header(name_a, data_a)
    body = lh_a + data_a
    cd = _central_entry(name_a, data_a, 0) + _central_entry(name_b, data_b, len(lh_a))
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 2, 2, len(cd), len(body), 0)
    path = tmp / "bad.zip"
    path.write_bytes(body + cd + eocd)
    return path


def bad_multiple_runs_top(tmp: Path, fmt: str) -> Path:
    """Two top-level run folders, each with its own result.json."""
    return write_members(tmp, _run([], top="runA") + _run([], top="runB"), fmt)


def bad_multiple_runs_nested(tmp: Path, fmt: str) -> Path:
    """A run folder that also holds another run folder (result.json + solution.py) deeper."""
    nested = [("run/other/result.json", GOOD_RESULT, {}), ("run/other/solution.py", b"x\n", {})]
    return write_members(tmp, _run(nested), fmt)


def bad_missing_result(tmp: Path, fmt: str) -> Path:
    """No result.json at all."""
    return write_members(tmp, _run([], result=None), fmt)


def bad_invalid_json(tmp: Path, fmt: str) -> Path:
    """result.json that is not JSON."""
    return write_members(tmp, _run([], result=b'{"run_id": "x", '), fmt)


def bad_json_not_object(tmp: Path, fmt: str) -> Path:
    """result.json that is a JSON array."""
    return write_members(tmp, _run([], result=b"[1, 2, 3]"), fmt)


def bad_invalid_utf8(tmp: Path, fmt: str) -> Path:
    """result.json with invalid UTF-8 bytes."""
    return write_members(tmp, _run([], result=b'{"run_id": "\xff\xfe bad"}'), fmt)


def bad_empty(tmp: Path, fmt: str) -> Path:
    """A zero-byte upload."""
    path = tmp / f"empty.{fmt}"
    path.write_bytes(b"")
    return path


def bad_not_an_archive(tmp: Path, fmt: str) -> Path:
    """Bytes that are no tar, tar.gz or zip."""
    path = tmp / f"junk.{fmt}"
    path.write_bytes(b"#!/bin/sh\necho this is not an archive\n" * 20)
    return path


def bad_corrupt_gz(tmp: Path, fmt: str = "tar.gz") -> Path:
    """A tar.gz cut in half."""
    good = _tar_bytes(_run([("run/data.bin", bytes(range(256)) * 64, {})]), gz=True)
    path = tmp / "cut.tar.gz"
    path.write_bytes(good[: len(good) // 2])
    return path


# ---------------------------------------------------------------------------------------------
# Decompressors that lie about their output, case-only duplicates, hostile run_ids

LZMA_PROPS = {"lc": 3, "lp": 0, "pb": 2, "dict_size": 1 << 20}
BOMB_BYTES = 16 << 20  # what each lying member really inflates to (16 MiB of zeros)


def zip_payload(method: int, data: bytes) -> bytes:
    """`data` compressed the way a zip member of `method` stores it (LZMA with its 9-byte header)."""
    import bz2
    import lzma

    if method == zipfile.ZIP_STORED:
        return data
    if method == zipfile.ZIP_DEFLATED:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush()
    if method == zipfile.ZIP_BZIP2:
        return bz2.compress(data, 9)
    if method == zipfile.ZIP_LZMA:
        props = bytes([LZMA_PROPS["lc"] + LZMA_PROPS["lp"] * 9 + LZMA_PROPS["pb"] * 45]) + struct.pack(
            "<I", LZMA_PROPS["dict_size"]
        )
        raw = lzma.compress(data, format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA1, **LZMA_PROPS}])
        return struct.pack("<BBH", 9, 4, len(props)) + props + raw
    raise ValueError(method)


def raw_zip(entries: list[tuple[str, int, bytes, int, int]]) -> bytes:
    """A zip from (name, method, stored payload, crc, declared uncompressed size) entries.

    Every header is written by hand, so the central directory can declare whatever size and CRC
    a test wants, as an attacker's tool would.
    """
    body = b""
    cd = b""
    for name, method, payload, crc, declared in entries:
        raw_name = name.encode()
        offset = len(body)
        body += struct.pack(
            "<4sHHHHHIIIHH", b"PK\x03\x04", 63, 0, method, 0, 0x5021, crc, len(payload), declared, len(raw_name), 0
        ) + raw_name + payload
        cd += struct.pack(
            "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 63, 63, 0, method, 0, 0x5021, crc, len(payload), declared,
            len(raw_name), 0, 0, 0, 0, 0, offset,
        ) + raw_name
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(cd), len(body), 0)
    return body + cd + eocd


def _honest(name: str, data: bytes, method: int = zipfile.ZIP_STORED) -> tuple[str, int, bytes, int, int]:
    return (name, method, zip_payload(method, data), zlib.crc32(data), len(data))


_BOMB_CACHE: dict[int, bytes] = {}


def lying_zip_bytes(method: int, *, declared: int = 12, real: int = BOMB_BYTES) -> bytes:
    """A run zip whose `run/big.log` member declares `declared` bytes and inflates to `real`."""
    key = method * 1_000_003 + real
    if key not in _BOMB_CACHE:
        _BOMB_CACHE[key] = zip_payload(method, bytes(real))
    payload = _BOMB_CACHE[key]
    return raw_zip(
        [
            _honest("run/result.json", GOOD_RESULT),
            _honest("run/solution.py", b"print('hi')\n"),
            ("run/big.log", method, payload, zlib.crc32(bytes(declared)), declared),
        ]
    )


def _lying(method: int) -> Callable[[Path, str], Path]:
    def build(tmp: Path, fmt: str = "zip") -> Path:
        assert fmt == "zip"
        path = tmp / f"lying-{method}.zip"
        path.write_bytes(lying_zip_bytes(method))
        return path

    build.__doc__ = f"A zip member (method {method}) declaring 12 bytes that inflates to 16 MiB."
    return build


def bad_zip_crc(tmp: Path, fmt: str = "zip") -> Path:
    """A deflated member whose bytes do not match its CRC-32."""
    data = b"checked bytes\n" * 100
    entry = ("run/check.log", zipfile.ZIP_DEFLATED, zip_payload(zipfile.ZIP_DEFLATED, data), zlib.crc32(data) ^ 1,
             len(data))
    path = tmp / "crc.zip"
    path.write_bytes(raw_zip([_honest("run/result.json", GOOD_RESULT), entry]))
    return path


def bad_zip_short(tmp: Path, fmt: str = "zip") -> Path:
    """A bzip2 member that inflates to fewer bytes than it declares."""
    data = b"short\n" * 10
    entry = ("run/check.log", zipfile.ZIP_BZIP2, zip_payload(zipfile.ZIP_BZIP2, data), zlib.crc32(data), 4096)
    path = tmp / "short.zip"
    path.write_bytes(raw_zip([_honest("run/result.json", GOOD_RESULT), entry]))
    return path


def bad_duplicate_case(tmp: Path, fmt: str) -> Path:
    """`run/Solution.py` beside `run/solution.py`: one file on a case-insensitive file system."""
    return write_members(tmp, _run([("run/Solution.py", b"print('other')\n", {})]), fmt)


def bad_file_folder_case(tmp: Path, fmt: str) -> Path:
    """`run/Scratch` is a file and `run/scratch/x.py` a file in a folder of the same name, up to case."""
    return write_members(tmp, _run([("run/Scratch", b"x", {}), ("run/scratch/x.py", b"y", {})]), fmt)


def _result_with(**fields: Any) -> bytes:
    return json.dumps({"run_id": DEFAULT_RUN_ID, "problem": DEFAULT_PROBLEM, **fields}).encode()


def _run_id_case(run_id: Any, doc: str) -> Callable[[Path, str], Path]:
    def build(tmp: Path, fmt: str) -> Path:
        return write_members(tmp, _run([], result=json.dumps({"run_id": run_id}).encode()), fmt)

    build.__doc__ = doc
    return build


# result.json texts that are JSON to a lenient parser and hostile to a database or a reader.
HOSTILE_RESULT_JSON: dict[str, bytes] = {
    "nan": b'{"run_id": "r1", "peak_fraction": NaN}',
    "infinity": b'{"run_id": "r1", "peak_fraction": Infinity}',
    "minus_infinity": b'{"run_id": "r1", "elapsed_seconds": -Infinity}',
    "float_overflow": b'{"run_id": "r1", "peak_fraction": 1e400}',
    "int_past_int64": b'{"run_id": "r1", "harness_exit_code": 9223372036854775808}',
    "int_below_int64": b'{"run_id": "r1", "usage": {"input_tokens": -9223372036854775809}}',
    "huge_int_digits": b'{"run_id": "r1", "check_exit_code": ' + b"9" * 5000 + b"}",
    "lone_surrogate": b'{"run_id": "r1", "model": "claude-\\ud800"}',
    "lone_surrogate_key": b'{"run_id": "r1", "\\udfff": 1}',
    "nul_in_string": b'{"run_id": "r1", "model": "claude\\u0000opus"}',
    "nul_in_key": b'{"run_id": "r1", "a\\u0000b": 1}',
    "deep_nesting": b'{"run_id": "r1", "x": ' + b"[" * 400 + b"]" * 400 + b"}",
    "deep_objects": b'{"run_id": "r1", "x": ' + b'{"a":' * 100 + b"1" + b"}" * 100 + b"}",
    "long_string": b'{"run_id": "r1", "failure_reason": "' + random.Random(11).randbytes(200 << 10).hex().encode() + b'"}',
    "duplicate_key": b'{"run_id": "r1", "correct": false, "correct": true}',
    "long_number": b'{"run_id": "r1", "peak_fraction": 0.' + b"1" * 400 + b"}",
}


def _hostile_json(key: str) -> Callable[[Path, str], Path]:
    def build(tmp: Path, fmt: str) -> Path:
        return write_members(tmp, _run([], result=HOSTILE_RESULT_JSON[key]), fmt, name=f"json-{key}")

    build.__doc__ = f"result.json: {key.replace('_', ' ')}"
    return build


ALL_FORMATS = ("tar", "tar.gz", "zip")
TAR_FORMATS = ("tar", "tar.gz")

# name -> (builder, formats, expected reason value, Limits overrides)
BAD_ARCHIVES: dict[str, tuple[Callable[[Path, str], Path], tuple[str, ...], str, dict[str, int]]] = {
    "symlink": (bad_symlink, ALL_FORMATS, "symlink", {}),
    "hardlink": (bad_hardlink, TAR_FORMATS, "hardlink", {}),
    "device": (bad_device, ALL_FORMATS, "special_file", {}),
    "fifo": (bad_fifo, ALL_FORMATS, "special_file", {}),
    "absolute": (bad_absolute, ALL_FORMATS, "absolute_path", {}),
    "traversal": (bad_traversal, ALL_FORMATS, "path_traversal", {}),
    "backslash": (bad_backslash, ALL_FORMATS, "backslash_in_path", {}),
    "nul": (bad_nul, ALL_FORMATS, "nul_in_path", {}),
    "duplicate": (bad_duplicate, ALL_FORMATS, "duplicate_name", {}),
    "duplicate_normalized": (bad_duplicate_normalized, ALL_FORMATS, "duplicate_name", {}),
    "file_folder_clash": (bad_file_folder_clash, ALL_FORMATS, "duplicate_name", {}),
    "too_many_members": (bad_too_many_members, ALL_FORMATS, "too_many_members", {"max_members": 10}),
    "file_too_large": (bad_file_too_large, ALL_FORMATS, "file_too_large", {"max_file_bytes": 10_000}),
    "total_too_large": (
        bad_total_too_large,
        ALL_FORMATS,
        "total_too_large",
        {"max_file_bytes": 10_000, "max_total_bytes": 50_000},
    ),
    "bomb": (bad_bomb, ("tar.gz", "zip"), "compression_ratio", {}),
    "overlapping": (bad_overlapping_zip, ("zip",), "overlapping_entries", {}),
    "overlapping_nested": (bad_overlapping_zip_nested, ("zip",), "overlapping_entries", {}),
    "multiple_runs_top": (bad_multiple_runs_top, ALL_FORMATS, "multiple_runs", {}),
    "multiple_runs_nested": (bad_multiple_runs_nested, ALL_FORMATS, "multiple_runs", {}),
    "missing_result": (bad_missing_result, ALL_FORMATS, "missing_result_json", {}),
    "invalid_json": (bad_invalid_json, ALL_FORMATS, "invalid_result_json", {}),
    "json_not_object": (bad_json_not_object, ALL_FORMATS, "invalid_result_json", {}),
    "invalid_utf8": (bad_invalid_utf8, ALL_FORMATS, "invalid_utf8", {}),
    "empty": (bad_empty, ("tar",), "empty_upload", {}),
    "not_an_archive": (bad_not_an_archive, ("tar",), "unsupported_format", {}),
    "corrupt_gz": (bad_corrupt_gz, ("tar.gz",), "corrupt_archive", {}),
    "bzip2_lies_about_size": (_lying(zipfile.ZIP_BZIP2), ("zip",), "corrupt_archive", {}),
    "lzma_lies_about_size": (_lying(zipfile.ZIP_LZMA), ("zip",), "corrupt_archive", {}),
    "deflate_lies_about_size": (_lying(zipfile.ZIP_DEFLATED), ("zip",), "corrupt_archive", {}),
    "zip_crc_mismatch": (bad_zip_crc, ("zip",), "corrupt_archive", {}),
    "zip_member_short": (bad_zip_short, ("zip",), "corrupt_archive", {}),
    "duplicate_case": (bad_duplicate_case, ALL_FORMATS, "duplicate_name", {}),
    "file_folder_case": (bad_file_folder_case, ALL_FORMATS, "duplicate_name", {}),
    "run_id_slash": (_run_id_case("20260801_x/../../etc", "run_id holding '/'"), ALL_FORMATS, "invalid_run_id", {}),
    "run_id_long": (_run_id_case("r" * 100_000, "a 100,000-character run_id"), ("tar.gz", "zip"), "invalid_run_id",
                    {}),
    "run_id_space": (_run_id_case("run id with spaces", "run_id with spaces"), ("zip",), "invalid_run_id", {}),
    "run_id_unicode": (_run_id_case("r\u00fcn\u202e", "run_id with non-ASCII and a bidi override"), ("tar",),
                       "invalid_run_id", {}),
    "run_id_not_string": (_run_id_case(12345, "run_id that is a number"), ("tar",), "invalid_run_id", {}),
    "run_id_dotdot": (_run_id_case("..", "run_id '..'"), ("zip",), "invalid_run_id", {}),
    **{
        f"json_{key}": (_hostile_json(key), ("tar.gz", "zip") if key in ("nan", "nul_in_string") else ("zip",),
                        "invalid_result_json", {})
        for key in HOSTILE_RESULT_JSON
    },
}


def bad_archive_cases() -> list[tuple[str, str]]:
    """(name, fmt) pairs for parametrized tests."""
    return [(name, fmt) for name, (_b, fmts, _r, _l) in BAD_ARCHIVES.items() for fmt in fmts]
