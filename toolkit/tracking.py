"""Experiment tracking, as ART does: a run's config, per-step metrics and record to W&B or MLflow.

``tk.tracking.log_to(run, source)`` takes a W&B run (``wandb.init(...)``, offline mode included) or
an MLflow run (``mlflow.start_run()``, or its run id with ``tracking_uri``) and logs what ``source``
holds: an experiment (``tk.experiment``), its record (``ExperimentRecord``) or exported file, or a
model id read through a client. It logs

- the **config**: the experiment's name, seed, source and deployment, and each job's request
  (``jobs.<n>.<kind>.<key>``); for a model, its base and each step's job config (``steps.<N>.<key>``);
- the **per-step metrics**: each checkpoint's metrics at its step, under the checkpoint's names
  (``train/reward``, ``loss/train``: what ``tk.research.sweep`` reports too), ``<model name>/<metric>``
  when the source has several models;
- the **record**: the whole JSON (the exported experiment, or the model's checkpoint records) as
  ``record.json``, a W&B artifact of type ``experiment-record`` or an MLflow run artifact.

``tk.tracking.track(["wandb", "mlflow"], source)`` starts a run of each, logs and finishes it; one
tracker failing does not stop the others (:class:`TrackingError` names it after they ran).
``wandb`` and ``mlflow`` (``pip install 'rl-notebook-toolkit[tracking]'``) are imported only here,
when a run is logged: ``import toolkit`` imports neither.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .client import OneLine
from .frames import flatten
from .lineage import checkpoint_records, lineage_frame

if TYPE_CHECKING:
    from .client import Client

INSTALL = "pip install 'rl-notebook-toolkit[tracking]'"
MLFLOW_PARAM_VALUE = 6000  # MLflow's longest param value; longer ones are cut (the record has them whole)
MLFLOW_BATCH = (100, 1000)  # params, metrics per log_batch
RECORD_FILE = "record.json"
TRACKERS = ("wandb", "mlflow")
ARTIFACT_REFERENCE = "wandb-artifact://"  # a config string W&B would resolve as an artifact it uses


class TrackingError(OneLine, RuntimeError):
    """Logging failed on some trackers after every tracker was tried: ``failed`` holds each one's
    error (the first line of each in the message), ``runs`` the ids of the runs that were logged."""

    def __init__(self, failed: Mapping[str, BaseException], runs: Mapping[str, str]) -> None:
        errors = "; ".join(
            f"{kind}: {type(e).__name__}: {next(iter(str(e).splitlines()), '')}" for kind, e in failed.items()
        )
        logged = ", ".join(f"{kind} run {run_id}" for kind, run_id in runs.items()) or "nothing"
        super().__init__(f"logging failed to {errors} (logged: {logged})")
        self.failed, self.runs = dict(failed), dict(runs)


@dataclass
class Tracked:
    """What a tracker receives: a ``name``, a flat ``config``, ``metrics`` by step and the ``record``
    (JSON-ready)."""

    name: str
    config: dict[str, Any]
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def _experiment(doc: Mapping[str, Any]) -> Tracked:
    """From an exported experiment (the JSON of ``ExperimentRecord``)."""
    config = flatten({k: doc.get(k) for k in ("name", "seed", "python", "source", "deployment")})
    for n, job in enumerate(doc.get("jobs", [])):
        request = {
            k: v for k, v in job.get("request", {}).items() if k not in ("model_id", "trajectory_groups")
        }
        config |= flatten(request, f"jobs.{n}.{job.get('kind')}.")
    models = doc.get("models", [])
    metrics: dict[int, dict[str, float]] = {}
    for entry in models:
        prefix = f"{entry['model']['name']}/" if len(models) > 1 else ""
        for record in entry.get("records", []):
            values = {prefix + k: float(v) for k, v in (record.get("metrics") or {}).items()}
            if values:  # step 0 (the base) has none
                metrics.setdefault(int(record["step"]), {}).update(values)
    return Tracked(str(doc.get("name", "experiment")), config, metrics, dict(doc))


def _model(client: Client, model_id: str) -> Tracked:
    """From a model on a deployment: its lineage (each step's job config and metrics) and its
    checkpoint records where the deployment keeps them."""
    model = client.models.retrieve(model_id)
    tree = lineage_frame(client, [model_id])
    steps = tree[tree["kind"] == "checkpoint"]
    config: dict[str, Any] = {"model_id": model.id, "model": model.name, "base_model": model.base_model}
    metrics: dict[int, dict[str, float]] = {}
    for row in steps.to_dict("records"):
        config |= flatten(row["config"], f"steps.{int(row['step'])}.")
        if row["metrics"]:
            metrics[int(row["step"])] = {k: float(v) for k, v in row["metrics"].items()}
    records = [r.model_dump(mode="json") for r in checkpoint_records(client, model_id) or []]
    lineage = json.loads(steps.drop(columns=["metrics"]).to_json(orient="records"))
    return Tracked(
        model.name,
        config,
        metrics,
        {"model": model.model_dump(mode="json"), "records": records, "lineage": lineage},
    )


def tracked(source: Any, client: Client | None = None) -> Tracked:
    """``source`` as a :class:`Tracked`: an ``Experiment`` (its ``record()``), an ``ExperimentRecord``
    or its JSON (a mapping), the path of an exported experiment, a :class:`Tracked`, or a model id
    (read through ``client``)."""
    if isinstance(source, Tracked):
        return source
    if hasattr(source, "record") and callable(source.record):  # an Experiment
        source = source.record()
    if hasattr(source, "model_dump"):  # an ExperimentRecord
        return _experiment(source.model_dump(mode="json"))
    if isinstance(source, Mapping):
        return _experiment(source)
    if isinstance(source, Path) or (isinstance(source, str) and source.endswith(".json")):
        return _experiment(json.loads(Path(source).read_text()))
    if isinstance(source, str):
        if client is None:
            raise ValueError("give client= to read the model's checkpoints")
        return _model(client, source)
    raise TypeError(
        f"cannot track a {type(source).__name__}: give an experiment, its record or file, or a model id"
    )


def _require(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError as missing:
        raise ImportError(f"logging to {module} needs the {module} package: {INSTALL}") from missing


def log_wandb(run: Any, source: Any, client: Client | None = None) -> Tracked:
    """Log ``source`` (see :func:`tracked`) to a W&B run: ``run.config``, ``run.log(metrics, step=N)``
    per checkpoint step (a fresh run: W&B drops steps below one already logged) and the record as an
    artifact of type ``experiment-record``."""
    wandb = _require("wandb")
    found = tracked(source, client)
    _wandb_config(run, found.config)
    for step in sorted(found.metrics):
        run.log(found.metrics[step], step=step)
    artifact = wandb.Artifact(re.sub(r"[^\w.-]", "-", f"{found.name}-record"), type="experiment-record")
    with artifact.new_file(RECORD_FILE) as f:
        json.dump(found.record, f, sort_keys=True)
    run.log_artifact(artifact)
    return found


def _wandb_config(run: Any, config: Mapping[str, Any]) -> None:
    """``run.config.update(config)``, the values W&B would take for artifact references kept as the
    plain strings they are: W&B resolves a ``wandb-artifact://`` string (an SFT job's
    ``training_data_url``) through its API as an artifact the run uses, which fails offline (no API
    key) and names another thing than a local server's upload. W&B has no public switch for this, so
    those values go to the run through the config's own callback, as ``update`` sends the rest."""
    references = {k: v for k, v in config.items() if isinstance(v, str) and v.startswith(ARTIFACT_REFERENCE)}
    run.config.update({k: v for k, v in config.items() if k not in references}, allow_val_change=True)
    if references:
        run.config._items.update(references)
        run.config._callback(data=references)


