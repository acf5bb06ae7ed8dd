"""The GPU profile's projection math (the measuring part needs CUDA, absent in CI)."""

import pytest
import torch

from specdec_core.bench.gpu_profile import main, project


def test_projection_matches_hand_computation():
    # alpha 0.5, k=1: E = (1 - 0.25) / 0.5 = 1.5 tokens; cost d + v(2) = 0.1 + 1.2 -> 1.5/1.3
    v = {1: 1.0, 2: 1.2, 3: 1.3}
    proj = project(0.5, 0.1, v)
    assert proj[1] == pytest.approx(1.5 / 1.3)
    # k=2: E = (1 - 0.125) / 0.5 = 1.75; cost 0.2 + 1.3
    assert proj[2] == pytest.approx(1.75 / 1.5)
    assert set(proj) == {1, 2}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_without_cuda_says_so(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "no CUDA" in err and len(err.strip().splitlines()) == 1


def test_gpu_decode_runs_the_engine_on_an_early_exit_pair(monkeypatch):
    """The end-to-end GPU check's own logic on a CPU: the early-exit draft shares the target's
    weights, the calibration finds a layer scale near the asked agreement, and every mode runs
    through the engine's decoder with its figures."""
    import specdec_core.bench.gpu_decode as gd

    monkeypatch.setitem(gd.SHAPES, "tiny", (128, 256, 4, 4, 2))
    target, draft = gd.build_pair("tiny", 1, device="cpu")
    assert torch.equal(draft.model.layers[0].mlp.up_proj.weight, target.model.layers[0].mlp.up_proj.weight)
    gd.set_scale((target, draft), 0.001)
    assert gd.agreement(target, draft, n=8) == 1.0  # the layers barely write: the head decides
    scale, agree = gd.calibrate(target, draft, 0.5, steps=5)
    assert 0.005 <= scale <= 0.5 and 0.0 <= agree <= 1.0
    out = gd.run(target, draft, tokens=12, prompt_len=8, repeats=1)
    assert set(out["modes"]) == {name for name, *_ in gd.MODES}
    for m in out["modes"].values():
        assert m["tokens_per_second"] > 0 and m["identical_to_standard"] in (True, False)
    assert out["modes"]["standard"]["speedup_vs_standard"] == pytest.approx(1.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_gpu_decode_without_cuda_says_so(capsys):
    from specdec_core.bench.gpu_decode import main as decode_main

    assert decode_main([]) == 2
    err = capsys.readouterr().err
    assert "no CUDA" in err and len(err.strip().splitlines()) == 1
