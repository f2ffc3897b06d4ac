"""Generated from spec/ by `nox -s generate`. Do not edit by hand."""
