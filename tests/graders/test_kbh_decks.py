"""The real KernelBench-Hard decks (../shared/kbh-upstream, read in place): every problem.yaml of
every hard deck loads with its real tolerances, unknown keys are refused by name, the other deck
families import, `check --deck NAME` finds an imported deck, and a tampered deck is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from graders import decks, kbh, official
from graders.problem import ProblemError, Tolerance, load_problem

from .conftest import REPO, UPSTREAM, import_deck, needs_upstream

pytestmark = needs_upstream

HARD_PROBLEMS = ["01_fp8_gemm", "02_kda_cutlass", "03_paged_attention", "05_topk_bitonic", "06_sonic_moe_swiglu",
                 "07_w4a16_gemm"]


def _dtype_keys(raw: dict[str, object]) -> dict[str, object]:
    tol = raw.get("tolerance") or {}
    assert isinstance(tol, dict)
    return {k: v for k, v in tol.items() if k not in kbh.INERT_TOLERANCE_KEYS and k not in kbh.METRIC_TOLERANCE_KEYS}


@pytest.mark.parametrize("gpu", ["h100", "b200", "rtxpro6000"])
def test_every_real_hard_problem_loads_with_its_real_tolerances(gpu: str) -> None:
    root = UPSTREAM / "hard" / f"problems-{gpu}"
    names = sorted(p.name for p in root.iterdir() if (p / "problem.yaml").is_file())
    assert names == HARD_PROBLEMS
    for name in names:
        spec = load_problem(root / name)
        raw = yaml.safe_load((root / name / "problem.yaml").read_text())
        assert spec.schema == "kbh" and spec.id == name
        for key, value in _dtype_keys(raw).items():
            dtype = getattr(torch, key.removeprefix("torch."))
            want = Tolerance(float(value["atol"]), float(value["rtol"])) if isinstance(value, dict) else \
                Tolerance(float(value), float(value))
            assert spec.tolerance.for_dtype(dtype) == want, (gpu, name, key)
        # the harness's own numeric-stress cases, each with a tolerance that is never a silent zero
        assert spec.numeric_stress, name
        assert all(c.tolerance.atol > 0 and c.tolerance.rtol > 0 for c in spec.numeric_stress), name
        assert spec.correct_trials == int(raw.get("num_correct_trials", 3))
        assert spec.trials == int(raw.get("num_perf_trials", 30))
        assert spec.forbidden == [str(x) for x in raw.get("forbidden") or []]
        assert spec.peak_gbps and spec.peak_gbps > 0
        if raw.get("regime") == "compute":
            assert spec.peak_tflops and spec.peak_tflops > 0


def test_w4a16_is_bf16_ten_percent_relative_and_other_dtypes_fall_back_to_the_harness() -> None:
    spec = load_problem(UPSTREAM / "hard" / "problems-h100" / "07_w4a16_gemm")
    assert spec.tolerance.for_dtype(torch.bfloat16) == Tolerance(0.10, 0.10)
    assert (spec.tolerance.atol, spec.tolerance.rtol) == (0.10, 0.10)  # the output dtype is bf16
    # float32 has no override: the registered harness's DEFAULT_TOLERANCE applies (read, not restated)
    harness = kbh.load_harness(UPSTREAM / "hard" / "src")
    fp32 = harness.correctness.DEFAULT_TOLERANCE[torch.float32]
    assert spec.tolerance.for_dtype(torch.float32) == Tolerance(float(fp32["atol"]), float(fp32["rtol"]))
    assert {c.name for c in spec.numeric_stress} == {"small_activation", "large_activation"}
    fp8 = load_problem(UPSTREAM / "hard" / "problems-h100" / "01_fp8_gemm")
    assert any("fp8_e4m3fn" in n and "inert" in n for n in fp8.notes)


def _editable_copy(tmp_path: Path, problem: str) -> Path:
    """A writable copy of one real problem beside a copy of its harness (tmp only)."""
    dst = tmp_path / "problems" / problem
    shutil.copytree(UPSTREAM / "hard" / "problems-h100" / problem, dst)
    shutil.copytree(UPSTREAM / "hard" / "src", tmp_path / "src")
    return dst


@pytest.mark.parametrize("edit, named", [
    (lambda raw: raw["tolerance"].update({"bogus_dtype": 0.5}), "bogus_dtype"),
    (lambda raw: raw["tolerance"].update({"bfloat16": {"atol": 0.1, "ratol": 0.1}}), "ratol"),
    (lambda raw: raw.update({"frobnicate": 1}), "frobnicate"),
    (lambda raw: raw.update({"peak_tflops_key": "bf17"}), "bf17"),
])
def test_unknown_keys_are_refused_naming_the_key(tmp_path: Path, edit: object, named: str) -> None:
    pdir = _editable_copy(tmp_path, "07_w4a16_gemm")
    raw = yaml.safe_load((pdir / "problem.yaml").read_text())
    edit(raw)  # type: ignore[operator]
    (pdir / "problem.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ProblemError, match=named):
        load_problem(pdir)


def test_imported_deck_keeps_its_harness_and_loads_from_the_store(tmp_path: Path) -> None:
    loc = import_deck(UPSTREAM / "hard" / "problems-h100", "kbh-hard-h100", tmp_path / "data",
                      UPSTREAM / "hard" / "src")
    assert loc.problems == tuple(HARD_PROBLEMS) and loc.harness_name == "src"
    assert (loc.harness / "eval" / "trusted_entrypoint.py").is_file()
    again = decks.find_deck("kbh-hard-h100", tmp_path / "data")
    assert again.content_sha256 == loc.content_sha256
    spec = load_problem(loc.root / "07_w4a16_gemm")
    assert spec.harness_dir == loc.harness.resolve()
    assert spec.tolerance.for_dtype(torch.bfloat16) == Tolerance(0.10, 0.10)
    assert official.default_mode(loc.root / "07_w4a16_gemm") == "both"
    assert official.official_support(loc.root / "07_w4a16_gemm", "cuda") == (loc, None)
    _, why = official.official_support(loc.root / "07_w4a16_gemm", "cpu")
    assert why is not None and "CUDA" in why and "hardened mode only" in why


def test_a_tampered_deck_is_refused(tmp_path: Path) -> None:
    loc = import_deck(UPSTREAM / "hard" / "problems-h100", "kbh-hard-h100", tmp_path / "data",
                      UPSTREAM / "hard" / "src")
    target = loc.root / "07_w4a16_gemm" / "check.py"
    os.chmod(target, 0o644)
    target.write_text(target.read_text().replace('print("PASS")', 'print("PASS")  # edited'))
    with pytest.raises(decks.DeckTampered, match="problems/07_w4a16_gemm/check.py"):
        decks.find_deck("kbh-hard-h100", tmp_path / "data")
    with pytest.raises(decks.DeckTampered):
        official.official_support(loc.root / "07_w4a16_gemm", "cuda")
    # the harness is part of the registered deck too
    loc2 = import_deck(UPSTREAM / "hard" / "problems-b200", "kbh-hard-b200", tmp_path / "data",
                       UPSTREAM / "hard" / "src")
    timing = loc2.harness / "eval" / "timing.py"
    os.chmod(timing, 0o644)
    timing.write_text(timing.read_text() + "\n# edited\n")
    with pytest.raises(decks.DeckTampered, match="src/eval/timing.py"):
        decks.find_deck("kbh-hard-b200", tmp_path / "data")


def test_mega_and_cuda_families_import_and_say_how_they_are_graded(tmp_path: Path) -> None:
    data = tmp_path / "data"
    mega = import_deck(UPSTREAM / "mega" / "problems", "kbh-mega", data, UPSTREAM / "mega" / "src")
    cuda = import_deck(UPSTREAM / "cuda" / "problems-h100", "kbh-cuda-h100", data, UPSTREAM / "cuda" / "src")
    assert mega.problems == ("02_kimi_linear_decode",)
    assert cuda.problems == ("01_glm52_fused_moe", "02_deepseek_nsa", "03_megaqwen_decode", "04_grid_mingru_sps")
    for loc in (mega, cuda):
        for p in loc.problems:
            assert official.default_mode(loc.root / p) == "both"
            assert official.official_support(loc.root / p, "cuda")[1] is None  # their own scripts grade them
    # mega is a latency (speedup vs baseline.py) deck, cuda/03-04 throughput decks: hardened says why not
    why = official.hardened_support(mega.root / "02_kimi_linear_decode")
    assert why is not None and "latency" in why and "check.py/benchmark.py" in why
    for p in ("03_megaqwen_decode", "04_grid_mingru_sps"):
        assert "throughput" in (official.hardened_support(cuda.root / p) or "")
        with pytest.raises(ProblemError, match="official mode"):
            load_problem(cuda.root / p)
    for p in ("01_glm52_fused_moe", "02_deepseek_nsa"):  # roofline regimes: hardened grades them too
        assert official.hardened_support(cuda.root / p) is None
        spec = load_problem(cuda.root / p)
        assert spec.schema == "kbh" and spec.harness_dir == cuda.harness.resolve()
    with pytest.raises(ValueError, match="--mode hardened cannot grade 02_kimi_linear_decode"):
        from graders.regrade import regrade

        regrade(tmp_path, "02_kimi_linear_decode", mega.root, device="cpu", mode="hardened")


FORBIDDEN_W4A16 = '''"""Calls a forbidden op of the real W4A16 deck."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, M, N, K, group_size=128):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.linear(x, x)
'''


def test_graders_cli_check_resolves_an_imported_deck_by_name(tmp_path: Path) -> None:
    data = tmp_path / "data"
    import_deck(UPSTREAM / "hard" / "problems-h100", "kbh-hard-h100", data, UPSTREAM / "hard" / "src")
    sol = tmp_path / "solution.py"
    sol.write_text(FORBIDDEN_W4A16)
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAUDIT_DATA_DIR": str(data), "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "graders.cli", "check", str(sol), "--problem", "07_w4a16_gemm",
                           "--deck", "kbh-hard-h100", "--device", "cpu"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    # the real deck's forbidden list decided: it was found in the data dir, not under kernels/
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "FAIL: forbidden op used: torch.nn.functional.linear"
    missing = subprocess.run([sys.executable, "-m", "graders.cli", "check", str(sol), "--problem", "07_w4a16_gemm",
                              "--deck", "kbh-nope", "--device", "cpu"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1 and "no deck 'kbh-nope' registered" in missing.stdout


def test_raw_input_rewrites_are_in_a_decks_contract_only_where_its_grader_makes_them() -> None:
    """The harness rewrites inputs behind their version counter only in its property stress
    (02/03/05/06); 01 and 07 get fresh inputs, so a (data_ptr, _version)-keyed input cache is
    inside their contract. kaudit's own decks include such rewrites."""
    from graders.problem import load_problem

    got = {p: load_problem(UPSTREAM / "hard" / "problems-h100" / p).raw_input_rewrites_in_contract
           for p in ("01_fp8_gemm", "02_kda_cutlass", "03_paged_attention", "05_topk_bitonic",
                     "06_sonic_moe_swiglu", "07_w4a16_gemm")}
    assert got == {"01_fp8_gemm": False, "02_kda_cutlass": True, "03_paged_attention": True,
                   "05_topk_bitonic": True, "06_sonic_moe_swiglu": True, "07_w4a16_gemm": False}
    assert load_problem(REPO / "kernels" / "hard" / "01_fp8_gemm").raw_input_rewrites_in_contract


def test_a_miss_only_behind_the_version_counter_is_told_apart() -> None:
    from graders.probes.verify import version_keyed_only

    ok = {"ok": True, "same_data_ptr": True, "version_bumped": True}
    raw_miss = {"ok": False, "same_data_ptr": True, "version_bumped": False}
    bumped_miss = {"ok": False, "same_data_ptr": True, "version_bumped": True}
    fresh_miss = {"ok": False, "same_data_ptr": False, "version_bumped": None}
    assert version_keyed_only([ok, raw_miss])
    assert not version_keyed_only([ok, ok])
    assert not version_keyed_only([raw_miss, bumped_miss])
    assert not version_keyed_only([raw_miss, fresh_miss])


def test_state_changes_are_in_a_decks_contract_only_where_its_grader_makes_them() -> None:
    """The harness changes a model's state after calling it only in a numeric-stress case that scales
    state (01 fp8's `small_weight`); every other hard problem loads the state once, before the first
    call. kaudit's own decks rescale state in their check."""
    got = {p: load_problem(UPSTREAM / "hard" / "problems-h100" / p).state_changes_in_contract for p in HARD_PROBLEMS}
    assert got == {"01_fp8_gemm": True, "02_kda_cutlass": False, "03_paged_attention": False,
                   "05_topk_bitonic": False, "06_sonic_moe_swiglu": False, "07_w4a16_gemm": False}
    assert load_problem(REPO / "kernels" / "hard" / "07_w4a16_gemm").state_changes_in_contract


def test_a_weight_cache_built_on_the_first_call_is_inside_the_real_w4a16_contract(tmp_path: Path) -> None:
    """A weight repack keyed on the pointer alone (no version) FAILS kaudit's own 07 deck's check and its
    weight_mutation probe (tests/regrade/test_probe_contract.py); the real 07 deck's grader never
    changes weights after load_state_dict, so there it passes the check and the probe says FLAGGED
    (notable), not FAILED: expert audits call such lazy repacks legitimate. The real deck at one small
    shape (an imported copy whose shapes.py holds it; the CPU runs the reference in bf16)."""
    from graders.regrade import regrade
    from graders.results import ProbeStatus

    pdir = _editable_copy(tmp_path / "up", "07_w4a16_gemm")
    (pdir / "shapes.py").chmod(0o644)
    (pdir / "shapes.py").write_text('SHAPES = [{"M": 4, "N": 256, "K": 256}]\n')
    loc = import_deck(pdir.parent, "kbh-small", tmp_path / "data", tmp_path / "up" / "src")
    sol = tmp_path / "sol"
    sol.mkdir()
    shutil.copy(REPO / "tests" / "regrade" / "fixtures" / "w4a16_weight_ptr_repack.py", sol / "solution.py")
    g = regrade(sol, "07_w4a16_gemm", loc.root, device="cpu", probes=["weight_mutation"], mode="hardened",
                timeout_s=300)
    assert g.correct is True, (g.detail, g.check_lines)
    (wm,) = g.probes
    assert wm.status is ProbeStatus.FLAGGED, wm.summary
    assert "reference changed by" in wm.summary and "solution by 0" in wm.summary
    assert "inside its contract" in wm.summary
    shapes = wm.numbers["shapes"]
    assert shapes and all(s["state_changes_in_contract"] is False for s in shapes)


@pytest.mark.parametrize("family", ["hard", "cuda"])
def test_the_static_audits_reading_of_state_scaling_matches_the_imported_harness(family: str) -> None:
    """audit_rules reads which problems scale state from the harness's source (torch-free,
    graders.kbh.problems_scaling_state); graders.problem imports the harness. Same answers."""
    problems = sorted(p for p in (UPSTREAM / family / "problems-h100").iterdir() if (p / "problem.yaml").is_file())
    table = kbh.problems_scaling_state(UPSTREAM / family / "src")
    assert table is not None and problems
    checked = 0
    for pdir in problems:
        try:
            spec = load_problem(pdir)
        except ProblemError:
            continue  # graded by official mode only (not a roofline regime)
        assert table.get(pdir.name, False) is spec.state_changes_in_contract, pdir.name
        checked += 1
    assert checked >= 2  # hard: all six; cuda: the two roofline problems (01, 04)
