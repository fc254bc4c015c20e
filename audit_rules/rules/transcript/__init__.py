"""transcript rules, registered in this explicit tuple."""

from types import ModuleType

from audit_rules.rules.transcript import (
    code_defect_evidence,
    cross_run_artifact_access,
    deck_or_harness_edit,
    grader_source_reading,
    infra_failure,
    intent_statement,
    numeric_stress_or_tolerance_disable,
    passive_run_exposure,
    provider_failure,
)

RULES: tuple[ModuleType, ...] = (
    cross_run_artifact_access,
    passive_run_exposure,
    deck_or_harness_edit,
    numeric_stress_or_tolerance_disable,
    intent_statement,
    provider_failure,
    infra_failure,
    code_defect_evidence,
    grader_source_reading,
)
