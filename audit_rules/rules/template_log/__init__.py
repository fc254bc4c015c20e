"""template_log rules, registered in this explicit tuple."""

from types import ModuleType

from audit_rules.rules.template_log import (
    contended_measurement,
    correct_vs_check_log,
    lock_starvation,
    missing_solution,
    peak_fraction_mismatch,
    roofline_implausible,
    template_mutated,
    wrong_hardware_sku,
)

RULES: tuple[ModuleType, ...] = (
    template_mutated,
    peak_fraction_mismatch,
    correct_vs_check_log,
    roofline_implausible,
    wrong_hardware_sku,
    contended_measurement,
    lock_starvation,
    missing_solution,
)
