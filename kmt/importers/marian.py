"""Hugging Face MarianMT checkpoints (the OPUS-MT models) as kmt run directories: `import_marian`.

A MarianMT model is the paper's post-norm Transformer with four differences, each a switch of kmt's `Transformer`:
a swish (SiLU) feed-forward (`model.activation`), sinusoids laid out as [sin | cos] halves (`model.position_layout`),
a bias on the tied output projection (`model.output_bias`, Marian's `final_logits_bias`) and the pad token as the
decoder's start token. kmt reserves ids 0-3 for pad, unk, start and end, so the import reorders the vocabulary:

    kmt id:   0 <pad>   1 <unk>   2 <s>             3 </s>   4, 5, ... the other pieces, in Marian's order
    Marian:   pad       <unk>     decoder start     </s>     (the pad row: Marian starts decoding from it)

kmt's start token takes the embedding row of Marian's decoder start (its pad), and kmt's searches never emit it, as
Marian's never emit pad. The vocabulary grows by that one row.

Tokenization is MarianTokenizer's: each side's SentencePiece model splits the text, `vocab.json` maps the pieces to
ids, and the source ends with `</s>`. kmt holds that as two SentencePiece models whose pieces are `vocab.json`'s in
kmt's id order (the pieces of the other side are kept, unused for splitting), so the tokenizer runs as a stock
SentencePiece op inside the exported SavedModel, as for every kmt model.
"""

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from kmt.importers.marian_checkpoint import (
    ACTIVATIONS,
    CheckpointError,
    MarianCheckpoint,
    read_checkpoint,
    read_json,
    read_weights,
    resolve,
)
from kmt.special_ids import END_ID, PAD_ID, START_ID, UNK_ID

logger = logging.getLogger(__name__)


def marian_ids(checkpoint: MarianCheckpoint) -> np.ndarray:
    """For each kmt id, the Marian id whose rows (embedding, output bias) it takes: `(V + 1,)` int64."""
    reserved = {checkpoint.pad_id, checkpoint.eos_id, checkpoint.vocab["<unk>"]}
    rest = [i for i in range(len(checkpoint.vocab)) if i not in reserved]
    head = [checkpoint.pad_id, checkpoint.vocab["<unk>"], checkpoint.start_id, checkpoint.eos_id]
    return np.array(head + rest, np.int64)  # head in the order of PAD_ID, UNK_ID, START_ID, END_ID


def kmt_pieces(checkpoint: MarianCheckpoint, order: np.ndarray) -> list[str]:
    """The pieces in kmt id order: kmt's four reserved pieces, then vocab.json's."""
    piece_of = {i: piece for piece, i in checkpoint.vocab.items()}
    pieces = ["<pad>", "<unk>", "<s>", "</s>"] + [piece_of[int(i)] for i in order[4:]]
    clash = [piece for piece in pieces[4:] if piece in ("<pad>", "<unk>", "<s>", "</s>")]
    if clash:
        raise CheckpointError(f"vocab.json gives the piece {clash[0]} an id of its own; kmt reserves it")
    return pieces


def tokenizer_proto(spm_path: Path, pieces: list[str]) -> bytes:
    """A SentencePiece model that splits text as `spm_path` does and numbers the pieces as `pieces` lists them.

    Pieces that `spm_path` does not hold (the other side's) are kept, unused for splitting; a piece it splits into
    that `pieces` lacks would become `<unk>` in MarianTokenizer, which a SentencePiece model cannot say, so it is
    refused.
    """
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    original = model_pb2.ModelProto()
    try:
        original.ParseFromString(spm_path.read_bytes())
    except Exception as error:
        raise CheckpointError(f"{spm_path.name} is not a SentencePiece model ({error})") from None
    kind = model_pb2.ModelProto.SentencePiece
    splitting = {p.piece: p for p in original.pieces if p.type in (kind.NORMAL, kind.USER_DEFINED, kind.BYTE)}
    lacking = sorted(set(splitting) - set(pieces))
    if lacking:
        raise CheckpointError(
            f"{spm_path.name} splits text into {len(lacking)} pieces that vocab.json lacks (e.g. {lacking[0]!r})"
        )
    proto = model_pb2.ModelProto()
    proto.CopyFrom(original)
    del proto.pieces[:]
    reserved = {PAD_ID: kind.CONTROL, UNK_ID: kind.UNKNOWN, START_ID: kind.CONTROL, END_ID: kind.CONTROL}
    for i, piece in enumerate(pieces):
        entry = proto.pieces.add(piece=piece, score=0.0)
        if i in reserved:
            entry.type = reserved[i]
        elif piece in splitting:
            entry.score, entry.type = splitting[piece].score, splitting[piece].type
        else:
            entry.type = kind.UNUSED
    spec = proto.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, START_ID, END_ID
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = "<pad>", "<unk>", "<s>", "</s>"
    spec.vocab_size = len(pieces)
    return proto.SerializeToString()


