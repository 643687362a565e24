"""scripts/test_levels.py runs the every_level tests again at each lower kernel level: it names
their files (tests/conftest.py's EVERY_LEVEL), so it must name each one, and only real files."""

from pathlib import Path

from script_modules import script

ROOT = Path(__file__).resolve().parents[1]


def test_the_level_runs_name_every_file_the_marker_covers(request):
    conftest = next(p for p in request.config.pluginmanager.get_plugins()
                    if getattr(p, "__file__", None) == str(ROOT / "tests" / "conftest.py"))
    files = script("test_levels").every_level_files()
    assert sorted(Path(f).name for f in files) == sorted(conftest.EVERY_LEVEL)
    assert all((ROOT / f).is_file() for f in files)