def log_mlflow(
    run: Any, source: Any, client: Client | None = None, *, tracking_uri: str | None = None
) -> Tracked:
    """Log ``source`` (see :func:`tracked`) to an MLflow run (an ``ActiveRun``/``Run``, or its id) of
    the store at ``tracking_uri`` (default: MLflow's current one): the config as params (values cut
    at MLflow's 6000 characters), each step's metrics at that step, the record as ``record.json``."""
    _require("mlflow")
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    run_id = run if isinstance(run, str) else run.info.run_id
    mlflow = MlflowClient(tracking_uri)
    found = tracked(source, client)
    params = [Param(k, str(v)[:MLFLOW_PARAM_VALUE]) for k, v in found.config.items()]
    now = int(
        time.time() * 1000
    )  # + step: MLflow's latest value of a metric (by timestamp) is its last step's
    metrics = [
        Metric(k, v, now + s, s) for s, values in sorted(found.metrics.items()) for k, v in values.items()
    ]
    for start in range(0, len(params), MLFLOW_BATCH[0]):
        mlflow.log_batch(run_id, params=params[start : start + MLFLOW_BATCH[0]])
    for start in range(0, len(metrics), MLFLOW_BATCH[1]):
        mlflow.log_batch(run_id, metrics=metrics[start : start + MLFLOW_BATCH[1]])
    mlflow.log_dict(run_id, found.record, RECORD_FILE)
    return found


