"""The benchmark: runner, report writer, plots (`specdec bench`).

    prompts.py  -- the prompt set (the built-in assets/bench_prompts.jsonl, or --prompts FILE)
    modes.py    -- what is measured: standard, speculative k / adaptive, prompt lookup, hf baselines
    runner.py   -- one interleaved run over prompts x repeats x modes, raw measurements
    hf.py       -- transformers' generate() baselines (plain and assisted), with clean settings
    memory.py   -- peak memory (CUDA max allocated, or sampled process RSS on CPU)
    machine.py  -- what machine the numbers came from
    report.py   -- aggregation (median, min-max, speedups), report.json and report.md
    plots.py    -- PNG figures (matplotlib, Agg canvas)
    server.py   -- the prompt set through a server target, and its report

`specdec bench` (its flags, and the wiring of these) is specdec_core/cli/bench.py.
"""


class BenchError(ValueError):
    """Bad benchmark input (prompt file, flags); the CLI prints it as one line and exits 2."""
