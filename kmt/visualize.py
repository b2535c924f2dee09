"""Cross-attention heatmaps: which source pieces each output piece attended to, per layer and head (the paper's
figures 3-5 show such maps for self-attention; for translation the encoder-decoder maps show the alignment)."""

import logging
from pathlib import Path

import numpy as np
from keras import ops

from kmt.inference.decoding import search_ids
from kmt.layers.masks import target_attention_mask
from kmt.model import transformer_parts
from kmt.special_ids import END_ID, START_ID

logger = logging.getLogger(__name__)


def cross_attention_weights(model, source_ids, output_ids):
    """Teacher-forced pass over one sentence pair: a list (one per decoder layer) of `(H, T, S)` weights.

    `source_ids` and `output_ids` are 1-D int sequences without start/end tokens; row t of each map is the
    attention of the step that predicted `output_ids[t]` (and the final row, the end token).
    """
    parts = transformer_parts(model)
    source = ops.convert_to_tensor([list(source_ids)], "int32")  # (1, S)
    target_in = ops.convert_to_tensor([[START_ID, *output_ids]], "int32")  # (1, T)
    encoder_outputs, source_mask = parts.encode(source)
    states = parts.target_embedding(target_in)
    self_mask = target_attention_mask(target_in)
    maps = []
    for layer in parts.decoder_layers:
        states, weights = layer(states, encoder_outputs, self_attention_mask=self_mask,
                                cross_attention_mask=source_mask, return_attention_scores=True)
        maps.append(ops.convert_to_numpy(weights)[0])  # (H, T, S)
    return maps


def plot_cross_attention(maps, source_pieces, target_pieces, path, title=""):
    """Writes one PNG: a row of heatmaps (one per head) for each decoder layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads = len(maps), maps[0].shape[0]
    width = max(2.5, 0.28 * len(source_pieces) + 1.2)
    height = max(2.0, 0.25 * len(target_pieces) + 1.0)
    figure, axes = plt.subplots(layers, heads, figsize=(width * heads, height * layers), squeeze=False)
    for layer, layer_maps in enumerate(maps):
        for head in range(heads):
            axis = axes[layer][head]
            axis.imshow(layer_maps[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            axis.set_xticks(range(len(source_pieces)), source_pieces, rotation=90, fontsize=7)
            axis.set_yticks(range(len(target_pieces)), target_pieces, fontsize=7)
            axis.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def save_attention_plots(model, vocabularies, sentences, directory, max_length=None):
    """Greedy-translates each sentence and writes `attention_<i>.png` into `directory`; returns the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    max_length = max_length or transformer_parts(model).source_embedding.max_length
    paths = []
    for i, sentence in enumerate(sentences):
        source_ids = vocabularies.source.tokenize([sentence]).to_list()[0][:max_length]
        if not source_ids:
            continue
        tokens, _ = search_ids(model, np.array([source_ids], "int32"))
        output = [int(t) for t in ops.convert_to_numpy(tokens)[0] if t > END_ID]
        maps = cross_attention_weights(model, source_ids, output)
        source_pieces = _pieces(vocabularies.source, source_ids)
        target_pieces = _pieces(vocabularies.target, output) + ["</s>"]
        translation = vocabularies.target.detokenize(np.array([output or [0]], "int32")).numpy()[0].decode()
        path = directory / f"attention_{i}.png"
        plot_cross_attention(maps, source_pieces, target_pieces, path, title=f"{sentence}  ->  {translation}")
        paths.append(path)
        logger.info("wrote %s", path)
    return paths


def _pieces(tokenizer, ids):
    return [piece.decode("utf-8", "replace") for piece in tokenizer.id_to_piece(np.array(ids, "int32")).numpy()]
