import numpy as np

from kmt.checkpoints import average_checkpoints, early_averaging_warning
from kmt.models import Transformer


def test_average_is_the_element_wise_mean(tmp_path):
    model = Transformer(vocab_size=11, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16)
    weights = []
    for i in range(3):
        values = [np.full(w.shape, float(i + 1), "float32") for w in model.get_weights()]
        model.set_weights(values)
        model.save_weights(tmp_path / f"epoch_{i + 1:03d}.weights.h5")
        weights.append(values)
    average_checkpoints(model, [tmp_path / f"epoch_{i:03d}.weights.h5" for i in (2, 3)])
    assert all(np.allclose(w, 2.5) for w in model.get_weights())


def test_averaging_more_than_half_a_short_run_is_warned_of():
    assert early_averaging_warning(10, 39, "runs/r") is None  # the En->De recipe's run on the Xeon
    assert early_averaging_warning(5, 10, "runs/r") is None
    assert early_averaging_warning(1, 1, "runs/r") is None
    warning = early_averaging_warning(10, 12, "runs/r")
    assert "last 10 of the run's 12 epochs reaches back to epoch 3" in warning
    assert "decode_sweep.py runs/r --average N" in warning and "\n" not in warning
