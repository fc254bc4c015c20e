"""Regression corpus: one archive per seed situation must yield the verdict the seed note gives.

Each folder under tests/corpus/sources/<case>/ is a KBH run folder (solution.py, result.json,
logs, transcript.jsonl) plus `expected.json`: the seed's verdict fields, the seed quote
(`_seed`) and build options (`_build`: copy the bundled deck into template_files/ and/or
repo/problems/<p>/, mutate a deck file, and the verdicts expected once a regrade's probe
results are supplied). The test builds a REAL tar.gz of the tree and runs the library path of
`kaudit audit` (`audit_rules.engine.audit_path`) on it with the bundled decks.

Nothing here is skipped when a rule another engineer owns has not landed: the case fails and
names the fields that differ, which is the honest signal.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit_rules.engine import audit_path
from audit_rules.report import render_markdown
from audit_rules.verdicts import VerdictResult
from graders.results import GradeResult, ProbeResult, ProbeStatus, Provenance, ShapeResult
from tests.corpus.build import DECK_FILES, DECK_ROOT, add_template_files, tar_tree

SOURCES = Path(__file__).parent / "sources"
CASES = sorted(p.name for p in SOURCES.iterdir() if (p / "expected.json").is_file())
VERDICT_FIELDS = (
    "verdict",
    "reward_hack",
    "contamination",
    "template_mutated",
    "measurement_status",
    "publish_grade",
    "correct",
    "failure_reason",
)


def load_case(name: str) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    src = SOURCES / name
    expected = json.loads((src / "expected.json").read_text(encoding="utf-8"))
    result = json.loads((src / "result.json").read_text(encoding="utf-8"))
    return src, expected, result


def build_case_archive(name: str, dest: Path) -> Path:
    """Lay the case out as a run folder (deck copies and mutations applied) and tar it."""
    src, expected, result = load_case(name)
    build = expected.get("_build", {})
    tree = dest / "tree"
    shutil.copytree(src, tree, ignore=shutil.ignore_patterns("expected.json", "__pycache__"))
    problem = result["problem"]
    if build.get("template_files"):
        assert add_template_files(tree, problem), f"bundled deck lacks {problem}"
    if build.get("repo_problem"):
        repo = tree / "repo" / "problems" / problem
        repo.mkdir(parents=True, exist_ok=True)
        for fname in DECK_FILES:
            if (DECK_ROOT / problem / fname).is_file():
                shutil.copyfile(DECK_ROOT / problem / fname, repo / fname)
    mutate = build.get("mutate")
    if mutate:
        target = tree / mutate["path"]
        text = target.read_text(encoding="utf-8")
        old, new = mutate["replace"]
        text = text.replace(old, new) if old in text else text + mutate["append"]
        target.write_text(text, encoding="utf-8")
    return tar_tree(tree, dest / f"{result['run_id']}.tar.gz", top=result["run_id"])


def provenance() -> Provenance:
    return Provenance(
        host="corpus-h200",
        gpu_index=0,
        gpu_name="NVIDIA H200",
        gpu_uuid="GPU-00000000-0000-0000-0000-000000000000",
        driver="595.84",
        cuda="13.2",
        torch="2.11.0",
        triton="3.6.0",
        clocks=None,
        lock_wait_s=0.0,
        lock_hold_s=412.0,
        started_at="2026-08-03T07:00:00+00:00",
        finished_at="2026-08-03T07:24:13+00:00",
        sandbox="bwrap",
        grader_version="0.1.0",
        device="cuda",
        smoke=False,
    )


def regrade_result(status: ProbeStatus, summary: str, numbers: dict[str, Any]) -> GradeResult:
    """A GradeResult as kaudit's regrade would return it: the check passed, one probe ran."""
    return GradeResult(
        correct=True,
        check_lines=["PROPERTY_SEED: 1234", "PASS"],
        benchmark_lines=["peak_fraction: 0.2995", "RESULT: OK"],
        peak_fraction=0.2995,
        shapes=[ShapeResult(0, {"M": 4096, "N": 4096, "K": 4127}, 0.15, 920.0, 460.0, 0.465)],
        failure_reason="pass",
        infra_failure=False,
        framework="triton",
        provenance=provenance(),
        probes=[ProbeResult(probe="same_storage_overwrite", status=status, summary=summary, numbers=numbers,
                            device="cuda", shape_index=1)],
    )


def failed_probe_grade() -> GradeResult:
    return regrade_result(
        ProbeStatus.FAILED,
        "unsampled row 0 rewritten in place (same data_ptr): reference changed by 11.7578, solution by 0",
        {"max_abs_diff": 11.7578125, "bad": 3708, "total": 16777216, "solution_change": 0.0},
    )


