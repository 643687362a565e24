"""The course as a book: every lesson executed once (cached), its outputs kept, and a static HTML
book built from them with Sphinx, MyST-NB and sphinx-book-theme, in each edition that exists.

    python -m book                      # make book: full size, both editions, build/book/html
    python -m book --sizes ci --lessons 04,05 --out DIR   # what the tests build

This folder is the book's machinery, apart from the engine and the course wing (minillm/)."""
