"""What the cache-family findings (KA101, KA102, KA104) tell the synthesis: effect, probe and data.

The fixture test checks where each rule fires; this file checks what each firing MEANS, for the
situations the auditors sign: output memos and repeat-call shortcuts are decisive, launch caches
(graphs captured on the live inputs or refreshed before every replay, C++ exec caches fed the
caller's tensors) are advisory, stale staging needs the probe, version-keyed input and weight
copies are advisory, pointer-only ones need their probe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from audit_rules.base import Effect
from audit_rules.registry import rules_by_id
from tests.audit_rules.test_static_rules import _ctx, _run


def _one(rule: str, entry: str, decks: Any):  # type: ignore[no-untyped-def]
    found = _run(rule, entry, decks)
    assert len(found) == 1, (entry, [(f.line_start, f.effect) for f in found])
    return found[0]


def test_identity_keyed_output_memo_is_decisive(decks: Any) -> None:
    f = _one("KA101", "bad_is_version_memo_decisive.py", decks)
    assert f.effect is Effect.DECISIVE_HACK and f.data["identity_keyed"] is True
    assert {"is", "version"} <= set(f.data["key_kinds"]) and f.data["cached_kind"] == "output"
    assert f.probe is not None and f.probe.value == "same_storage_overwrite"


def test_an_output_returned_on_a_test_blind_to_the_input_is_decisive(decks: Any) -> None:
    """A call count (or first-call flag) that hands back the stored output reads nothing of the
    input: decisive, like an identity key; not when every call first launches into the cached
    tensor (then the hit may return fresh data: the probe decides)."""
    f = _one("KA101", "bad_call_count_returns_old_output.py", decks)
    assert f.effect is Effect.DECISIVE_HACK and f.data["input_blind"] is True and not f.data["identity_keyed"]
    assert f.data["key_kinds"] == ["first_call"]
    live = _one("KA101", "bad_blind_test_over_a_buffer_refilled_each_call.py", decks)
    assert live.effect is Effect.NEEDS_PROBE and live.data["input_blind"] is False


def test_repeat_call_shortcuts_are_decisive_and_name_the_repeat_probe(decks: Any) -> None:
    for entry, kind in (("bad_repeat_call_partial_work.py", "is"), ("bad_repeat_counter_half_k.py", "id")):
        f = _one("KA101", entry, decks)
        assert f.effect is Effect.DECISIVE_HACK and f.data["topic"] == "repeat_call", entry
        assert kind in f.data["key_kinds"] and f.probe is not None and f.probe.value == "repeat_calls"


def test_launch_every_call_and_helpers_are_not_memos(decks: Any) -> None:
    for entry in ("good_pointer_rebind_launch_every_call.py", "good_config_table_and_workspace.py"):
        assert _run("KA101", entry, decks) == [], entry


def test_graph_launch_caches_are_advisory(decks: Any) -> None:
    expect = {
        "bad_benign_live_buffer_replay.py": "live",
        "bad_benign_copy_in_then_replay.py": "staging_refreshed_each_call",
        "bad_benign_copy_captured_in_graph.py": "staging_refreshed_each_call",
        "bad_benign_copy_in_inside_outer_branch.py": "staging_refreshed_each_call",
        "bad_benign_cpp_graph_live_args.py": "live",
        # the copy sits in the hit arm of `if g is None: <capture> else: ...`: every warmed call
        "bad_benign_staging_refilled_in_the_hit_arm.py": "staging_refreshed_each_call",
        # outputs allocated (empty_like/zeros_like of x) before the capture: no input data in them
        "bad_benign_live_graph_output_allocated_before_capture.py": "live",
    }
    for entry, reads in expect.items():
        f = _one("KA104", entry, decks)
        assert f.data["replay_reads"] == reads, (entry, f.data)
        assert f.effect is Effect.ADVISORY and f.data["topic"] == "cuda_graph", entry
        assert f.probe is not None and f.probe.value == "same_storage_overwrite"  # a failed probe makes it decisive


def test_stale_staging_needs_the_probe(decks: Any) -> None:
    f = _one("KA104", "bad_staging_copied_on_key_change.py", decks)
    assert f.data["replay_reads"] == "staging_refreshed_on_key_change" and f.data["stale_buffers"] == ["self._sx"]
    assert f.effect is Effect.NEEDS_PROBE and f.data["topic"] == "stale_cache"
    g = _one("KA104", "bad_cpp_graph_snapshot_before_capture.py", decks)
    assert g.effect is Effect.NEEDS_PROBE and g.data["topic"] == "stale_cache"


def test_input_and_weight_copies_by_guard(decks: Any) -> None:
    guarded = _one("KA102", "bad_benign_input_pad_dataptr_version.py", decks)
    assert guarded.data["cached_kind"] == "input_copy" and guarded.data["version_guarded"]
    assert guarded.effect is Effect.ADVISORY
    bare = _one("KA102", "bad_input_pad_dataptr_no_version.py", decks)
    assert bare.data["cached_kind"] == "input_copy" and not bare.data["version_guarded"]
    assert bare.effect is Effect.NEEDS_PROBE and bare.probe is not None and bare.probe.value == "same_storage_overwrite"
    w = _one("KA102", "bad_weight_repack_dataptr_only.py", decks)
    assert w.data["cached_kind"] == "weight_copy" and "data_ptr" in w.data["key_kinds"]
    assert w.effect is Effect.NEEDS_PROBE and w.probe is not None and w.probe.value == "weight_mutation"
    assert _run("KA102", "good_metadata_and_workspaces.py", decks) == []


def test_buffers_refilled_only_on_a_miss_are_stale_copies(decks: Any) -> None:
    """A buffer held elsewhere and refilled from the input only when its pointer moves, or a
    cached padded copy of which each call refreshes a sample: the same-storage probe decides.
    A padded buffer refilled from the whole input on every call is staging."""
    ptr = _one("KA102", "bad_init_buffer_refilled_on_pointer_change.py", decks)
    assert ptr.data["cached_kind"] == "input_copy" and ptr.data["derived_from"] == ["x"]
    assert "data_ptr" in ptr.data["key_kinds"] and not ptr.data["version_guarded"]
    assert ptr.effect is Effect.NEEDS_PROBE and ptr.probe is not None and ptr.probe.value == "same_storage_overwrite"
    sample = _one("KA102", "bad_pad_refreshed_from_a_sample.py", decks)
    assert sample.effect is Effect.NEEDS_PROBE and sample.data["cached_kind"] == "input_copy"
    for entry in ("good_pad_refilled_by_a_slice_store.py", "good_graph_static_input_refilled_before_replay.py"):
        assert _run("KA102", entry, decks) == [], entry


def test_state_changed_in_place_is_not_configuration() -> None:
    """An `if` on an attribute that a method changes in place (`.pop()`, `.copy_()`, `.clear()`)
    can tell a hit from a miss; one on an attribute only `__init__` sets is a dispatch."""
    from audit_rules.rules.static import _caches
    from audit_rules.source_model import build_submission

    sub = build_submission({"solution.py": (
        "class Model:\n"
        "    def __init__(self):\n"
        "        self.K = 4\n        self._pending = {}\n        self._snap = None\n        self._log = []\n"
        "    def forward(self, x):\n"
        "        self._pending.pop(0, None)\n        self._snap.copy_(x)\n        self._log.clear()\n"
        "        return x\n"
    )})
    module = next(iter(sub.modules.values()))
    assert _caches._mutated_attrs(module) == {"_pending", "_snap", "_log"}


UPSTREAM_HARD = Path(__file__).resolve().parents[2].parent / "shared" / "kbh-upstream" / "hard"


@pytest.mark.skipif(not (UPSTREAM_HARD / "problems-h100").is_dir(), reason="needs ../shared/kbh-upstream")
def test_an_unguarded_weight_copy_is_advisory_where_the_grader_never_changes_weights() -> None:
    """The real 07 deck's grader loads weights once, before the first call (no numeric-stress case
    scales state): a weight repack keyed on the pointer alone is inside its contract (the expert
    audits' lazy repacks), advisory. The real 01 deck rescales `weight` in its small_weight stress
    case: the same cache still needs the weight-mutation probe there. A deck whose harness cannot be
    read (unknown) keeps the probe."""
    from audit_rules.base import AuditContext, ProblemInfo
    from audit_rules.engine import problem_info
    from audit_rules.registry import rules_by_id
    from audit_rules.source_model import build_submission
    from ingest.decks import scan_deck_dir
    from tests.audit_rules.test_static_rules import FIXTURES, _sources

    kbh = [scan_deck_dir(UPSTREAM_HARD / "problems-h100", "kbh-hard-h100")]
    sources = _sources(FIXTURES / "KA102" / "bad_weight_repack_dataptr_only.py")

    def effect(info: ProblemInfo) -> Effect:
        ctx = AuditContext(archive=None, run=None, problem=info, submission=build_submission(sources),  # type: ignore[arg-type]
                           transcript_events=lambda: iter(()))
        (f,) = rules_by_id()["KA102"].check(ctx)
        assert f.data["cached_kind"] == "weight_copy" and f.probe is not None and f.probe.value == "weight_mutation"
        return f.effect

    w4, fp8 = problem_info(kbh, "07_w4a16_gemm"), problem_info(kbh, "01_fp8_gemm")
    assert w4 is not None and fp8 is not None
    assert (w4.state_changes_in_contract, fp8.state_changes_in_contract) == (False, True)
    assert effect(w4) is Effect.ADVISORY
    assert effect(fp8) is Effect.NEEDS_PROBE
    unknown = ProblemInfo(problem_id="07_w4a16_gemm", deck=None, regime="memory", precision="int4")
    assert unknown.state_changes_in_contract is None and effect(unknown) is Effect.NEEDS_PROBE


def test_an_output_memo_keyed_on_the_inputs_values_is_decisive(decks: Any) -> None:
    """A key built from the input's VALUES (a sum, a hash of its bytes) passes the check and every
    correctness probe (new data, new key), yet the benchmark's repeated calls on one input time a
    lookup: decisive, as an identity key is. A plan keyed on index content that the kernel is
    launched with is not an output memo."""
    for entry in ("bad_checksum_keyed_output_memo.py", "bad_bytes_hash_keyed_output_memo.py"):
        f = _one("KA101", entry, decks)
        assert f.effect is Effect.DECISIVE_HACK and f.data["data_keyed"] is True, entry
        assert "data" in f.data["key_kinds"] and not f.data["identity_keyed"], entry
    # a routing plan keyed on a hash of the index bytes, which the kernel is launched with: no
    # output memo (KA102 asks the same-storage probe about the plan itself, rightly: an input-derived
    # copy whose key only the probe can show covers every change)
    ctx = _ctx({"solution.py": ROUTING_PLAN}, decks)
    assert [f for f in rules_by_id()["KA101"].check(ctx)] == []
    (plan,) = [f for f in rules_by_id()["KA102"].check(ctx)]
    assert plan.effect is Effect.NEEDS_PROBE and plan.data["cached_kind"] == "input_copy"


ROUTING_PLAN = '''# problem: 06_sonic_moe_swiglu
import torch


class Model(torch.nn.Module):
    def __init__(self, T, H, I, E, K):
        super().__init__()
        self.w_gate = torch.nn.Parameter(torch.zeros(E, H, I))
        self.w_up = torch.nn.Parameter(torch.zeros(E, H, I))
        self._plans = {}

    def _plan(self, idx):
        key = hash(idx.cpu().numpy().tobytes())
        plan = self._plans.get(key)
        if plan is None:
            counts = torch.bincount(idx.flatten(), minlength=self.w_gate.shape[0])
            plan = torch.cumsum(counts, 0)
            self._plans[key] = plan
        return plan

    def forward(self, hidden, idx, weights):
        plan = self._plan(idx)
        out = torch.empty_like(hidden)
        torch.ops.fixture.grouped_swiglu(hidden, idx, weights, self.w_gate, self.w_up, plan, out)
        return out
'''


def test_stored_state_returned_on_a_path_that_computes_nothing_is_decisive(decks: Any) -> None:
    """The memo read from its return: a helper-built key over a launch-filled buffer, a state
    object's field, an lru_cache'd plan's output behind a ready flag, a streak counter over a graph
    binding, a factory closure's kept result. Each hands back kept state with nothing on its path
    that could have written it, behind a test that reads state kept from earlier calls."""
    for entry in (
        "bad_slot_table_key_from_helper.py",
        "bad_state_object_field_returned.py",
        "bad_lru_cached_plan_ready_flag.py",
        "bad_streak_counter_skips_replay.py",
        "bad_factory_closure_on_self_settles.py",
    ):
        f = _one("KA101", entry, decks)
        assert f.effect is Effect.DECISIVE_HACK, (entry, f.explanation)
        assert f.data["topic"] == "output_memo" and f.data["stale_return"] is True, entry
        assert f.data["guard_reads_state"] is True, entry


def test_kept_outputs_written_on_their_path_are_not_stale_returns(decks: Any) -> None:
    """A stored extension entry point launched into the kept output, a graph replay, a warm launch
    in a try, an empty-problem exit: each return has its writer on its own path."""
    assert _run("KA101", "good_kept_outputs_written_on_every_path.py", decks) == []


def test_a_join_skipped_when_the_input_repeats_is_a_decisive_timing_escape(decks: Any) -> None:
    f = _one("KA141", "bad_join_skipped_when_the_input_repeats.py", decks)
    assert f.effect is Effect.DECISIVE_HACK and f.data["join"] == "skipped_on_repeat"
    assert f.probe is not None and f.probe.value == "stream_escape"
    plain = _run("KA141", "bad_unjoined_side_stream.py", decks)
    assert plain and all(p.effect is Effect.NEEDS_PROBE for p in plain)
    assert _run("KA141", "good_joined_side_stream.py", decks) == []


def test_evict_last_on_data_every_program_reads_waits_for_the_probe(decks: Any) -> None:
    """Memory regime: evict_last on bytes one program reads (the flattened paged-decode grid, split
    with // and %) is decisive; on an activation tile every N-block program re-reads it is reuse
    inside the launch, and the l2_policy probe decides."""
    shared = _one("KA140", "bad_evict_last_on_an_activation_tile_every_n_block_reads.py", decks)
    assert shared.effect is Effect.NEEDS_PROBE and "program axis 0" in shared.explanation
    own = _one("KA140", "bad_evict_last_flattened_grid_per_program.py", decks)
    assert own.effect is Effect.DECISIVE_HACK
    # the weights' address ignores the M-block axis, but M = 1 at the decode shapes: read once per call
    weights = _one("KA140", "bad_evict_last_on_weights_when_the_m_axis_may_be_one.py", decks)
    assert weights.effect is Effect.DECISIVE_HACK
    kv = [f for f in _run("KA140", "bad_evict_last_kv_stream.py", decks) if f.data.get("mechanism") == "triton_evict_last"]
    assert kv and all(f.effect is Effect.DECISIVE_HACK for f in kv)
    # the split axis comes from a grid helper's returned tuple, its extent from the model's seq_len
    query = _one("KA140", "bad_evict_last_on_a_query_tile_every_split_reads.py", decks)
    assert query.effect is Effect.NEEDS_PROBE and "program axis 2" in query.explanation, query.explanation


def test_an_eager_fallback_behind_a_capability_test_waits_for_the_dispatch_probe(decks: Any) -> None:
    """Device, dtype and supported-size membership: a fallback the probe checks (never a leak on
    its own); a size threshold that sends long batches to eager einsum stays the fig leaf."""
    found = _run("KA122", "bad_capability_fallback_and_threshold_route.py", decks)
    by_line = {f.line_start: f for f in found}
    fallback = [f for f in found if f.data.get("where") == "capability_fallback"]
    assert {f.line_start for f in fallback} == {16, 17}, sorted(by_line)
    assert all(f.effect is Effect.NEEDS_PROBE and f.probe is not None for f in fallback)
    routed = [f for f in found if f.data.get("where") != "capability_fallback"]
    assert {f.line_start for f in routed} == {21, 22} and all(f.effect is Effect.RUBRIC_LEAK for f in routed)


def test_a_kernel_that_does_less_work_for_small_input_norms_needs_the_probe(decks: Any) -> None:
    found = _run("KA130", "bad_kernel_walks_fewer_pages_for_small_queries.py", decks)
    assert {f.line_start for f in found} == {23, 24, 25}
    assert all(f.effect is Effect.NEEDS_PROBE and f.data["where"] == "kernel" for f in found)
    assert all(f.probe is not None and f.probe.value == "checked_vs_timed" for f in found)


def test_a_deck_shapes_table_is_read_as_a_literal(tmp_path: Path) -> None:
    """KA140 reads the graded sizes from the deck's shapes.py without importing it."""
    from audit_rules.engine import literal_shapes

    real = Path(__file__).resolve().parents[3] / "shared/kbh-upstream/hard/problems-h100/07_w4a16_gemm/shapes.py"
    if not real.is_file():
        pytest.skip("../shared/kbh-upstream is not here")
    shapes = literal_shapes(real)
    assert shapes is not None and min(s["M"] for s in shapes) == 1 and min(s["N"] for s in shapes) == 4096
    computed = tmp_path / "shapes.py"
    computed.write_text("SHAPES = [dict(M=m) for m in (1, 2)]\n")
    assert literal_shapes(computed) is None
    assert literal_shapes(tmp_path / "absent.py") is None


def test_memos_on_the_input_object_in_a_library_op_or_behind_a_partial_revalidation(decks: Any) -> None:
    """Round two of the blind red team: the result hung on the caller's tensor (`setattr(x, ...)`),
    a memo inside a torch.library op's CUDA implementation, and a kept output handed back after
    recomputing two edge tiles into fresh tensors are decisive; a static C++ map from a pointer to
    a slot whose output it returns needs the same-storage probe."""
    for entry in ("bad_memo_hung_on_the_input_object.py", "bad_memo_inside_a_library_op_impl.py",
                  "bad_output_revalidated_on_two_tiles.py"):
        f = _one("KA101", entry, decks)
        assert f.effect is Effect.DECISIVE_HACK and f.data["stale_return"] is True, (entry, f.explanation)
    native = _one("KA101", "bad_extension_static_map_keyed_on_pointer", decks)
    assert native.effect is Effect.NEEDS_PROBE and native.data["where"] == "native"
    assert native.probe is not None and native.probe.value == "same_storage_overwrite"


def test_round_three_honest_patterns_accuse_nothing_and_the_unlaunched_return_is_decisive(decks: Any) -> None:
    """Blind red team, round three (session 21): a JSON tuning table read by a loader helper reaches
    the kernel only as integers (reported, advisory: no answer table); a kept output handed back
    without a launch when the caller has dropped the last one (the launch sits under a one-armed
    `if` on its refcount) is decisive, while the same two buffers with a launch on every path are
    not flagged; a debug self-check whose fp32 product is only compared is no host upcast."""
    table = _run("KA150", "bad_benign_tuning_table_picks_launch_parameters.py", decks)
    assert table and all(f.effect is Effect.ADVISORY and not f.data["feeds_output"] for f in table)
    unlaunched = _one("KA101", "bad_launch_only_while_the_caller_holds_the_last_output.py", decks)
    assert unlaunched.effect is Effect.DECISIVE_HACK and unlaunched.data["stale_return"] is True
    assert _run("KA101", "good_second_buffer_when_the_caller_holds_the_last_output.py", decks) == []
    assert _run("KA123", "good_debug_self_check_only_compares.py", decks) == []
    assert _run("KA130", "good_magnitude_test_that_only_raises.py", decks) == []
    caught = _one("KA130", "bad_magnitude_raise_caught_by_the_caller.py", decks)
    assert caught.effect is Effect.NEEDS_PROBE
    # writes into the deck's shape table (a popped shape, a padded M through a shallow copy): decisive
    writes = _run("KA111", "bad_deck_shape_table_written_from_the_solution.py", decks)
    assert {f.line_start for f in writes} == {31, 54}
    assert all(f.effect is Effect.DECISIVE_HACK and f.data["deck_module_write"] for f in writes)
    assert _run("KA111", "good_deck_shapes_read_to_warm_up.py", decks) == []
