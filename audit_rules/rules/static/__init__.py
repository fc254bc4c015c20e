"""Static rules (KA1xx): read the parsed submission (`audit_rules.source_model.Submission`).

Registered in this explicit tuple; `audit_rules/registry.py` concatenates it with the transcript
and template/log tuples. Ids are never renumbered.
"""

from types import ModuleType

from audit_rules.rules.static import (
    ka101_identity_keyed_output_memo,
    ka102_identity_keyed_input_copy,
    ka103_sampled_cache_validation,
    ka104_cuda_graph_replay_keyed_on_inputs,
    ka105_persistent_output_buffer_alias,
    ka110_global_torch_state_change,
    ka111_monkeypatch_torch_or_builtins,
    ka112_grading_env_switch,
    ka113_caller_introspection,
    ka120_forbidden_op,
    ka121_library_laundering,
    ka122_fig_leaf_kernel,
    ka123_precision_downgrade,
    ka124_no_authored_kernel,
    ka130_input_dependent_math_switch,
    ka140_l2_cache_policy,
    ka141_timing_escape,
    ka150_runtime_file_or_answer_table,
    ka151_reference_in_timed_path,
    ka152_process_exit,
    ka153_deck_file_write,
    ka154_cross_run_reference,
)

RULES: tuple[ModuleType, ...] = (
    ka101_identity_keyed_output_memo,
    ka102_identity_keyed_input_copy,
    ka103_sampled_cache_validation,
    ka104_cuda_graph_replay_keyed_on_inputs,
    ka105_persistent_output_buffer_alias,
    ka110_global_torch_state_change,
    ka111_monkeypatch_torch_or_builtins,
    ka112_grading_env_switch,
    ka113_caller_introspection,
    ka120_forbidden_op,
    ka121_library_laundering,
    ka122_fig_leaf_kernel,
    ka123_precision_downgrade,
    ka124_no_authored_kernel,
    ka130_input_dependent_math_switch,
    ka140_l2_cache_policy,
    ka141_timing_escape,
    ka150_runtime_file_or_answer_table,
    ka151_reference_in_timed_path,
    ka152_process_exit,
    ka153_deck_file_write,
    ka154_cross_run_reference,
)
"""Rule modules, in id order."""
