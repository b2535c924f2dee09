"""The run directory: atomic writes, the run lock, and a run's files read back with one-line errors."""

import os


def test_a_run_directory_admits_one_training_at_a_time(tmp_path):
    import pytest

    from kmt.errors import KmtError
    from kmt.run_dir import RunLock

    with RunLock(tmp_path):
        with pytest.raises(KmtError, match=f"{tmp_path} is in use by another kmt-train \\(pid {os.getpid()}\\)"):
            RunLock(tmp_path).__enter__()
    with RunLock(tmp_path):  # released on exit
        pass


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path):
    import numpy as np
    import pytest

    from kmt.models import Transformer
    from kmt.run_dir import write_atomically

    model = Transformer(vocab_size=11, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16)
    path = tmp_path / "last.weights.h5"
    write_atomically(path, model.save_weights)
    before = path.read_bytes()
    original = [w.copy() for w in model.get_weights()]

    class Crash(Exception):
        pass

    def dies_mid_write(target, overwrite=True):
        with open(target, "wb") as f:
            f.write(b"half a file")
        raise Crash

    model.set_weights([w + 1 for w in original])
    model.save_weights = dies_mid_write
    with pytest.raises(Crash):
        write_atomically(path, model.save_weights)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the temporary is gone
    del model.save_weights
    model.load_weights(path)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), original))


def test_find_checkpoint_names_what_is_missing(tmp_path):
    import pytest

    from kmt.errors import KmtError
    from kmt.run_dir import Checkpoints

    with pytest.raises(KmtError, match="no checkpoint at .*best.weights.h5"):
        Checkpoints(tmp_path).find("best")


# A truncated or corrupt file of a run stops the command with one line that names it and the way out.


def _copy_run(smoke_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(smoke_run, run, ignore=shutil.ignore_patterns(".lock"))
    return run


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _one_line_error(status, stdout, stderr):
    """The one `error: ` line of a refused `kmt-train` (`helpers.train_main`)."""
    assert status == 2, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in stderr, stderr[-3000:]
    return lines[-1]


def test_a_truncated_checkpoint_is_named_with_the_way_out(smoke_run, tmp_path, capsys):
    from kmt.cli import export
    from tests.helpers import refused

    run = _copy_run(smoke_run, tmp_path)
    path = _truncate(run / "checkpoints" / "epoch_002.weights.h5")
    status, line = refused(capsys, export.main, run, "--checkpoint", path, "--output", tmp_path / "export")
    assert status == 2
    assert f"{path} is unreadable (truncated or corrupt" in line and "--checkpoint best" in line
    assert not (tmp_path / "export").exists()


def test_truncated_averaged_weights_say_to_average_again(smoke_run, tmp_path):
    import pytest

    from kmt.checkpoints import load_run_model
    from kmt.errors import KmtError

    run = _copy_run(smoke_run, tmp_path)
    path = run / "checkpoints" / "average_last2.weights.h5"
    path.write_bytes((run / "checkpoints" / "epoch_002.weights.h5").read_bytes())
    _truncate(path)
    with pytest.raises(KmtError, match=f"{path} is unreadable .*average again with kmt-export RUN_DIR --average N"):
        load_run_model(run, path)


def test_a_truncated_resume_backup_refuses_with_the_command_that_starts_from_an_epoch(
    smoke_run, tmp_path, monkeypatch, capsys
):
    from tests.helpers import train_main

    run = _copy_run(smoke_run, tmp_path)
    backup = _truncate(run / "checkpoints" / "backup" / "latest.weights.h5")
    _truncate(run / "checkpoints" / "epoch_002.weights.h5")  # the newest epoch does not read either
    line = _one_line_error(*train_main(monkeypatch, capsys, "debug=smoke", "trainer.epochs=3", f"hydra.run.dir={run}"))
    assert f"{backup} is unreadable (truncated or corrupt" in line
    assert f"trainer.init_from={run / 'checkpoints' / 'epoch_001.weights.h5'} and a new hydra.run.dir" in line


def test_a_corrupt_resume_record_is_named(smoke_run, tmp_path):
    import pytest

    from kmt.errors import KmtError
    from kmt.run_dir import RunDir

    run = RunDir(_copy_run(smoke_run, tmp_path))
    metadata = run.checkpoints.backup / "training_metadata.json"
    _truncate(metadata)
    epoch = run.checkpoints.epoch(2)
    with pytest.raises(KmtError, match=f"{metadata} is unreadable .*trainer.init_from={epoch} and a new"):
        run.checkpoints.resume_state()
    for path in run.checkpoints.epochs():
        _truncate(path)
    with pytest.raises(KmtError, match="no epoch checkpoint in .* reads either; train the run again"):
        run.checkpoints.resume_state()


def test_a_truncated_tokenizer_is_named(smoke_run, tmp_path, capsys):
    from kmt.cli import export
    from tests.helpers import refused

    run = _copy_run(smoke_run, tmp_path)
    model = _truncate(run / "tokenizer" / "joint.model")
    status, line = refused(capsys, export.main, run, "--output", tmp_path / "export")
    assert status == 2
    assert f"{model} is unreadable (truncated or corrupt" in line and "data.tokenizer settings" in line


def test_a_corrupt_config_is_named(smoke_run, tmp_path, capsys):
    from kmt.cli import export
    from tests.helpers import refused

    run = _copy_run(smoke_run, tmp_path)
    config = run / "config.yaml"
    config.write_text(config.read_text()[:200] + "\n  model: [unclosed\n")
    status, line = refused(capsys, export.main, run, "--output", tmp_path / "export")
    assert status == 2
    assert f"{config} is unreadable (truncated or corrupt" in line and ".hydra/config.yaml" in line


def test_corrupt_metrics_are_named_and_a_sweep_counts_the_job_failed(smoke_run, tmp_path, caplog):
    import shutil

    import pytest

    from kmt.errors import KmtError
    from kmt.run_dir import RunDir
    from kmt.sweep import summarize

    sweep = tmp_path / "sweep"
    shutil.copytree(smoke_run, sweep / "0", ignore=shutil.ignore_patterns(".lock", "export"))
    run = RunDir(sweep / "0")
    _truncate(run.metrics)
    with pytest.raises(KmtError, match=f"{run.metrics} is unreadable .*kmt-train command again"):
        run.read_metrics()
    assert summarize(sweep)[0]["status"] == "failed"
    assert f"{run.metrics} is unreadable" in caplog.text


def test_a_run_directory_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, capsys):
    from tests.helpers import train_main

    file = tmp_path / "a_file"
    file.write_text("")
    line = _one_line_error(*train_main(monkeypatch, capsys, "debug=smoke", f"hydra.run.dir={file}/run"))
    assert line == (f"error: cannot create {file}/run: {file} is a file, not a directory; choose another hydra.run.dir")
    assert file.read_text() == ""