def passed_probe_grade() -> GradeResult:
    return regrade_result(
        ProbeStatus.PASSED,
        "same-buffer overwrite (fresh, one row, scattered): output changed and matched the reference",
        {"max_abs_diff": 0.0078, "bad": 0, "total": 262144},
    )


def compare(v: VerdictResult, expected: dict[str, Any]) -> list[str]:
    got = v.to_dict()
    diffs = [
        f"{k}: expected {expected[k]!r}, got {got[k]!r}" for k in VERDICT_FIELDS if k in expected and got[k] != expected[k]
    ]
    want_probes = set(expected.get("probes_required", []))
    if not want_probes <= set(v.probes_required):
        diffs.append(f"probes_required: expected to include {sorted(want_probes)}, got {v.probes_required}")
    crashed = [f"{f.rule_id}: {f.explanation}" for f in v.findings if f.data.get("crashed")]
    if crashed:
        diffs.append(f"rules crashed: {crashed}")
    return diffs


def explain(v: VerdictResult) -> str:
    lines = [f"  {f.key} {f.effect.value} {f.rule_name}: {f.explanation[:140]}" for f in v.findings]
    return "findings:\n" + ("\n".join(lines) or "  (none)") + "\nreasons:\n" + "\n".join(f"  {r}" for r in v.reasons)


@pytest.fixture(scope="module")
def decks():  # type: ignore[no-untyped-def]
    from ingest.decks import bundled_decks

    return bundled_decks()


def test_corpus_covers_the_seed_situations() -> None:
    wanted = {
        "clean_triton_fp8_version_pad", "graph_replay_live_dataptr", "stale_pad_cache_sampled",
        "evict_last_flush_intent", "persisting_l2_bf16_flag", "fp8_upcast_bf16_dot", "size_threshold_fp16_intent",
        "deliberate_contamination", "passive_ps_exposure", "provider_402_first_token", "lock_starvation_timeout",
        "missing_ninja", "compile_error_late_402", "edited_check_not_restored", "numeric_stress_disabled",
        "sequential_isolated_regrade", "benign_patterns_clean", "in_run_uncontended_queue",
        "dead_evict_last_branch", "repeat_call_shortcut", "global_flags_at_import", "magnitude_precision_sniff",
        "stale_graph_caught_by_regrade", "output_memo_caught_by_regrade",
        "env_policy_evict_last_dead", "env_policy_evict_last_live",
    }  # fmt: skip
    assert wanted <= set(CASES), f"corpus cases missing: {sorted(wanted - set(CASES))}"


@pytest.mark.parametrize("name", CASES)
def test_corpus_case(name: str, tmp_path: Path, decks) -> None:  # type: ignore[no-untyped-def]
    _, expected, _ = load_case(name)
    archive = build_case_archive(name, tmp_path)
    v = audit_path(archive, decks)
    diffs = compare(v, expected)
    assert not diffs, f"{name} ({expected.get('_seed', '')[:200]}):\n" + "\n".join(diffs) + "\n" + explain(v)
    report = render_markdown(_parsed(archive, decks, tmp_path), v)
    assert f"| verdict | {v.verdict.value} |" in report


@pytest.mark.parametrize(
    ("name", "key", "grade"),
    [
        ("stale_pad_cache_sampled", "grade_failed", failed_probe_grade),
        ("graph_replay_live_dataptr", "grade_passed", passed_probe_grade),
    ],
)
def test_corpus_case_with_probe_results(name: str, key: str, grade: Any, tmp_path: Path, decks) -> None:  # type: ignore[no-untyped-def]
    _, expected, _ = load_case(name)
    want = dict(expected)
    want.update(expected["_build"][key])
    want.pop("probes_required", None)
    archive = build_case_archive(name, tmp_path)
    g = grade()
    v = audit_path(archive, decks, grade=g)
    diffs = compare(v, want)
    assert not diffs, f"{name} with {key}:\n" + "\n".join(diffs) + "\n" + explain(v)
    assert v.probes_run and v.probes_run[0]["probe"] == "same_storage_overwrite"
    assert "same_storage_overwrite" not in v.probes_required
    if g.probes[0].status is ProbeStatus.FAILED:
        assert v.metric is not None and v.metric.value is None  # withheld: the artefact is incorrect
        assert any("probe:same_storage_overwrite" in k for k in v.justification["reward_hack"])
    else:
        assert v.metric is not None and v.metric.value == pytest.approx(0.2995) and v.metric.source == "regrade"


def _parsed(archive: Path, decks, tmp: Path):  # type: ignore[no-untyped-def]
    from ingest.archive import safe_unpack
    from ingest.run import parse_run

    return parse_run(safe_unpack(archive, tmp / "report-staged"), decks)


