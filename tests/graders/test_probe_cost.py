"""What one regrade builds and draws (bench/probe_cost.py, counted on the CPU at small shapes), and
the probes' shortcuts that keep full-shape work from repeating (graders.probes): each is checked
against the work it replaces, and the probe verdicts with every shortcut on are the verdicts with
every shortcut off, number for number."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from graders.probes import cases as C
from graders.probes import verify as V
from graders.probes.runner import Recorder, run_untrusted

from .conftest import HARD, REPO

MOE = HARD / "06_sonic_moe_swiglu"
GENUINE = MOE / "examples" / "genuine_torch.py"
CPU_PROBES = ["same_storage_overwrite", "weight_mutation", "repeat_calls", "output_aliasing", "checked_vs_timed",
              "fresh_vs_warm"]
PROBE_PHASES = ("fresh", "warm", "verify")


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("probe_cost_under_test", REPO / "bench" / "probe_cost.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their annotations there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def moe_ledger() -> tuple[Any, dict[str, Any], Any]:
    tool = _tool()
    ledger, info = tool.run_phases(MOE, GENUINE, ("check", "check_verify", *PROBE_PHASES))
    tool.tag_roles(ledger, tool.size_tables(MOE)[0])
    return tool, info, ledger


def _events(ledger: Any, **match: Any) -> list[Any]:
    return [e for e in ledger.events if all(getattr(e, k) == v for k, v in match.items())]


def test_every_probe_process_builds_each_reference_once_per_shape_and_seed(moe_ledger: Any) -> None:
    _tool_mod, info, ledger = moe_ledger
    assert info["check_passed"] and info["check_verify"]["passed"]
    status = {p["probe"]: p["status"] for p in info["probe_results"]}
    assert {status[p] for p in CPU_PROBES} == {"passed"}
    assert status["l2_policy"] == status["stream_escape"] == "not_applicable"  # CUDA only
    shapes = {e.shape for e in _events(ledger, phase="warm", kind="ref_model")}
    assert shapes == {0, 1}
    for phase in (*PROBE_PHASES, "check_verify"):
        for si in shapes:
            refs = Counter(e.seed for e in _events(ledger, phase=phase, shape=si, kind="ref_model"))
            draws = Counter(e.seed for e in _events(ledger, phase=phase, shape=si, kind="get_inputs"))
            # reference builds per shape <= distinct seeds: no (shape, seed) is built twice in a process
            assert refs and max(refs.values()) == 1, (phase, si, refs)
            assert max(draws.values()) == 1, (phase, si, draws)
    # the warm runner: one case per probe (seeds all distinct) plus load_state_dict's fresh weights
    warm0 = {e.seed: (e.probe, e.via) for e in _events(ledger, phase="warm", shape=0, kind="ref_model")}
    assert warm0 == {1101: ("same_storage_overwrite", "build_case"), 1202: ("weight_mutation", "build_case"),
                     1209: ("weight_mutation", "reload_state"), 1303: ("repeat_calls", "build_case"),
                     1404: ("output_aliasing", "build_case"), 1506: ("fresh_vs_warm", "build_case"),
                     2026: ("checked_vs_timed", "build_case")}
    assert len(_events(ledger, phase="warm", shape=0, kind="sol_model")) == 6
    assert len(_events(ledger, phase="fresh", shape=0, kind="sol_model")) == 1
    # where they draw on CUDA: on the device, but checked_vs_timed's exact draw (spec.draw_context)
    for e in _events(ledger, phase="warm") + _events(ledger, phase="verify"):
        if e.kind in ("ref_model", "get_inputs"):
            assert e.where == ("ctx" if e.probe == "checked_vs_timed" else "device"), e


def test_no_probe_draws_a_full_size_permutation_on_the_cpu(moe_ledger: Any) -> None:
    _tool_mod, _info, ledger = moe_ledger
    gen = [e for e in ledger.events if e.kind == "cpu_gen" and e.phase in PROBE_PHASES]
    assert gen and not [e for e in gen if e.via.startswith("randperm")]
    for phase in ("warm", "verify"):
        for si in (0, 1):  # SMALL_SHAPES: 48 x 64 and 40 x 32 hidden states
            drawn = sum(e.numel for e in gen if e.phase == phase and e.shape == si)
            # only the two 8-element scatters' positions and extremes: the full / full_raw /
            # fresh_tensor and row resamples draw on the tensor's device (cases._resample)
            assert 0 < drawn <= 2 * (8 + 8), (phase, si, drawn)


def test_the_verifier_copies_no_input_to_the_host_and_compares_identical_outputs_once(moe_ledger: Any) -> None:
    _tool_mod, _info, ledger = moe_ledger
    snaps = _events(ledger, phase="verify", kind="snapshot")
    assert snaps and {e.role for e in snaps} == {"output"}  # 06's output is a tensor, not top-k
    compares = Counter((e.probe, e.shape) for e in _events(ledger, phase="verify", kind="cpu_compare"))
    for si in (0, 1):
        assert compares[("repeat_calls", si)] == 1  # 8 saved calls, bit-identical for this solution
        assert compares[("checked_vs_timed", si)] == 1
    links = _events(ledger, phase="warm", kind="link")
    assert Counter((e.probe, e.shape) for e in links)[("repeat_calls", 0)] == 7


def test_the_table_prints(moe_ledger: Any, capsys: pytest.CaptureFixture[str]) -> None:
    tool, info, ledger = moe_ledger
    small, full, spec = tool.size_tables(MOE)
    assert full[0]["input0"] == 32768 * 8 * 4096 and full[0]["state"] == 2 * 128 * 4096 * 1536
    assert full[0]["output"] == 32768 * 8 * 1536  # the reference's forward on the meta device
    est = tool.estimate(ledger, small, full, spec.schema, dict(tool.FIXED_RATES))
    tool.print_report(ledger, info, est, spec.schema, full, dict(tool.FIXED_RATES))
    out = capsys.readouterr().out
    assert "same_storage_overwrite" in out and "probes verifier" in out
    sso = [r for r in est if r["phase"] == "warm" and r["probe"] == "same_storage_overwrite" and r["shape"] == 0]
    # the CPU generator draws only the scatters' 8 positions and 8 extremes, whatever the shape
    # (3 * 1.07 G elements of hidden-state rewrites when _resample drew on the CPU)
    assert sso and 0 < sso[0]["cpu_gen_elems"] <= 2 * (8 + 8)


# ---------------------------------------------------------------------------------------------
# each shortcut against the work it replaces


@pytest.mark.parametrize("numel", [1, 2, 3, 8, 9, 64, 3072, 100_003, 1 << 24])
@pytest.mark.parametrize("seed", [0, 1101 * 131, 2**40 + 7])
def test_scatter_positions_are_randperms_first_entries(numel: int, seed: int) -> None:
    count = min(8, numel)
    want = torch.randperm(numel, generator=torch.Generator().manual_seed(seed))[:count]
    got = C.scatter_positions(numel, count, torch.Generator().manual_seed(seed))
    assert torch.equal(got, want)


def test_scatter_positions_past_randperms_forward_range_are_distinct_and_in_range() -> None:
    numel = C.RANDPERM_FORWARD_MAX + 12345  # a 06-sized tensor: no permutation of it is made
    got = C.scatter_positions(numel, 8, torch.Generator().manual_seed(5))
    again = C.scatter_positions(numel, 8, torch.Generator().manual_seed(5))
    assert torch.equal(got, again) and len(set(got.tolist())) == 8
    assert int(got.min()) >= 0 and int(got.max()) < numel


def _changed_beyond(a: list[torch.Tensor], b: list[torch.Tensor], atol: float, rtol: float) -> int:
    """The count as graders.probes.cases computed it on its own before change_and_moved (the oracle)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x.shape == y.shape and x.numel():
            xd, yd = x.double(), y.double()
            n += int((~((xd - yd).abs() <= atol + rtol * xd.abs())).sum().item())
    return n


