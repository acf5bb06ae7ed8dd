"""The benchmark: runner, report writer, plots (`specdec bench`)."""
