"""Declared build dependencies (KAUDIT_BUILD_DEPS / Settings.build_deps / regrade(build_deps=)):
a folder the runs' original hosts had at DEST is bound read-only from SRC at DEST in every
sandboxed step of both modes, so a solution that reads or builds against it regrades here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from graders.regrade import regrade
from graders.sandbox import bwrap_works, parse_build_deps
from tests.graders.conftest import OFFICIAL_DECK, OFFICIAL_SOLUTIONS, import_deck


def test_declarations_parse_and_bad_ones_are_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "cutlass").mkdir()
    src = str(tmp_path / "cutlass")
    assert parse_build_deps(f" /workspace/refs/cutlass={src} , /tmp/cutlass/={src}") == (
        ("/workspace/refs/cutlass", src), ("/tmp/cutlass", src))
    assert parse_build_deps("") == ()
    for bad, why in [
        (f"workspace/cutlass={src}", "must be absolute"),
        ("/workspace/cutlass", "expected DEST=SRC"),
        (f"/workspace/cutlass={tmp_path / 'absent'}", "is not a folder on this host"),
        (f"/proc/x={src}", "cannot be a mount point"),
        (f"/={src}", "cannot be a mount point"),
        (f"/w/c={src},/w/c/={src}", "declared twice"),
    ]:
        with pytest.raises(ValueError, match=why) as info:
            parse_build_deps(bad)
        assert bad.split(",")[-1].strip() in str(info.value)


def test_the_service_setting_is_validated(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from service.settings import Settings

    with pytest.raises(ValidationError, match="is not a folder on this host"):
        Settings(data_dir=tmp_path, build_deps=f"/workspace/refs/cutlass={tmp_path / 'absent'}")
    (tmp_path / "c").mkdir()
    assert Settings(data_dir=tmp_path, build_deps=f"/workspace/refs/cutlass={tmp_path / 'c'}").build_deps


def _regrade_tiny(tmp_path: Path, text: str, **kw: Any) -> Any:
    """`text` as the solution of the tiny official deck's problem, regraded on the CPU under bwrap."""
    deck = import_deck(OFFICIAL_DECK / "problems", "tiny", tmp_path / "data", OFFICIAL_DECK / "src")
    sol = tmp_path / "sol"
    sol.mkdir(exist_ok=True)
    (sol / "solution.py").write_text(text)
    return regrade(sol, "tiny_gemm", deck.root, device="cpu", probes=[], timeout_s=240, sandbox_mode="bwrap", **kw)


@pytest.fixture
def deps(tmp_path: Path) -> str:
    tiny, other = tmp_path / "host-tiny", tmp_path / "host-other"
    tiny.mkdir()
    other.mkdir()
    (tiny / "scale.txt").write_text("1.0")
    (other / "bias.txt").write_text("0.0")
    return f"/kaudit/deps/tiny={tiny},/tmp/kaudit-dep={other}"


@pytest.mark.skipif(not bwrap_works()[0], reason="bubblewrap unusable on this host: nothing can be remapped")
def test_a_solution_needing_its_hosts_folders_regrades_in_both_modes_once_they_are_declared(
        tmp_path: Path, deps: str) -> None:
    def grade(**kw: Any) -> Any:
        return _regrade_tiny(tmp_path, (OFFICIAL_SOLUTIONS / "needs_dep.py").read_text(), mode="both", **kw)

    missing = grade(build_deps="")
    assert missing.correct is False and missing.official["status"] == "fail"
    assert missing.hardened["status"] == "fail" and "FileNotFoundError" in missing.hardened["fail_line"]
    declared = grade(build_deps=deps)
    assert declared.correct is True and declared.official["status"] == "graded", declared.official
    assert declared.hardened["status"] == "graded" and declared.hardened["correct"] is True
    assert declared.provenance is not None
    assert [d["dest"] for d in declared.provenance.extra["build_deps"]] == ["/kaudit/deps/tiny", "/tmp/kaudit-dep"]
    assert all(d["bound"] for d in declared.provenance.extra["sandbox"]["build_deps"])


@pytest.mark.skipif(not bwrap_works()[0], reason="bubblewrap unusable on this host: nothing can be remapped")
def test_the_bound_folder_is_read_only(tmp_path: Path, deps: str) -> None:
    text = (OFFICIAL_SOLUTIONS / "needs_dep.py").read_text().replace(
        "    BIAS = float(fh.read())",
        "    BIAS = float(fh.read())\nopen('/kaudit/deps/tiny/scale.txt', 'w').write('9')")
    g = _regrade_tiny(tmp_path, text, mode="hardened", build_deps=deps)
    assert g.correct is False and "OSError" in (g.check_lines[-1] if g.check_lines else ""), g.check_lines
    assert (Path(deps.split(",")[0].split("=")[1]) / "scale.txt").read_text() == "1.0"


@pytest.mark.skipif(not bwrap_works()[0], reason="bubblewrap unusable on this host: nothing can be remapped")
def test_a_destination_inside_a_system_bind_is_an_infra_failure_that_says_why(tmp_path: Path) -> None:
    (tmp_path / "dep").mkdir()
    g = _regrade_tiny(tmp_path, (OFFICIAL_SOLUTIONS / "honest.py").read_text(), mode="hardened",
                      build_deps=f"/usr/kaudit-dep={tmp_path / 'dep'}")
    assert g.infra_failure and g.correct is None, (g.failure_reason, g.detail)
    assert "inside the sandbox's bind of /usr" in (g.detail or ""), g.detail
    assert g.provenance is not None and g.provenance.extra.get("infra_reason") == "sandbox_setup", g.provenance.extra


def test_a_destination_may_neither_sit_inside_nor_cover_a_bind_the_sandbox_needs(tmp_path: Path) -> None:
    from graders.sandbox import SandboxSetupError, _bwrap_args

    ro, rw = ["/usr", "/opt/torch/.venv"], [tmp_path / "work"]
    ok = _bwrap_args(rw, ro, tmp_path, 3, 64, dep_binds=[("/workspace/refs/cutlass", str(tmp_path))])
    i = ok.index("/workspace/refs/cutlass")
    assert ok[i - 2:i + 1] == ["--ro-bind", str(tmp_path), "/workspace/refs/cutlass"]
    assert ok.index("--ro-bind") < i and ok.index("/tmp") < i  # after the /tmp tmpfs and the system binds
    with pytest.raises(SandboxSetupError, match="inside the sandbox's bind of /usr"):
        _bwrap_args(rw, ro, tmp_path, 3, 64, dep_binds=[("/usr/local/cutlass", str(tmp_path))])
    with pytest.raises(SandboxSetupError, match="would cover the sandbox's bind of /opt/torch/.venv"):
        _bwrap_args(rw, ro, tmp_path, 3, 64, dep_binds=[("/opt", str(tmp_path))])
