"""static rules, registered in this explicit tuple."""

from types import ModuleType

RULES: tuple[ModuleType, ...] = ()
