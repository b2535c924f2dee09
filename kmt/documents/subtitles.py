"""SubRip subtitles (`.srt`), through the `srt` library."""

from kmt.errors import KmtError


class SubtitleDocument:
    """SubRip subtitles: each one's text is translated as one sentence; numbers and timings are kept."""

    alignments = False

    def __init__(self, text, language="en"):
        import srt

        try:
            self.subtitles = list(srt.parse(text))
        except srt.SRTParseError as error:
            raise KmtError(f"not a SubRip (.srt) file: {error}") from None
        self.sentences = [" ".join(subtitle.content.split()) for subtitle in self.subtitles]

    def render(self, translations):
        import srt

        for subtitle, translation in zip(self.subtitles, translations):
            subtitle.content = translation
        return srt.compose(self.subtitles, reindex=False)