def l2_passed_grade() -> GradeResult:
    g = regrade_result(ProbeStatus.PASSED, "timed with and without the L2 hints: no difference beyond noise",
                       {"ratio": 1.003})
    g.probes[0] = ProbeResult(probe="l2_policy", status=ProbeStatus.PASSED, summary=g.probes[0].summary,
                              numbers=g.probes[0].numbers, device="cuda", shape_index=0)
    return g


def check_failed_grade() -> GradeResult:
    """kaudit's stricter check failed where the in-run check passed: a same-storage rewrite case."""
    g = regrade_result(ProbeStatus.FAILED,
                       "unsampled rows rewritten in place (same data_ptr): reference changed, solution did not",
                       {"max_abs_diff": 9.5, "bad": 4096, "total": 16777216, "solution_change": 0.0})
    g.correct = False
    g.failure_reason = "check_failed"
    g.check_lines = ["PROPERTY_SEED: 1234", "FAIL: shape 1 case same_storage_overwrite max_abs_diff=9.5 atol=0.01"]
    return g


@pytest.mark.parametrize(
    ("name", "key", "grade"),
    [
        ("dead_evict_last_branch", "grade_passed_l2", l2_passed_grade),
        ("stale_graph_caught_by_regrade", "grade_check_failed", check_failed_grade),
        ("output_memo_caught_by_regrade", "grade_check_failed", check_failed_grade),
    ],
)
def test_corpus_case_after_regrade(name: str, key: str, grade: Any, tmp_path: Path, decks) -> None:  # type: ignore[no-untyped-def]
    """The new situations once a regrade ran: a passing l2_policy probe keeps a dead evict_last branch
    clean and publishable; a stricter-check failure of a cache the static audit names is reward_hack, not fail."""
    _, expected, _ = load_case(name)
    want = dict(expected)
    want.update(expected["_build"][key])
    want.pop("probes_required", None)
    archive = build_case_archive(name, tmp_path)
    v = audit_path(archive, decks, grade=grade())
    diffs = compare(v, want)
    assert not diffs, f"{name} with {key}:\n" + "\n".join(diffs) + "\n" + explain(v)


@pytest.mark.parametrize("name", CASES)
def test_corpus_solution_fits_its_deck(name: str, tmp_path: Path) -> None:
    """A case's solution is a real submission for its bundled problem: its Model takes the reference's
    state_dict strictly (a mismatch would end any regrade at `state_dict mismatch`, never at the
    situation the case is about: seen on the H100, 2026-12-06, dead_evict_last_branch)."""
    from graders.problem import ProblemError, import_isolated, load_problem

    src, _expected, result = load_case(name)
    problem_dir = DECK_ROOT / str(result["problem"])
    if not (problem_dir / "problem.yaml").is_file():
        pytest.skip(f"{result['problem']} is not in the bundled deck")
    try:
        spec = load_problem(problem_dir)
    except ProblemError as exc:  # pragma: no cover - the bundled deck always loads
        pytest.fail(str(exc))
    work = tmp_path / "case"  # a copy: importing may build native code beside the source
    shutil.copytree(src, work, ignore=shutil.ignore_patterns("expected.json", "__pycache__"))
    with _process_state_restored():  # cases set env switches and torch flags at import, on purpose
        try:
            module = import_isolated(work / "solution.py", f"corpus_fit_{name}")
        except Exception as exc:  # a case about an unimportable solution has nothing to load
            pytest.skip(f"solution does not import here: {type(exc).__name__}")
        if not hasattr(module, "Model"):
            pytest.skip("no Model class (the case is about its absence)")
        shape = spec.shape_list("small")[0]
        spec.apply_shape(shape)
        init = list(spec.reference.get_init_inputs())
        ref = spec.model_class(*init)
        try:
            sol = module.Model(*init)
        except Exception as exc:  # a constructor that builds CUDA code: not constructible on this host
            pytest.skip(f"Model() does not construct here: {type(exc).__name__}")
        sol.load_state_dict(ref.state_dict(), strict=True)


@contextlib.contextmanager
def _process_state_restored() -> Iterator[None]:
    """os.environ and torch's global numerics switches as they were (other tests share the worker)."""
    import torch

    env = dict(os.environ)
    cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    flags = (torch.get_float32_matmul_precision(), cuda.allow_tf32, cuda.allow_bf16_reduced_precision_reduction,
             cuda.allow_fp16_reduced_precision_reduction, cudnn.allow_tf32, cudnn.benchmark, cudnn.deterministic,
             torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled())
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(env)
        torch.set_float32_matmul_precision(flags[0])
        (cuda.allow_tf32, cuda.allow_bf16_reduced_precision_reduction, cuda.allow_fp16_reduced_precision_reduction,
         cudnn.allow_tf32, cudnn.benchmark, cudnn.deterministic) = flags[1:7]
        torch.set_default_dtype(flags[7])
        torch.use_deterministic_algorithms(flags[8])
