"""The sinusoidal position encoding carries relative position (Vaswani et al., 2017, section 3.5: "for any fixed
offset k, PE(pos+k) can be represented as a linear function of PE(pos)"), and `kmt-plot positions` draws it."""

import numpy as np
import pytest
from keras import ops

from kmt.cli import plot
from kmt.layers.embedding import positional_encoding
from tests.helpers import refused, run_cli


def rotation(offset, depth):
    """The `(depth, depth)` matrix M_k with PE(pos + k) = M_k PE(pos), from the formula and kmt's interleaved layout.

    Feature 2i holds sin(pos w_i) and feature 2i+1 holds cos(pos w_i), w_i = 10000^(-2i/depth). By the angle-sum
    identities sin(pos w + k w) = cos(k w) sin(pos w) + sin(k w) cos(pos w) and
    cos(pos w + k w) = -sin(k w) sin(pos w) + cos(k w) cos(pos w), so each pair turns by the block
    [[cos(k w), sin(k w)], [-sin(k w), cos(k w)]], whatever pos is.
    """
    matrix = np.zeros((depth, depth))
    for i in range(depth // 2):
        angle = offset * 10000.0 ** (-2 * i / depth)
        matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]]
    return matrix


# Least squares identifies M_k only where the positions turn even the slowest pair (wavelength 2 pi 10000^((d-2)/d))
# far enough to tell its sine from the next pair's: at d=8 that is 1,000 positions; at d=32 it would be ~5,000, where
# float32 angles (kmt computes the table in float32) already carry errors near 1e-4. Hence small depths here.
@pytest.mark.parametrize("depth, length", [(4, 400), (8, 1000)])
@pytest.mark.parametrize("offset", [1, 2, 7, 50, 333])
def test_one_matrix_maps_every_position_to_the_one_k_later_and_it_is_the_formulas_rotation(depth, length, offset):
    table = ops.convert_to_numpy(positional_encoding(length + offset, depth)).astype("float64")  # (L + k, D)
    now, later = table[:length], table[offset:]  # PE(pos), PE(pos + k) for pos = 0 .. L - 1
    fitted = np.linalg.lstsq(now, later, rcond=None)[0].T  # M_k: later[pos] = M_k @ now[pos], one M for every pos
    assert np.abs(now @ fitted.T - later).max() < 1e-4
    assert np.abs(fitted - rotation(offset, depth)).max() < 1e-4


def test_the_rotation_is_not_the_identity_or_transposed():
    # The test above tells a wrong sign or layout apart: M_k and its transpose (a turn the other way) differ.
    assert np.abs(rotation(7, 8) - rotation(7, 8).T).max() > 0.5
    assert np.abs(rotation(7, 8) - np.eye(8)).max() > 0.5


def test_kmt_plot_positions_writes_one_png_and_refuses_bad_sizes_in_one_line(tmp_path, capsys):
    import matplotlib.image

    out = tmp_path / "figures" / "positions.png"
    drawn = run_cli("plot", "positions", "--length", "40", "--depth", "16", "--output", out)
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    assert drawn.stdout.strip() == str(out)
    assert matplotlib.image.imread(out).shape[:2] == (420, 1200)  # two panels, 12 x 4.2 inches at 100 dpi
    prefix = "kmt-plot positions: error: "
    for args, line in [
        (["--depth", "7"], "--depth must be even and positive, a sine and a cosine per wavelength. Received: 7"),
        (["--depth", "0"], "--depth must be even and positive, a sine and a cosine per wavelength. Received: 0"),
        (["--length", "0"], "--length must be positive. Received: 0"),
    ]:
        assert refused(capsys, plot.main, "positions", *args, "--output", tmp_path / "bad.png") == (2, prefix + line)
    assert not (tmp_path / "bad.png").exists()
