"""Installs outside the checkout: `python -m build` on the working tree, the wheel (and `pip install .`) in fresh
virtualenvs, and the wheel's `kmt-train debug=smoke` run from an empty directory, writing `runs/` there.

The new virtualenvs get their dependencies from this environment's site-packages through a `.pth` file (nothing is
downloaded). A plain directory line in a `.pth` does not run that directory's own `.pth` files, so an editable kmt
installed here stays inactive there: `kmt` has to come from the wheel, and the test checks that it does.
"""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from kmt.cli.errors import check_overrides
from kmt.config import config_dir

ROOT = Path(__file__).resolve().parents[1]


def _working_tree():
    """The files a commit of the working tree would hold (tracked, plus untracked ones git does not ignore)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=600,
    ).stdout.decode()
    return sorted(name for name in listed.split("\0") if name and (ROOT / name).is_file())


def _run(*command, cwd, env=None):
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _fresh_venv(path, env):
    """A new virtualenv at `path` (no pip in it) that sees this environment's packages after its own; its
    (python, site-packages)."""
    _run(sys.executable, "-m", "venv", "--without-pip", path, cwd=path.parent, env=env)
    python = path / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=path, env=env).strip())
    ours = [entry for entry in sys.path if Path(entry).name in ("site-packages", "dist-packages")]
    (site / "kmt_test_dependencies.pth").write_text("".join(f"{entry}\n" for entry in ours))
    return python, site


def _pip_install(python, target, cwd, env):
    """Installs into the new virtualenv only (`--ignore-installed`: the kmt this environment has, seen through the
    `.pth`, is neither reused nor uninstalled)."""
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        "--ignore-installed",
        target,
        cwd=cwd,
        env=env,
    )


@pytest.mark.e2e
def test_wheel_installs_and_trains_from_an_empty_directory(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"TF_CPP_MIN_LOG_LEVEL": "3", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    files = _working_tree()
    source = tmp_path / "source"
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)

    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, source, cwd=tmp_path, env=env)
    (wheel,) = dist.glob("kmt-*.whl")
    assert len(list(dist.glob("kmt-*.tar.gz"))) == 1
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    conf = [name for name in files if name.startswith("conf/")]
    expected = {name for name in files if name.startswith("kmt/") and name.endswith(".py")}
    expected |= {f"kmt/{name}" for name in conf}
    # A miss here: a package absent from `packages` in pyproject.toml, or a conf/ file its package-data misses.
    assert sorted(expected - in_wheel) == []

    python, site = _fresh_venv(tmp_path / "venv", env)
    _pip_install(python, wheel, tmp_path, env)
    empty = tmp_path / "work"
    empty.mkdir()
    found = _run(
        python, "-c", "import importlib.util; print(importlib.util.find_spec('kmt').origin)", cwd=empty, env=env
    ).strip()
    assert found == str(site / "kmt" / "__init__.py")  # the wheel's kmt, not this environment's
    assert all((site / "kmt" / name).is_file() for name in conf)

    # A user's own config directory composes on top (Hydra's --config-dir), here a recipe of theirs.
    (empty / "my_conf" / "experiment").mkdir(parents=True)
    (empty / "my_conf" / "experiment" / "mine.yaml").write_text("# @package _global_\nname: mine\n")
    kmt_train = python.parent / "kmt-train"
    job = _run(
        kmt_train, "--config-dir", "my_conf", "experiment=mine", "debug=smoke", "--cfg", "job", cwd=empty, env=env
    )
    assert "name: mine" in job.splitlines()

    _run(kmt_train, "debug=smoke", cwd=empty, env=env)
    (run,) = (empty / "runs" / "dates").iterdir()
    assert (run / "metrics.json").is_file() and (run / "export" / "saved_model.pb").is_file()
    sources = OmegaConf.load(run / ".hydra" / "hydra.yaml").hydra.runtime.config_sources
    assert [source.path for source in sources if source.provider == "main"] == [str(site / "kmt" / "conf")]
    assert sorted(path.name for path in empty.iterdir()) == ["my_conf", "runs"]

    # `pip install .` (not editable) from the source tree ships the configs the same way.
    python, site = _fresh_venv(tmp_path / "venv-source", env)
    _pip_install(python, source, tmp_path, env)
    assert all((site / "kmt" / name).is_file() for name in conf)
    assert not (site / "conf").exists()


def test_a_checkout_composes_its_own_conf_directory():
    """Run from a checkout (an editable install), kmt reads the top-level conf/ itself: edits take effect at once."""
    assert config_dir() == str(ROOT / "conf")


def test_a_users_config_dir_is_checked_with_kmts_own(tmp_path, capsys):
    """kmt-train validates the command line before Hydra starts; a recipe in `--config-dir` passes that check, and a
    directory that is not there is one clear line."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nmodel:\n  num_layers: 1\n")
    for flag in (["--config-dir", str(tmp_path)], ["-cd", str(tmp_path)], [f"--config-dir={tmp_path}"]):
        check_overrides([*flag, "experiment=mine", "debug=smoke"])
    with pytest.raises(SystemExit) as stopped:
        check_overrides(["--config-dir", str(tmp_path / "nowhere"), "experiment=mine"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"error: --config-dir {tmp_path / 'nowhere'}: no such directory\n"
