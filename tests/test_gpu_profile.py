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
