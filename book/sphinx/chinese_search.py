"""The Chinese edition's search index: Sphinx's own (jieba cuts the text into words), with the
name of its JavaScript stemmer fixed. Sphinx 9.0 ships the English stemmer for Chinese pages (for
the Latin words in them) but points the page at `ChineseStemmer`, which does not exist, so the
search page fails; the stemmer's name comes from `language_name`."""

from sphinx.search.zh import SearchChinese


class ChineseSearch(SearchChinese):
    language_name = "English"  # the name of the stemmer in english-stemmer.js: EnglishStemmer


def setup(app):
    app.add_search_language(ChineseSearch)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