def check_trackers(to: Sequence[str]) -> None:
    """Refuse anything but a list of :data:`TRACKERS` (a bare string too: its letters are no list)."""
    if isinstance(to, str) or not isinstance(to, Sequence):
        raise TypeError(f"give the trackers as a list, e.g. ['wandb', 'mlflow'], not {to!r}")
    unknown = [kind for kind in to if kind not in TRACKERS]
    if unknown:
        raise ValueError(f"track to {' or '.join(map(repr, TRACKERS))}, not {unknown[0]!r}")


def track(
    to: Sequence[str],
    source: Any,
    client: Client | None = None,
    *,
    tracking_uri: str | None = None,
    **init: Any,
) -> dict[str, str]:
    """Log ``source`` to a new run of each tracker in ``to`` (``"wandb"``, ``"mlflow"``), named after
    it, and finish the run: what ``tk.experiment(..., track=[...])`` does on exit. ``init`` goes to
    ``wandb.init`` (e.g. ``mode="offline"``, ``project=``); ``tracking_uri`` to MLflow. Returns each
    tracker's run id. A tracker that fails does not stop the others: after all were tried,
    :class:`TrackingError` names each failure (its ``runs``: the ids of those logged)."""
    check_trackers(to)
    found = tracked(source, client)
    ids: dict[str, str] = {}
    failed: dict[str, BaseException] = {}
    for kind in to:
        try:
            ids[kind] = _track_wandb(found, init) if kind == "wandb" else _track_mlflow(found, tracking_uri)
        except Exception as error:  # reported with the others, after every tracker ran
            failed[kind] = error
    if failed:
        raise TrackingError(failed, ids) from next(iter(failed.values()))
    return ids


def _track_wandb(found: Tracked, init: Mapping[str, Any]) -> str:
    run = _require("wandb").init(name=found.name, **{"project": "toolkit", **init})
    try:
        log_wandb(run, found)
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()
    return str(run.id)


def _track_mlflow(found: Tracked, tracking_uri: str | None) -> str:
    _require("mlflow")
    from mlflow.tracking import MlflowClient

    store = MlflowClient(tracking_uri)
    experiment = store.get_experiment_by_name(found.name)
    exp_id = experiment.experiment_id if experiment else store.create_experiment(found.name)
    run_id = str(store.create_run(exp_id, run_name=found.name).info.run_id)
    try:
        log_mlflow(run_id, found, tracking_uri=tracking_uri)
    except BaseException:
        store.set_terminated(run_id, status="FAILED")
        raise
    store.set_terminated(run_id)
    return run_id


def log_to(run: Any, source: Any, client: Client | None = None, **options: Any) -> Tracked:
    """Log ``source`` to a W&B run (:func:`log_wandb`) or an MLflow run (:func:`log_mlflow`), told
    apart by the run's package; returns what was logged."""
    package = type(run).__module__.split(".")[0]
    if package == "wandb":
        return log_wandb(run, source, client)
    if package == "mlflow":
        return log_mlflow(run, source, client, **options)
    raise TypeError(f"log_to takes a wandb or mlflow run, not a {type(run).__name__}")