def vocabularies_of(checkpoint: MarianCheckpoint, order: np.ndarray):
    """The run's `Vocabularies`: one SentencePiece model a side over one shared id space, the source ending with
    `</s>`."""
    from kmt.tokenizer import Tokenizer, Vocabularies

    pieces = kmt_pieces(checkpoint, order)
    source = Tokenizer(tokenizer_proto(checkpoint.directory / "source.spm", pieces), append_end=True)
    target = Tokenizer(tokenizer_proto(checkpoint.directory / "target.spm", pieces))
    return Vocabularies(source, target, shared_ids=True)


def model_overrides(config: dict) -> list[str]:
    """The `model.*` settings of kmt's Transformer that hold the checkpoint, as config overrides."""
    tied = config.get("tie_word_embeddings", True)
    settings = {
        "arch": "transformer",
        "num_layers": config["encoder_layers"],
        "num_decoder_layers": config["decoder_layers"],
        "hidden_dim": config["d_model"],
        "num_heads": config["encoder_attention_heads"],
        "intermediate_dim": config["encoder_ffn_dim"],
        "dropout": config.get("dropout", 0.1),
        "attention_dropout": config.get("attention_dropout", 0.0),
        "activation_dropout": config.get("activation_dropout", 0.0),
        "max_length": config.get("max_position_embeddings", 512),
        "norm_first": False,
        "shared_embeddings": True,
        "tied_output": tied,
        "learned_positions": False,
        "activation": ACTIVATIONS[config.get("activation_function", "gelu")],
        "position_layout": "halves",
        "output_bias": tied,
    }
    return [f"model.{key}={json.dumps(value)}" for key, value in settings.items()]


def load_into(model, tensors: dict, order: np.ndarray) -> None:
    """Sets `model` (a kmt `Transformer` built from `model_overrides`) to the checkpoint's weights."""
    taken = set()

    def get(name):
        if name not in tensors:
            raise CheckpointError(f"the checkpoint has no weight {name}")
        taken.add(name)
        return tensors[name]

    def dense(layer, prefix):
        layer.kernel.assign(get(f"{prefix}.weight").T)  # torch (out, in) -> Keras (in, out)
        layer.bias.assign(get(f"{prefix}.bias"))

    def norm(layer, prefix):
        layer.gamma.assign(get(f"{prefix}.weight"))
        layer.beta.assign(get(f"{prefix}.bias"))

    def attention(layer, prefix):
        for projection, marian in (("query", "q"), ("key", "k"), ("value", "v"), ("output", "out")):
            dense(getattr(layer, f"{projection}_dense"), f"{prefix}.{marian}_proj")

    def feed_forward(layer, prefix):
        dense(layer.feed_forward.intermediate_dense, f"{prefix}.fc1")
        dense(layer.feed_forward.output_dense, f"{prefix}.fc2")
        norm(layer.feed_forward_norm, f"{prefix}.final_layer_norm")

    names = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    embeddings = [get(name) for name in names if name in tensors] or [get(names[0])]
    if any(not np.array_equal(embeddings[0], other) for other in embeddings[1:]):
        raise CheckpointError(
            "the encoder's and the decoder's embeddings differ: kmt shares one embedding between them "
            "(share_encoder_decoder_embeddings)"
        )
    model.source_embedding.token_embedding.embeddings.assign(embeddings[0][order])
    for i, layer in enumerate(model.encoder_layers):
        prefix = f"model.encoder.layers.{i}"
        attention(layer.self_attention, f"{prefix}.self_attn")
        norm(layer.self_attention_norm, f"{prefix}.self_attn_layer_norm")
        feed_forward(layer, prefix)
    for i, layer in enumerate(model.decoder_layers):
        prefix = f"model.decoder.layers.{i}"
        attention(layer.self_attention, f"{prefix}.self_attn")
        norm(layer.self_attention_norm, f"{prefix}.self_attn_layer_norm")
        attention(layer.cross_attention, f"{prefix}.encoder_attn")
        norm(layer.cross_attention_norm, f"{prefix}.encoder_attn_layer_norm")
        feed_forward(layer, prefix)
    bias = tensors.get("final_logits_bias", np.zeros((1, len(order) - 1), np.float32)).reshape(-1)[order]
    taken.add("final_logits_bias")
    if model.output_projection is None:
        model.output_bias.bias.assign(bias)
        taken.add("lm_head.weight")  # tied: the embedding
    else:
        model.output_projection.kernel.assign(get("lm_head.weight")[order].T)
        model.output_projection.bias.assign(bias)
    unused = sorted(name for name in tensors if name not in taken and "embed_positions" not in name)
    if unused:
        raise CheckpointError(f"the checkpoint has weights kmt's Transformer would not use (e.g. {unused[0]})")


