"""Small pieces every chapter shares, in one place.

    validate.py  argument checks with one wording ("an int from 1 to 300")
    stats.py     percentiles and summaries every report uses
    devices.py   which device to run on, and clocks that wait for it (Timer, best_time)
    lazy.py      names imported from their modules on first use
    columns.py   padding that counts screen columns (a Chinese character takes two)
    wording.py   the language of the sentences the engine prints for a lesson (English, 中文)
"""
