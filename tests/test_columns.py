"""Padding that counts screen columns: a Chinese table lines up, an ASCII one is unchanged."""

import pytest

from minillm.utils.columns import Label, columns, pad
from minillm.utils.devices import describe
from minillm.utils.wording import use_language

ASCII_LABELS = ["", "x", "device", "cpu threads", "a label longer than its column"]
SPECS = ["", "s", "12", ">12", "<12", "^12", "^13", "*^9", "->5", ">3", ".3", "<"]


def test_a_wide_character_takes_two_columns():
    assert columns("device") == 6
    assert columns("设备") == 4
    assert columns("CPU 线程数") == 10
    assert columns("（，）") == 6  # full-width punctuation


@pytest.mark.parametrize("label", ASCII_LABELS)
def test_ascii_is_padded_byte_for_byte_as_str_pads_it(label):
    for spec in SPECS:
        assert format(Label(label), spec) == format(label, spec), spec
    assert pad(label, 12) == f"{label:<12}"
    assert pad(label, 12, right=True) == f"{label:>12}"


def test_a_chinese_table_lines_up():
    rows = {"python": "3.12", "设备": "cpu", "CPU 线程数": "2", "延迟 ms": "1.5"}
    lines = [f"{Label(key):>12}: {value}" for key, value in rows.items()]
    assert [line.index(":") for line in lines] != [12] * 4  # characters, not columns
    assert [columns(line.split(":")[0]) for line in lines] == [12] * 4
    assert lines[1] == " " * 8 + "设备: cpu"
    assert f"|{Label('设备'):^8}|" == "|  设备  |"
    assert pad("延迟 ms", 10) + "|" == "延迟 ms   |"
    assert pad("很长很长很长", 4) == "很长很长很长"  # wider than its column: unchanged


def test_describe_labels_in_both_languages_and_code_reads_the_english_keys():
    try:
        use_language("zh")
        chinese = describe()
    finally:
        use_language("en")
    english = describe()
    assert list(english)[:4] == ["python", "torch", "device", "cpu threads"]
    assert list(chinese)[:4] == ["python", "torch", "设备", "CPU 线程数"]
    assert english["device"] == chinese["设备"]
    assert [columns(f"{key:>12}") for key in chinese] == [12] * len(chinese)
    assert [f"{key:>12}" for key in english] == [f"{str(key):>12}" for key in english]
