"""The run's progress lines (scaleformer.runs.callbacks): a training line shows the mean loss of the micro-batches
since the line before (it repeated the last logged value between logging steps), and an evaluation line says what
it does: a language model's scores perplexity, a summarizer's generates."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from scaleformer.runs.callbacks import LogProgress, predict_label


def test_a_training_line_shows_the_running_loss_not_the_last_logged_one(capsys):
    bar = LogProgress(every=0.5)
    trainer = SimpleNamespace(max_steps=4, global_step=0, progress_bar_metrics={"train/loss": torch.tensor(9.0)})
    bar.on_train_start(trainer, None)
    for step, loss in enumerate((1.0, 2.0, 3.0, 5.0), 1):  # one micro-batch a step
        trainer.global_step = step
        bar.on_train_batch_end(trainer, None, {"loss": torch.tensor(loss)}, None, step - 1)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("train:")]
    assert len(lines) == 2, lines
    assert "loss 1.5 (mean of 2 micro-batches)" in lines[0] and "loss 4 (mean of 2 micro-batches)" in lines[1]
    assert "9" not in lines[0].split("loss")[1].split("(")[0]  # the stale logged value is not shown


def test_an_evaluation_line_names_what_it_does(capsys):
    from scaleformer.runs.lm_module import LanguageModelModule
    from scaleformer.runs.module import SummarizationModule

    assert predict_label(SimpleNamespace(task=LanguageModelModule.task)) == "perplexity"
    assert predict_label(SimpleNamespace(task=getattr(SummarizationModule, "task", None))) == "generate"
    bar = LogProgress(every=1.0)
    bar.on_predict_start(SimpleNamespace(num_predict_batches=[2]), SimpleNamespace(task="language_modeling"))
    bar.on_predict_batch_end(None, None, None, None, 0)
    bar.on_predict_batch_end(None, None, None, None, 1)
    assert capsys.readouterr().out.startswith("perplexity: batch 2/2")
