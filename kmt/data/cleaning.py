"""Which pairs of a split are dropped, and why, counted per rule: what `kmt.data.shards.write_split` keeps.

Every split drops pairs with an empty side and pairs longer than `model.max_length` tokens (a model cannot take
them). The training split also applies `data.clean` (`kmt.config.CleanConfig`), as Moses' clean-corpus-n.perl and
fairseq's WMT scripts do before fairseq-preprocess: a length ratio over `max_length_ratio` (on subword tokens, longer
side over shorter), identical source and target, exact duplicates of an earlier pair, and lines that were not UTF-8
(read with `errors="surrogateescape"`, so their undecodable bytes are lone surrogates, which no UTF-8 holds).
Validation and test splits are kept whole otherwise: their BLEU is over every line.

A dropped pair counts once, under the first rule it breaks, in the order of `RULES`.
"""

RULES = ("invalid_utf8", "empty", "too_long", "length_ratio", "identical", "duplicate")


def fits(source_length, target_length, max_length):
    """Whether a pair fits `max_length`: the target needs one more position, for the start (or end) token. For
    numpy arrays of lengths and for ints alike."""
    return (source_length <= max_length) & (target_length <= max_length - 1)


def valid_utf8(text: str) -> bool:
    """Whether `text` is valid Unicode text, which UTF-8 can hold (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ValidLines:
    """The lines of `lines` (an iterable of str, re-iterable) with those that are not UTF-8 read as empty: the
    training text a vocabulary learns from when `data.clean.invalid_utf8=drop`."""

    def __init__(self, lines):
        self.lines = lines

    def __iter__(self):
        return (line if valid_utf8(line) else "" for line in self.lines)


class Cleaner:
    """Decides pair by pair which pairs of a split are kept, and counts the dropped ones per rule (`dropped`).

    Args:
        max_length: int. The longest side kept, in tokens; the target needs one more position (its start or end
            token).
        clean: the training split's `data.clean` group (`kmt.config.CleanConfig`, or a config node with its keys), or
            None for the other splits: then only empty and over-long pairs are dropped. Defaults to `None`.

    Example:

    >>> from kmt.config import CleanConfig
    >>> cleaner = Cleaner(8, CleanConfig(deduplicate=True, drop_identical=True))
    >>> [cleaner.keep(s, t, 2, 2) for s, t in [("a b", "c d"), ("a b", "c d"), ("x y", "x y"), ("", "c")]]
    [True, False, False, False]
    >>> cleaner.dropped
    {'empty': 1, 'too_long': 0, 'identical': 1, 'duplicate': 1}
    """

    def __init__(self, max_length, clean=None):
        self.max_length = max_length
        self.max_length_ratio = float(clean.max_length_ratio) if clean is not None else 0.0
        on = {
            "invalid_utf8": clean is not None and clean.invalid_utf8 == "drop",
            "empty": True,
            "too_long": True,
            "length_ratio": self.max_length_ratio > 0,
            "identical": clean is not None and bool(clean.drop_identical),
            "duplicate": clean is not None and bool(clean.deduplicate),
        }
        self.dropped = {rule: 0 for rule in RULES if on[rule]}
        self._seen = set()  # the 64-bit hashes of the kept pairs (data.clean.deduplicate)

    def encodable(self, lines):
        """`lines` (a list of str) as a tokenizer can take them: lines that are not UTF-8 read as empty."""
        if "invalid_utf8" not in self.dropped:
            return lines
        return [line if valid_utf8(line) else "" for line in lines]

    def rule(self, source, target, source_length, target_length):
        """The first rule the pair breaks (a key of `dropped`), or None when it is kept. A kept pair is remembered,
        so that its duplicates break the duplicate rule."""
        dropped = self.dropped
        if "invalid_utf8" in dropped and not (valid_utf8(source) and valid_utf8(target)):
            return "invalid_utf8"
        if not source.strip() or not target.strip():
            return "empty"
        if not fits(source_length, target_length, self.max_length):
            return "too_long"
        shorter, longer = sorted((source_length, target_length))
        if self.max_length_ratio and longer > self.max_length_ratio * max(shorter, 1):
            return "length_ratio"
        if "identical" in dropped and source == target:
            return "identical"
        if "duplicate" in dropped:
            key = hash((source, target))
            if key in self._seen:
                return "duplicate"
            self._seen.add(key)
        return None

    def keep(self, source, target, source_length, target_length):
        """Whether the pair is kept; a dropped one is counted under its rule."""
        rule = self.rule(source, target, source_length, target_length)
        if rule is not None:
            self.dropped[rule] += 1
        return rule is None

    def summary(self, name, read, kept):
        """The split's log line: `train: kept N of M pairs (dropped ...)`, each rule in force counted, or
        `val: M pairs` when nothing was dropped and no rule beyond empty and too long applies."""
        if kept == read and len(self.dropped) == 2:
            return f"{name}: {read} pairs"
        labels = {
            "empty": "empty",
            "too_long": f"longer than {self.max_length} tokens",
            "length_ratio": f"length ratio over {self.max_length_ratio:g}",
            "duplicate": "duplicates",
            "identical": "identical source and target",
            "invalid_utf8": "invalid UTF-8",
        }
        counts = ", ".join(f"{self.dropped[rule]} {label}" for rule, label in labels.items() if rule in self.dropped)
        return f"{name}: kept {kept} of {read} pairs (dropped {counts})"
