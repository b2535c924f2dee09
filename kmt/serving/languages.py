"""The languages LibreTranslate's routes speak of: ISO 639-1 codes and their names, a model's language pair, and the
language identifier behind `source=auto` and `/detect`."""

from dataclasses import dataclass

NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fi": "Finnish", "fr": "French",
    "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "nb": "Norwegian", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian",
    "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip


def name_of(code):
    return NAMES.get(code, code)


@dataclass(frozen=True)
class Pair:
    """The language pair a model translates: ISO 639-1 codes, `en-de` on the command line."""

    source: str
    target: str

    @classmethod
    def parse(cls, text):
        source, dash, target = str(text).partition("-")
        if not dash or not source.isalpha() or not target.isalpha() or source == target:
            raise ValueError(f"a language pair is two language codes joined by '-', such as en-de. Received: {text!r}")
        return cls(source.lower(), target.lower())

    def __str__(self):
        return f"{self.source}-{self.target}"


class Detector:
    """Language identification restricted to `languages` (py3langid, loaded on first use)."""

    def __init__(self, languages):
        self.languages = sorted(set(languages))
        self._identifier = None

    def __call__(self, text):
        """`(code, confidence 0-100)` of `text`."""
        if self._identifier is None:
            from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

            identifier = LanguageIdentifier.from_modelpath(MODEL_DIR / MODEL_FILE, norm_probs=True)
            if len(self.languages) > 1:
                identifier.set_languages(self.languages)
            self._identifier = identifier
        if len(self.languages) == 1:
            return self.languages[0], 100.0
        code, probability = self._identifier.classify(text)
        return code, round(100 * float(probability), 1)
