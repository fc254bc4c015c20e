"""Tests of the audit library: rule fixtures, registry meta-test, synthesis and report."""