def import_marian(path_or_id: str, output: str | os.PathLike | None = None) -> Path:
    """Imports a MarianMT checkpoint (a directory or a hub id) as a kmt run directory; returns its path.

    The run holds `config.yaml` (the model's settings, with `decode` from the checkpoint's generation config),
    `tokenizer/`, `checkpoints/epoch_000.weights.h5` (the imported weights, before any training) and `import.json`
    (where it came from). Every check runs before anything is written, and the run is written beside its place and
    moved there whole.

    Args:
        path_or_id: a directory holding config.json, vocab.json, source.spm, target.spm and model.safetensors (or
            pytorch_model.bin), or a Hugging Face hub id such as `Helsinki-NLP/opus-mt-es-en`.
        output: the run directory to write; it must not exist. Defaults to `runs/<name>` (the checkpoint's name).
    """
    from omegaconf import OmegaConf

    from kmt.build import build_model
    from kmt.config import compose_config
    from kmt.run_dir import RunDir, write_atomically

    checkpoint = read_checkpoint(resolve(path_or_id))
    name = Path(str(path_or_id).rstrip("/")).name
    output = Path(output) if output is not None else Path("runs") / name
    if output.is_file() or (output.is_dir() and any(output.iterdir())):
        raise CheckpointError(f"{output} already exists; pass another --output or remove it")
    order = marian_ids(checkpoint)
    vocabularies = vocabularies_of(checkpoint, order)
    tensors = read_weights(checkpoint.weights)
    generation = checkpoint.directory / "generation_config.json"
    beams = read_json(generation).get("num_beams") if generation.is_file() else None
    overrides = [f"name={json.dumps(name)}", *model_overrides(checkpoint.config)]
    if isinstance(beams, int) and beams > 0:
        overrides.append(f"decode.beam_size={beams}")
    cfg = compose_config(*overrides)
    model = build_model(cfg.model, vocabularies.source.vocab_size, vocabularies.target.vocab_size, "float32")
    load_into(model, tensors, order)

    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        run = RunDir(staging)
        write_atomically(run.config, OmegaConf.to_yaml(cfg, resolve=True))
        vocabularies.save(run.tokenizer)
        run.checkpoints.directory.mkdir(parents=True)
        model.save_weights(run.checkpoints.epoch(0))
        record = {
            "imported_from": str(path_or_id),
            "files": {p.name: _sha256(p) for p in sorted(checkpoint.directory.iterdir()) if p.is_file()},
            "marian_id_of_kmt_id": order.tolist(),
            "config": checkpoint.config,
        }
        write_atomically(staging / "import.json", json.dumps(record, indent=1) + "\n")
        if output.is_dir():
            output.rmdir()  # empty: checked above
        os.replace(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info(
        "imported %s: %s layers + %s, d=%s, %d pieces (kmt ids) into %s",
        path_or_id,
        cfg.model.num_layers,
        cfg.model.num_decoder_layers,
        cfg.model.hidden_dim,
        vocabularies.source.vocab_size,
        output,
    )
    return output


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
