"""The Chinese edition's search index: Sphinx's own (jieba cuts the text into words), with the
name of its JavaScript stemmer fixed, and a query cut into the index's words.

Sphinx 9.0 ships the English stemmer for Chinese pages (for the Latin words in them) but points
the page at `ChineseStemmer`, which does not exist, so the search page fails; the stemmer's name
comes from `language_name`.

The index holds the words jieba cut from the pages, and a page matches a query only if it holds
every word of the query; but the browser splits a query only at spaces and punctuation, so a
phrase such as 分页注意力 or 首词元生成时间 is one word that no page holds. A run of Chinese
characters that is no word of the index (and part of none) is cut here into the longest words the
index has, left to right; characters that start no such word are left out."""

from sphinx.search.zh import SearchChinese

SPLITTER = r"""
const CHINESE_RUN = /([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)/u;

function indexWords(run, terms) {
  const words = [];
  let start = 0;
  while (start < run.length) {
    let end = run.length;
    while (end > start + 1 && !terms.hasOwnProperty(run.slice(start, end))) end--;
    if (end > start + 1) words.push(run.slice(start, end));
    start = end > start + 1 ? end : start + 1;
  }
  return words;
}

function chineseWords(run) {
  const index = typeof Search !== "undefined" ? Search._index : null;
  if (!index || run.length < 2) return [run];
  const terms = index.terms;
  if (terms.hasOwnProperty(run) || Object.keys(terms).some((t) => t.includes(run))) return [run];
  const words = indexWords(run, terms);
  return words.length ? words : [run];
}

var splitQuery = (query) =>
  query
    .split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)
    .filter((term) => term)
    .flatMap((term) => term.split(CHINESE_RUN).filter((part) => part))
    .flatMap((part) => (CHINESE_RUN.test(part) ? chineseWords(part) : [part]));
"""


class ChineseSearch(SearchChinese):
    language_name = "English"  # the name of the stemmer in english-stemmer.js: EnglishStemmer
    js_splitter_code = SPLITTER


def setup(app):
    app.add_search_language(ChineseSearch)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
