"""Text with markup (`kmt.documents.markup`): the structure kept, each inline tag put back around the words aligned to
the words it wrapped. The model here is a word-for-word stand-in whose alignment is known: upper-casing keeps the order,
reversing turns it around."""

import collections

from lxml import html as lxml_html

from kmt.documents.markup import Fragment, translate_fragment


def upper(lines):
    return [(line.upper(), tuple((i, i) for i in range(len(line.split())))) for line in lines]


def reverse(lines):
    results = []
    for line in lines:
        words = line.split()
        n = len(words)
        results.append((" ".join(reversed(words)).upper(), tuple((i, n - 1 - i) for i in range(n))))
    return results


def tags(markup):
    """The elements of `markup` with their attributes, as a multiset."""
    root = lxml_html.fragment_fromstring(markup, create_parent="div")
    return collections.Counter(
        (e.tag, tuple(sorted(e.attrib.items()))) for e in root.iterdescendants() if isinstance(e.tag, str)
    )


def test_inline_tags_follow_their_words_and_blocks_stay_where_they_are():
    source = '<p>A <b>big <i>red</i></b> dog &amp; a <a href="/x?a=1&amp;b=2">cat</a></p><p>Two  lines</p>'
    assert translate_fragment(source, upper) == (
        '<p>A <b>BIG <i>RED</i></b> DOG &amp; A <a href="/x?a=1&amp;b=2">CAT</a></p><p>TWO LINES</p>'
    )
    assert translate_fragment(source, reverse) == (
        '<p><a href="/x?a=1&amp;b=2">CAT</a> A &amp; DOG <b><i>RED</i> BIG</b> A</p><p>LINES TWO</p>'
    )
    nested = (
        "<div>Intro <p>Para <em>one</em></p> tail</div><ul><li>x <b>y</b></li></ul><table><tr><td>a b</td></tr></table>"
    )
    assert translate_fragment(nested, reverse) == (
        "<div>INTRO <p><em>ONE</em> PARA</p> TAIL</div><ul><li><b>Y</b> X</li></ul><table><tr><td>B A</td></tr></table>"
    )


def test_untranslatable_content_is_kept_and_every_tag_comes_out_once_properly_nested():
    source = (
        '<p translate="no">Keep me</p><p>Run <code>x = 1</code> now<br>then <span class="notranslate">Kmt</span>'
        "</p><pre>  two\n  lines</pre><!-- a comment --><script>var a = 1;</script>"
    )
    out = translate_fragment(source, upper)
    assert out == (
        '<p translate="no">Keep me</p><p>RUN <code>x = 1</code> NOW<br>THEN <span class="notranslate">Kmt</span>'
        "</p><pre>  two\n  lines</pre><!-- a comment --><script>var a = 1;</script>"
    )
    broken = "<p>Broken <b>bold <i>both</b> end <a href=x>link"  # repaired as a browser repairs it
    for translate in (upper, reverse):
        out = translate_fragment(broken, translate)
        assert tags(out) == tags(broken) and tags(translate_fragment(out, upper)) == tags(broken)


def test_a_tag_around_words_the_translation_drops_stays_empty_where_its_neighbours_went():
    def drop_middle(lines):  # "a b c" -> "A C", b aligned to nothing
        return [("A C", ((0, 0), (2, 1))) for _ in lines]

    assert translate_fragment("<p>a <b>b</b> c</p>", drop_middle) == "<p>A<b></b> C</p>"
    # an empty element (a placeholder) goes after the target words of the source words before it
    assert translate_fragment('<p>a b<span id="1"></span> c</p>', upper) == '<p>A B<span id="1"></span> C</p>'
    assert translate_fragment('<p>a b<span id="1"></span> c</p>', reverse) == '<p>C B<span id="1"></span> A</p>'
    assert translate_fragment('<p>a <span id="1"></span> b</p>', upper) == '<p>A <span id="1"></span> B</p>'
    fragment = Fragment("<p>one</p><p> </p><p>two <i>three</i></p>")
    assert fragment.lines == ["one", "two three"]
    assert fragment.render(upper(fragment.lines)) == "<p>ONE</p><p> </p><p>TWO <i>THREE</i></p>"
