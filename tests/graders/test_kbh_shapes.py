"""The real decks bind shape keys to reference globals in their own check.py/benchmark.py
(03_paged_attention: `reference.SEQ_LEN = shape["seq_len"]`). kaudit's hardened grader must build
every shape's inputs the same way, or it times the default shape against the shape's roofline
(seen on the H200: paged attention at 0.027 ms for every shape, "4.9x the bandwidth peak")."""

from __future__ import annotations

from pathlib import Path

import pytest

from graders import decks as deck_store
from graders.kbh import shape_bindings
from graders.problem import load_problem
from ingest.decks import scan_deck_dir

UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "kbh-upstream" / "hard"
pytestmark = pytest.mark.skipif(not (UPSTREAM / "problems-h100").is_dir(), reason="../shared/kbh-upstream not present")


@pytest.fixture(scope="module")
def deck_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("kdata")
    src = UPSTREAM / "problems-h100"
    snap = scan_deck_dir(src, "kbh-hard-h100")
    problems = {p: {f: fh.sha256 for f, fh in files.items()} for p, files in snap.problems.items()}
    harness = UPSTREAM / "src"
    loc = deck_store.materialize("kbh-hard-h100", src.resolve(), problems, harness_dir=harness.resolve(),
                                 harness=deck_store.scan_harness(harness), data_dir=data)
    return Path(loc.root)


def test_bindings_are_read_from_the_decks_own_files() -> None:
    paged = shape_bindings(UPSTREAM / "problems-h100" / "03_paged_attention")
    assert paged["seq_len"] == "SEQ_LEN" and paged["batch"] == "BATCH" and paged["num_kv_heads"] == "NUM_KV_HEADS"
    assert shape_bindings(UPSTREAM / "problems-h100" / "01_fp8_gemm") == {"M": "M", "N": "N", "K": "K"}


def test_every_shape_of_paged_attention_gets_its_own_inputs(deck_root: Path) -> None:
    spec = load_problem(deck_root / "03_paged_attention")
    seen = []
    for shape in spec.shape_list("all"):
        spec.apply_shape(shape)
        assert spec.reference.SEQ_LEN == shape["seq_len"] and spec.reference.BATCH == shape["batch"]
        q = spec.reference.get_inputs()[0]
        assert q.shape[0] == shape["batch"] and q.shape[-1] == shape["head_dim"]
        seen.append(tuple(q.shape))
    assert len(set(seen)) == len(seen), seen  # not the default shape five times


def test_kbh_decks_draw_like_their_own_grader(deck_root: Path) -> None:
    """check.py/benchmark.py of a KBH deck seed, draw with the CPU generator and move to the device;
    kaudit's hardened grader draws the same way there (the same values the official check sees),
    and on the device only for its own decks."""
    import contextlib

    import torch

    kbh = load_problem(deck_root / "01_fp8_gemm")
    own = load_problem(Path(__file__).resolve().parents[2] / "kernels" / "hard" / "01_fp8_gemm")
    assert isinstance(kbh.draw_context("cuda"), contextlib.nullcontext)
    assert isinstance(own.draw_context("cuda"), torch.device)


@pytest.mark.gpu
def test_kbh_inputs_on_cuda_are_the_official_graders_values(deck_root: Path) -> None:
    import torch

    from graders.correctness import _model_inputs

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU; run scripts/gpu_lane.sh on the H200")
    spec = load_problem(deck_root / "01_fp8_gemm")
    spec.apply_shape(spec.shape_list("all")[2])
    mine = _model_inputs(spec, 42, "cuda")
    torch.manual_seed(42)
    torch.cuda.manual_seed_all(42)
    theirs = [t.to("cuda") for t in spec.reference.get_inputs()]
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(mine, theirs, strict=True))
