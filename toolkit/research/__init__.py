"""Research on trajectories: turn rollouts into data, pick the best, re-score them, evaluate checkpoints.

- :mod:`.export` / :mod:`.imports`: groups to a pandas frame, a ``datasets.Dataset``, Parquet (ART's
  layout) and JSONL (OpenAI fine-tuning, TRL conversational, ART groups), and back; :mod:`.rows`
  says what each format carries and drops.
- :mod:`.selection`: the best of each group, and an SFT job on it in one call.
- :mod:`.rescore` / :mod:`.judge`: a new reward (a Python callable, or an LLM judge ranking a
  group's trajectories against each other, RULER-shaped) on copies, and the old-versus-new frame.
- :mod:`.evaluate`: a held-out set against each checkpoint, concurrently; a frame and a figure.
- :mod:`.records`: groups from stored records (``client.models.trajectories``) or a model's log.
- :mod:`.sweep`: one recipe over N seeds; per-step metrics, mean ± t-interval per config.

Every function takes groups, their JSON, or stored trajectory records.
"""

from .evaluate import Evaluation, chat_task, checkpoint_name, evaluate, evaluate_async
from .export import to_dataset, to_frame, to_jsonl, to_parquet, to_rows
from .figures import evaluation as evaluation_figure
from .figures import rescore as rescore_figure
from .imports import from_dataset, from_frame, from_rows, read_jsonl, read_parquet
from .judge import JudgeError, judge, judge_async, judge_group, judge_group_async
from .records import as_groups, stored_groups, stored_records
from .rescore import comparison, rescore, rescore_async
from .selection import best_of_groups, sft_from_best
from .sweep import SweepResult, combine, mean_ci_table, sweep

__all__ = [
    "Evaluation",
    "JudgeError",
    "SweepResult",
    "as_groups",
    "best_of_groups",
    "chat_task",
    "checkpoint_name",
    "combine",
    "comparison",
    "evaluate",
    "evaluate_async",
    "evaluation_figure",
    "from_dataset",
    "from_frame",
    "from_rows",
    "judge",
    "judge_async",
    "judge_group",
    "judge_group_async",
    "mean_ci_table",
    "read_jsonl",
    "read_parquet",
    "rescore",
    "rescore_async",
    "rescore_figure",
    "sft_from_best",
    "stored_groups",
    "stored_records",
    "sweep",
    "to_dataset",
    "to_frame",
    "to_jsonl",
    "to_parquet",
    "to_rows",
]
