import numpy as np

from kmt.checkpoints import average_checkpoints
from kmt.model import build_transformer


def test_average_is_the_element_wise_mean(tmp_path):
    model = build_transformer(vocab_size=11, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16)
    weights = []
    for i in range(3):
        values = [np.full(w.shape, float(i + 1), "float32") for w in model.get_weights()]
        model.set_weights(values)
        model.save_weights(tmp_path / f"epoch_{i + 1:03d}.weights.h5")
        weights.append(values)
    average_checkpoints(model, [tmp_path / f"epoch_{i:03d}.weights.h5" for i in (2, 3)])
    assert all(np.allclose(w, 2.5) for w in model.get_weights())
