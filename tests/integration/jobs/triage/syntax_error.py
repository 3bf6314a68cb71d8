"""Syntax error: a module the job imports does not parse."""
import broken_module  # noqa: F401  (jobs/triage/broken_module.py)
