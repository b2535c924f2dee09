"""Learning curves: history.csv read back per epoch, drawn one colour per run, and the kmt-plot command."""

import csv
import shutil

import pytest

from kmt.errors import KmtError
from kmt.plots import _panels, draw_curves, plot_curves, read_history, run_title
from tests.helpers import pixels_of_color, refused, run_cli


def _run(tmp_path, name, rows):
    """A run directory whose logs/history.csv holds `rows` (dicts with the same keys, `epoch` from 0)."""
    run = tmp_path / name
    (run / "logs").mkdir(parents=True)
    with open(run / "logs" / "history.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return run


def _epochs(count, bleu=True, ppl=False):
    return [
        {
            "epoch": e,
            "loss": 4.0 / (e + 1),
            "val_loss": 4.5 / (e + 1),
            "val_accuracy": 0.1 * e,
            "learning_rate": 1e-3 * (e + 1),
            **({"val_bleu": 5.0 * e if e != 1 else ""} if bleu else {}),
            **({"ppl": 3000.0 / (e + 1) ** 3, "val_ppl": 4000.0 / (e + 1) ** 3} if ppl else {}),
        }
        for e in range(count)
    ]


def test_history_is_read_per_epoch_from_one_with_gaps_kept(tmp_path):
    history = read_history(_run(tmp_path, "run", _epochs(3)))
    assert history["epoch"] == [1, 2, 3]
    assert history["loss"] == pytest.approx([4.0, 2.0, 4.0 / 3])
    assert history["val_bleu"] == [0.0, None, 10.0]  # a missing value stays missing, not 0


def test_each_run_is_drawn_in_its_own_colour(tmp_path):
    import matplotlib.image

    first, second = _run(tmp_path, "a", _epochs(4)), _run(tmp_path, "b", _epochs(6, bleu=False))
    path = plot_curves({"a": read_history(first), "b": read_history(second)}, tmp_path / "out" / "curves.png")
    assert matplotlib.image.imread(path).shape[:2] == (760, 1000)  # loss, a's BLEU, b's accuracy, rate: 2 x 2
    assert pixels_of_color(path, "#1f77b4") > 100 and pixels_of_color(path, "#ff7f0e") > 100  # matplotlib's C0, C1
    only_first = plot_curves({"a": read_history(first)}, tmp_path / "one.png")
    assert matplotlib.image.imread(only_first).shape[:2] == (380, 1500)  # three 5 x 3.8 inch panels at 100 dpi
    assert pixels_of_color(only_first, "#ff7f0e") == 0


def test_the_legend_names_every_run_also_one_without_losses(tmp_path):
    # A run trained elsewhere (bench/multi30k_jax.py) logs perplexity and accuracy but leaves its loss columns blank.
    import matplotlib.pyplot as plt

    without_losses = [row | {"loss": "", "val_loss": ""} for row in _epochs(3, bleu=False, ppl=True)]
    histories = {
        "cpu": read_history(_run(tmp_path, "cpu", _epochs(4, bleu=False, ppl=True))),
        "gpu": read_history(_run(tmp_path, "gpu", without_losses)),
    }
    figure = draw_curves(histories)
    loss_panel = figure.axes[0]
    assert len(loss_panel.get_lines()) == 2  # the cpu run's train and val loss, nothing of the gpu run
    assert [text.get_text() for text in loss_panel.get_legend().get_texts()] == ["cpu", "gpu"]
    plt.close(figure)


def test_perplexity_gets_its_own_log_scaled_panel_when_any_run_logged_it(tmp_path):
    import matplotlib.image

    old = read_history(_run(tmp_path, "old", _epochs(3)))
    new = read_history(_run(tmp_path, "new", _epochs(3, ppl=True)))
    titles = [title for title, _, _ in _panels({"old": old})]
    assert len(titles) == 3 and not any("perplexity" in t for t in titles)  # a run from before the metric: as it was
    panels = _panels({"old": old, "new": new})
    assert [(keys, log) for _, keys, log in panels] == [
        (("loss", "val_loss"), False),
        (("ppl", "val_ppl"), True),
        (("val_bleu",), False),
        (("learning_rate",), False),
    ]
    empty_bleu = read_history(_run(tmp_path, "empty", [{**row, "val_bleu": ""} for row in _epochs(2, ppl=True)]))
    assert _panels({"empty": empty_bleu})[2][1] == ("val_accuracy",)  # a column with no value draws no empty panel
    path = plot_curves({"old": old, "new": new}, tmp_path / "both.png")
    assert matplotlib.image.imread(path).shape[:2] == (760, 1000)  # four panels: 2 x 2 of 5 x 3.8 inches at 100 dpi
    assert pixels_of_color(path, "#ff7f0e") > 100


def test_runs_with_and_without_val_bleu_each_get_their_panel(tmp_path):
    import matplotlib.image

    bleu = read_history(_run(tmp_path, "bleu", _epochs(3, ppl=True)))
    accuracy = read_history(_run(tmp_path, "accuracy", _epochs(3, bleu=False, ppl=True)))
    assert [keys for _, keys, _ in _panels({"bleu": bleu})][2] == ("val_bleu",)
    both = [keys for _, keys, _ in _panels({"bleu": bleu, "accuracy": accuracy})]
    assert both[2:] == [("val_bleu",), ("val_accuracy",), ("learning_rate",)]  # no run left with an empty panel
    path = plot_curves({"bleu": bleu, "accuracy": accuracy}, tmp_path / "five.png")
    assert matplotlib.image.imread(path).shape[:2] == (760, 1500)  # five panels: two rows of three, one left blank


def test_a_directory_without_history_is_a_clear_error(tmp_path):
    with pytest.raises(KmtError, match=f"{tmp_path}/logs/history.csv does not exist"):
        read_history(tmp_path)


def test_kmt_plot_writes_into_the_run_and_fails_in_one_line(smoke_run, tmp_path):
    # A copy of a real run: kmt-plot draws its curves.png again as kmt-train drew it, the title included.
    import matplotlib.image
    import numpy as np

    run = tmp_path / smoke_run.name
    for name in ("config.yaml", "logs/history.csv", "logs/curves.png"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(smoke_run / name, run / name)
    drawn_by_train = matplotlib.image.imread(run / "logs" / "curves.png")
    result = run_cli("plot", run)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(run / "logs" / "curves.png")
    assert np.array_equal(matplotlib.image.imread(run / "logs" / "curves.png"), drawn_by_train)
    assert run_title(run) == f"dates: {smoke_run.name}"
    missing = run_cli("plot", run, tmp_path / "nope", "--output", tmp_path / "both.png")
    assert missing.returncode == 2 and not (tmp_path / "both.png").exists()
    assert missing.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'nope'}/logs/history.csv")


def test_from_epoch_draws_the_late_epochs_only_with_the_axes_scaled_to_them(tmp_path):
    import matplotlib.pyplot as plt

    history = read_history(_run(tmp_path, "run", _epochs(6, ppl=True)))
    figure = draw_curves({"run": history}, first_epoch=4)
    loss_panel = figure.axes[0]
    assert [list(line.get_xdata()) for line in loss_panel.get_lines()] == [[4, 5, 6], [4, 5, 6]]
    assert loss_panel.get_xlim() == (3.5, 6.5)
    assert loss_panel.get_ylim()[1] < 4.5 / 3  # scaled to epochs 4-6 (val loss 4.5/4 at most), not epoch 1's 4.5
    with pytest.raises(KmtError, match=r"--from-epoch 7 is past every run's last epoch \(6\)"):
        draw_curves({"run": history}, first_epoch=7)  # checked where it is used, for every caller
    figure.canvas.draw()
    ppl_panel = figure.axes[1]
    labels = [t.get_text() for t in ppl_panel.get_yticklabels() + ppl_panel.get_yticklabels(minor=True)]
    assert "10" in labels and not any("times" in label or "^" in label for label in labels)  # plain numbers
    plt.close(figure)


def test_kmt_plot_names_runs_by_label_and_refuses_a_miscount_in_one_line(tmp_path, capsys):
    import matplotlib.image

    from kmt.cli import plot

    first, second = _run(tmp_path, "a", _epochs(4)), _run(tmp_path, "b", _epochs(4))
    out = tmp_path / "named.png"
    named = run_cli(
        "plot", first, second, "--label", "dropout 0.2", "--label", "dropout 0.1", "--from-epoch", "2", "--output", out
    )
    assert named.returncode == 0, named.stderr[-2000:]
    assert matplotlib.image.imread(out).shape[:2] == (380, 1500)
    # The mistakes, through kmt-plot's main in this process (the test above runs a failing kmt-plot process):
    for args, line in [
        (["--label", "only one"], "error: 2 run directories need 2 --label names, one each in their order; got 1"),
        (
            ["--label", "same", "--label", "same"],
            "error: two runs are both named 'same'; give each run its own --label",
        ),
        (["--from-epoch", "0"], "kmt-plot: error: --from-epoch must be positive. Received: 0"),
        (["--from-epoch", "5"], "error: --from-epoch 5 is past every run's last epoch (4)"),
    ]:
        assert refused(capsys, plot.main, first, second, *args, "--output", tmp_path / "bad.png") == (2, line)
        assert not (tmp_path / "bad.png").exists()


def test_kmt_plot_draws_a_run_without_a_finished_epoch_yet(tmp_path):
    run = tmp_path / "new"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "history.csv").write_text("epoch,loss,val_loss,learning_rate\n")  # the header, no epoch yet
    drawn = run_cli("plot", run, "--output", tmp_path / "empty.png")
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    assert (tmp_path / "empty.png").is_file()
