"""A random MarianMT checkpoint laid out as the Hugging Face hub's OPUS-MT models are, for the import tests (no weights
can be downloaded here): `make_checkpoint(directory, ...)`.

It trains two small SentencePiece models (source and target) on `SOURCES` and `TARGETS`, writes a `vocab.json` over
both (`</s>` 0, `<unk>` 1, the pieces, `<pad>` last, as Marian's vocabularies are) and saves a `MarianMTModel` of
random weights with `save_pretrained` (model.safetensors, config.json, generation_config.json). Needs `transformers`
and PyTorch.
"""

import io
import json
from pathlib import Path

SOURCES = [
    "¿Dónde está la estación de tren?",
    "Tengo 3 gatos y 12 perros en casa.",
    "La niña come una manzana roja.",
    "El café está muy caliente, ¡cuidado!",
    "Mañana vamos a la playa con mis amigos.",
    "¿Cuántos años tienes?",
    "Él leyó el periódico (en español) a las 7:30.",
    "Nuestra casa tiene dos pisos y un jardín.",
]
TARGETS = [
    "Where is the train station?",
    "I have 3 cats and 12 dogs at home.",
    "The girl eats a red apple.",
    "The coffee is very hot, careful!",
    "Tomorrow we are going to the beach with my friends.",
    "How old are you?",
    "He read the newspaper (in Spanish) at 7:30.",
    "Our house has two floors and a garden.",
]


def train_spm(lines, vocab_size):
    """A unigram SentencePiece model as Marian's are trained (its own <unk>, <s>, </s>), serialized."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 20),
        model_writer=model,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        minloglevel=2,
    )
    return model.getvalue()


def make_checkpoint(
    directory,
    *,
    tied=True,
    d_model=64,
    layers=2,
    heads=4,
    ffn_dim=128,
    pieces=60,
    vocab_size=None,
    init_std=0.2,
    seed=0,
):
    """Writes a MarianMT checkpoint of random weights into `directory`; returns the `MarianMTModel`.

    Args:
        tied: the output projection is the shared embedding (`tie_word_embeddings`), as in most OPUS-MT models.
        d_model, layers, heads, ffn_dim: the size (`layers` encoder and as many decoder layers).
        pieces: the size of each SentencePiece model.
        vocab_size: pad `vocab.json` with unused pieces up to this many entries (an OPUS-MT-sized vocabulary:
            58,101). Defaults to the pieces of both models and the specials.
        init_std: the weights' standard deviation; larger than the 0.02 of a fresh model, so that the logits of
            a random model are spread apart and its greedy outputs do not hang on rounding.
        seed: PyTorch's seed for the weights.
    """
    import sentencepiece
    import torch
    from transformers import MarianConfig, MarianMTModel

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = {"</s>": 0, "<unk>": 1}
    for name, lines in (("source.spm", SOURCES), ("target.spm", TARGETS)):
        proto = train_spm(lines, pieces)
        (directory / name).write_bytes(proto)
        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        for i in range(processor.get_piece_size()):
            if not processor.is_control(i) and not processor.is_unknown(i):
                vocab.setdefault(processor.id_to_piece(i), len(vocab))
    while vocab_size and len(vocab) < vocab_size - 1:
        vocab[f"▁unused{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = pad = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")

    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=512,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        tie_word_embeddings=tied,
        init_std=init_std,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 1.0)  # zeros when fresh: random, so that the import must carry it
        for stack in (model.model.encoder, model.model.decoder):  # one embedding, as share_encoder_decoder_embeddings
            stack.embed_tokens.weight.copy_(model.model.shared.weight)  # says (untied, transformers makes three)
    # What OPUS-MT models ship: beam search, and the pad token (their decoder's start) never generated.
    model.generation_config.update(num_beams=4, max_length=512, bad_words_ids=[[pad]])
    model.save_pretrained(directory)
    return model
