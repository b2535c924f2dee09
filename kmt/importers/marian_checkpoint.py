"""Reading a Hugging Face MarianMT checkpoint directory for `kmt.importers.marian`: where it is (`resolve`: a
directory or a hub id), what it holds (`read_checkpoint`: config, vocabulary, weights file; every key kmt cannot map
refused in one line) and its tensors (`read_weights`: safetensors or a `pytorch_model.bin`, no pickle run)."""

import dataclasses
import json
from pathlib import Path

import numpy as np

from kmt.errors import KmtError

NEEDED = ("config.json", "source.spm", "target.spm", "vocab.json")
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
# Options of Marian's config that kmt's Transformer holds only at these values (older configs carry the BART names).
FIXED = {
    "scale_embedding": True,
    "static_position_embeddings": True,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "add_bias_logits": False,
    "share_encoder_decoder_embeddings": True,
    "separate_vocabs": False,
}


class CheckpointError(KmtError):
    """A checkpoint kmt cannot read or map; says why in one line."""


@dataclasses.dataclass(frozen=True)
class MarianCheckpoint:
    """A MarianMT checkpoint directory, read and checked: its config, vocabulary and where its weights are."""

    directory: Path
    config: dict
    vocab: dict  # piece -> Marian id
    weights: Path

    @property
    def pad_id(self):
        return int(self.config["pad_token_id"])

    @property
    def eos_id(self):
        return int(self.config["eos_token_id"])

    @property
    def start_id(self):
        start = self.config.get("decoder_start_token_id")
        return self.pad_id if start is None else int(start)


def resolve(path_or_id: str) -> Path:
    """A local checkpoint directory, or the hub id `path_or_id` downloaded through `huggingface_hub` (the files a
    MarianMT model needs only)."""
    path = Path(path_or_id)
    if path.is_dir():
        return path
    if path.exists() or path_or_id.count("/") != 1 or path_or_id.startswith((".", "/")):
        raise CheckpointError(
            f"{path_or_id}: no such checkpoint directory (pass a directory or a hub id like OWNER/NAME)"
        )
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path_or_id, allow_patterns=[*NEEDED, *WEIGHTS, "generation_config.json"]))
    except Exception as error:  # no network, an unknown id, a gated repository: huggingface_hub says which
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"could not download {path_or_id} from the Hugging Face hub ({reason}); download it where the network "
            f"allows (`hf download {path_or_id} --local-dir DIR`) and pass DIR"
        ) from None


def read_checkpoint(directory: Path) -> MarianCheckpoint:
    """Reads and checks a checkpoint directory; raises `CheckpointError` naming the first thing kmt cannot map."""
    missing = [name for name in NEEDED if not (directory / name).is_file()]
    if missing:
        raise CheckpointError(f"{directory} is not a MarianMT checkpoint: it has no {', '.join(missing)}")
    weights = next((directory / name for name in WEIGHTS if (directory / name).is_file()), None)
    if weights is None:
        raise CheckpointError(f"{directory} has no weights ({' or '.join(WEIGHTS)})")
    config = read_json(directory / "config.json")
    vocab = read_json(directory / "vocab.json")
    check_config(config)
    if (directory / "target_vocab.json").is_file():
        raise CheckpointError("target_vocab.json: separate source and target vocabularies are not supported")
    for name in ("<unk>",):
        if name not in vocab:
            raise CheckpointError(f"vocab.json has no {name} piece")
    if len(vocab) != config["vocab_size"] or sorted(vocab.values()) != list(range(len(vocab))):
        raise CheckpointError(
            f"vocab.json holds {len(vocab)} pieces with ids that do not run 0..{config['vocab_size'] - 1} "
            f"(vocab_size in config.json)"
        )
    codes = [piece for piece in vocab if piece.startswith(">>") and piece.endswith("<<")]
    if codes:
        raise CheckpointError(
            f"vocab.json has target-language tokens ({codes[0]}, ...): multilingual models are not supported"
        )
    return MarianCheckpoint(directory, config, vocab, weights)


def check_config(config: dict) -> None:
    """Refuses, in one line naming the key, a config.json that kmt's Transformer cannot hold."""
    if config.get("model_type") != "marian":
        raise CheckpointError(
            f"config.json: model_type={config.get('model_type')!r}; kmt imports MarianMT (marian) models"
        )
    for key, value in FIXED.items():
        if key in config and config[key] != value:
            given, needed = json.dumps(config[key]), json.dumps(value)
            raise CheckpointError(f"config.json: {key}={given} is not supported (kmt needs {needed})")
    for size in ("attention_heads", "ffn_dim"):
        encoder, decoder = config.get(f"encoder_{size}"), config.get(f"decoder_{size}")
        if encoder != decoder:
            raise CheckpointError(f"config.json: encoder_{size}={encoder} and decoder_{size}={decoder} differ")
    if config.get("activation_function", "gelu") not in ACTIVATIONS:
        raise CheckpointError(
            f"config.json: activation_function={config['activation_function']!r} is not supported "
            f"(kmt has {', '.join(sorted(ACTIVATIONS))})"
        )
    if config.get("decoder_vocab_size") not in (None, config.get("vocab_size")):
        raise CheckpointError("config.json: decoder_vocab_size differs from vocab_size (separate vocabularies)")
    for key in ("pad_token_id", "eos_token_id", "vocab_size", "d_model", "encoder_layers", "decoder_layers"):
        if not isinstance(config.get(key), int):
            raise CheckpointError(f"config.json: {key} is missing or not an integer")


def read_weights(path: Path) -> dict:
    """The checkpoint's tensors as float32 numpy arrays, without running any pickle: safetensors directly, a
    `pytorch_model.bin` through `torch.load(weights_only=True)`."""
    if path.name.endswith(".index.json"):
        shards = sorted(set(read_json(path)["weight_map"].values()))
        return {k: v for shard in shards for k, v in read_weights(path.parent / shard).items()}
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        try:
            return {name: np.asarray(value, np.float32) for name, value in load_file(path).items()}
        except Exception as error:
            raise CheckpointError(f"{path} does not read as safetensors ({error})") from None
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path.name} needs PyTorch to read (pip install torch), or convert the checkpoint to model.safetensors"
        ) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointError(f"{path} does not load with torch.load(weights_only=True) ({error})") from None
    return {name: value.float().numpy() for name, value in state.items()}


def read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} does not read as JSON ({error})") from None
