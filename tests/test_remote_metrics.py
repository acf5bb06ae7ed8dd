"""vLLM's speculative figures, parsed from its documented formats (vLLM cannot run here: no GPU).

- the Prometheus exposition of /metrics: `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`,
  `..._num_accepted_tokens` (counters, exposed with `_total` and a `_created` twin) and
  `..._num_accepted_tokens_per_pos` with a `position` label, per engine (labels model_name,
  engine), as docs/usage/metrics and vllm/v1/spec_decode/metrics.py describe them;
- the per-request `metrics.speculative_decoding` object of a response (server flag
  --per-request-spec-decode-metrics summary|detailed), with the documentation's own example.

The same parser reads llama-server's counters for real in test_remote_llama.py.
"""

from specdec_core.remote.prometheus import (
    SpecCounters,
    figures_from_counters,
    figures_from_vllm_request,
    parse_exposition,
    read_spec_counters,
)

MODEL = 'meta-llama/Llama-3.1-70B-Instruct'


def vllm_page(drafts, draft_tokens, accepted, per_pos, engines=("0",), created=1.7e9):
    """A /metrics page in vLLM's exposition format, the counters split over `engines`."""
    lines = []
    per_engine = len(engines)

    def counter(name, help_text, values):
        lines.append(f"# HELP vllm:{name}_total {help_text}")
        lines.append(f"# TYPE vllm:{name}_total counter")
        for labels, v in values:  # each engine holds its share of the total
            lines.append(f"vllm:{name}_total{{{labels}}} {v / per_engine:.1f}")
        lines.append(f"# HELP vllm:{name}_created {help_text}")
        lines.append(f"# TYPE vllm:{name}_created gauge")
        for labels, _ in values:
            lines.append(f"vllm:{name}_created{{{labels}}} {created:.6e}")

    def base(e):
        return f'engine="{e}",model_name="{MODEL}"'

    lines += ['# HELP vllm:num_requests_running Number of requests in model execution batches.',
              '# TYPE vllm:num_requests_running gauge']
    lines += [f'vllm:num_requests_running{{{base(e)}}} 1.0' for e in engines]
    counter("spec_decode_num_drafts", "Number of spec decoding drafts.", [(base(e), drafts) for e in engines])
    counter("spec_decode_num_draft_tokens", "Number of draft tokens.", [(base(e), draft_tokens) for e in engines])
    counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.", [(base(e), accepted) for e in engines])
    counter("spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
            [(f'{base(e)},position="{i}"', v) for e in engines for i, v in enumerate(per_pos)])
    lines.append('vllm:generation_tokens_total{engine="0",model_name="x"} 5000.0')
    return "\n".join(lines) + "\n"


def test_exposition_lines_labels_and_values():
    text = ('# HELP a_total x\n# TYPE a_total counter\n'
            'a_total{model_name="m \\"quoted\\", with comma",position="2"} 3.0 1712345678000\n'
            'b 1e3\n'
            'c{x="1"} NaN\n'
            'not a sample line\n')
    rows = parse_exposition(text)
    assert rows[0] == ("a_total", {"model_name": 'm "quoted", with comma', "position": "2"}, 3.0)
    assert rows[1] == ("b", {}, 1000.0)
    assert rows[2][0] == "c" and rows[2][2] != rows[2][2]  # NaN kept as NaN
    assert len(rows) == 3


def test_vllm_counters_are_read_and_summed_over_engines():
    page = vllm_page(120, 360, 250, [100, 85, 65], engines=("0", "1"))
    c = read_spec_counters(page, "vllm:")
    assert c.present and (c.drafts, c.draft_tokens, c.accepted) == (120, 360, 250)
    assert c.accepted_per_position == (100, 85, 65)
    # the `_created` timestamps and other metrics do not leak in; another prefix sees nothing
    assert not read_spec_counters(page, "llamacpp:").present


def test_a_server_without_speculation_has_no_counters():
    c = read_spec_counters('vllm:num_requests_running{engine="0",model_name="m"} 0.0\n', "vllm:")
    assert not c.present and c == SpecCounters()


def test_one_answer_is_the_difference_around_its_request():
    before = read_spec_counters(vllm_page(100, 300, 200, [80, 70, 50]), "vllm:")
    after = read_spec_counters(vllm_page(130, 390, 262, [104, 88, 70]), "vllm:")
    f = figures_from_counters(after - before)
    assert (f.proposed, f.accepted, f.steps) == (90, 62, 30)
    assert f.per_position_accepted == [24, 18, 20]
    # vLLM's per-position rate divides by the drafts: each position was proposed in every step
    assert f.per_position_proposed == [30, 30, 30]
    assert f.server_wide and "server-wide" in f.source
    assert sum(f.per_position_accepted) == f.accepted


def test_a_position_that_appears_only_after_the_first_reading():
    before = read_spec_counters(vllm_page(10, 20, 10, [10]), "vllm:")
    after = read_spec_counters(vllm_page(20, 40, 25, [18, 7]), "vllm:")
    assert (after - before).accepted_per_position == (8, 7)


def test_per_request_summary_with_the_documentations_example():
    spec = {
        "mean_acceptance_length": 1.2325581395348837,
        "draft_acceptance_rate": 0.07751937984496124,
        "acceptance_histogram": [39, 1, 0, 3],
        "acceptance_histogram_by_draft_length": {"3": [39, 1, 0, 3]},
        "num_spec_steps": 43,
        "num_accepted_draft_tokens": 10,
        "num_draft_tokens": 129,
        "num_spec_tokens": 3,
    }
    f = figures_from_vllm_request(spec)
    assert (f.proposed, f.accepted, f.steps) == (129, 10, 43) and not f.server_wide
    assert f.per_position_proposed == [43, 43, 43]
    # position i is kept in the steps that kept more than i: 1+0+3, 0+3, 3
    assert f.per_position_accepted == [4, 3, 3]
    assert sum(f.per_position_accepted) == f.accepted
    assert f.accepted / f.proposed == spec["draft_acceptance_rate"]
    assert 1 + f.accepted / f.steps == spec["mean_acceptance_length"]


def test_per_request_variable_draft_lengths():
    # three steps drafted 1 (two kept nothing, one kept it), two drafted 3 (kept 0 and 2)
    by_len = {"1": [2, 1], "2": [0, 0, 0], "3": [1, 0, 1, 0]}
    spec = {"num_spec_steps": 5, "num_draft_tokens": 9, "num_accepted_draft_tokens": 3,
            "acceptance_histogram": [3, 1, 1, 0], "num_spec_tokens": 3,
            "acceptance_histogram_by_draft_length": by_len}
    f = figures_from_vllm_request(spec)
    assert f.per_position_proposed == [5, 2, 2]
    assert f.per_position_accepted == [2, 1, 0]
    assert sum(f.per_position_proposed) == f.proposed and sum(f.per_position_accepted) == f.accepted


def test_per_request_detailed_arrays_win():
    spec = {"num_spec_steps": 3, "num_draft_tokens": 7, "num_accepted_draft_tokens": 4,
            "per_step_drafted": [3, 2, 2], "per_step_accepted": [3, 0, 1],
            "acceptance_histogram": [1, 1, 0, 1]}
    f = figures_from_vllm_request(spec)
    assert f.per_position_proposed == [3, 3, 1] and f.per_position_accepted == [2, 1, 1]