def test_change_and_moved_is_max_change_and_changed_beyond() -> None:
    g = torch.Generator().manual_seed(0)
    a = [torch.randn(5, 7, generator=g).to(torch.bfloat16), torch.randn(3, generator=g)]
    b = [a[0].clone(), a[1] * 1.5]
    b[0][1, 2] = float("nan")
    b[0][0, 0] = 100.0
    for x, y in ((a, b), (a, a), (a, [b[0], torch.zeros(4)]), ([torch.zeros(2)], [torch.zeros(3)]),
                 ([torch.zeros(0)], [torch.zeros(0)])):
        assert C.change_and_moved(x, y, 0.02, 0.02) == (C.max_change(x, y), _changed_beyond(x, y, 0.02, 0.02))


def test_bit_identical_compares_bits() -> None:
    x = torch.tensor([1.0, float("nan"), 0.0], dtype=torch.bfloat16)
    assert C.bit_identical([x], [x.clone()])
    assert not C.bit_identical([x], [torch.tensor([1.0, float("nan"), -0.0], dtype=torch.bfloat16)])
    assert not C.bit_identical([x], [x.float()]) and not C.bit_identical([x], [x, x])
    f8 = torch.randn(6).to(torch.float8_e4m3fn)
    assert C.bit_identical([f8, torch.arange(3)], [f8.clone(), torch.arange(3)])
    assert not C.bit_identical([torch.arange(3)], [torch.arange(1, 4)])


def test_the_recorder_links_only_a_bit_identical_save(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, "warm_")
    out = torch.randn(4, 4)
    rec.save("a", out)
    rec.save("b", out.clone())  # same bits: a second name
    rec.save("c", out + 1)  # new bits: a new file
    rec.save("d", [out + 1, out])  # a different output list
    a, b, c, d = (tmp_path / f"warm_{n}.pt" for n in "abcd")
    assert a.stat().st_ino == b.stat().st_ino and a.stat().st_nlink == 2
    assert c.stat().st_nlink == 1 and d.stat().st_nlink == 1
    for path, want in ((a, [out]), (b, [out]), (c, [out + 1]), (d, [out + 1, out])):
        got = torch.load(path, weights_only=True)
        assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert rec.files == ["warm_a.pt", "warm_b.pt", "warm_c.pt", "warm_d.pt"]


def test_the_verifier_reuses_a_comparison_only_for_the_same_bits_reference_and_tolerance(tmp_path: Path) -> None:
    v = V.Verifier({"problem_dir": str(MOE), "device": "cpu", "out_dir": str(tmp_path)})
    ref = [torch.randn(6, 5).to(torch.bfloat16)]
    sol = [ref[0].clone()]
    sol[0][2, 3] += 1.0
    calls: list[int] = []
    real = C.compare

    def counting(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    C_compare = C.compare
    try:
        C.compare = counting  # type: ignore[assignment]
        first = v.cmp(sol, ref, [])
        again = v.cmp([sol[0].clone()], ref, [])
        assert len(calls) == 1 and again == first and again is not first
        v.cmp(sol, ref, [], atol=0.5)  # another tolerance
        v.cmp([ref[0].clone()], ref, [])  # other bits
        v.cmp(sol, [ref[0].clone()], [])  # another reference object
        assert len(calls) == 4
    finally:
        C.compare = C_compare  # type: ignore[assignment]
    assert first == real(sol, ref, atol=v.atol, rtol=v.rtol, output_kind="tensor", inputs=None)


# ---------------------------------------------------------------------------------------------
# the verdicts, every shortcut on vs every shortcut off


def _probe_results(problem: Path, solution: Path, tmp: Path) -> list[dict[str, Any]]:
    base = {"problem_dir": str(problem), "solution": str(solution), "device": "cpu", "probes": CPU_PROBES,
            "out_dir": str(tmp / "out"), "shapes": "small", "smoke": True}
    if (tmp / "out").exists():
        shutil.rmtree(tmp / "out")
    fresh = run_untrusted({**base, "mode": "fresh"})
    warm = run_untrusted({**base, "mode": "warm"})
    return list(V.verify({**base, "warm_manifest": warm, "fresh_manifest": fresh})["probes"])


@pytest.mark.parametrize("problem,solution", [
    (MOE, GENUINE),
    (MOE, MOE / "examples" / "broken_no_silu.py"),
    (HARD / "01_fp8_gemm", HARD / "01_fp8_gemm" / "examples" / "hack_output_memo.py"),
    (HARD / "05_topk_bitonic", None),  # top-k: the comparison reads the inputs
], ids=["06_genuine", "06_broken", "01_output_memo", "05_reference"])
def test_probe_results_are_those_of_the_unshortened_probes(problem: Path, solution: Path | None, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if solution is None:
        solution = tmp_path / "solution.py"
        shutil.copy(problem / "reference.py", solution)
    fast = _probe_results(problem, solution, tmp_path)
    # every shortcut off: a full randperm per scatter step, no reused comparison or linked file, the
    # two change statistics computed apart
    monkeypatch.setattr(C, "scatter_positions", lambda n, count, g: torch.randperm(n, generator=g)[:count])
    monkeypatch.setattr(C, "bit_identical", lambda a, b: False)
    monkeypatch.setattr(C, "change_and_moved",
                        lambda a, b, atol, rtol: (C.max_change(a, b), _changed_beyond(a, b, atol, rtol)))
    slow = _probe_results(problem, solution, tmp_path)
    assert json.dumps(fast, sort_keys=True, default=str) == json.dumps(slow, sort_keys=True, default=str)
    assert {p["probe"] for p in fast} == set(CPU_PROBES)
