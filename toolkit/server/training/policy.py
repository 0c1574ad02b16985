"""The model a job trains: its weights at a step (a LoRA adapter on the frozen base, or every weight)
and its AdamW state, loaded from the checkpoint files or reused from memory, and saved back.

The optimizer state carries over between jobs of the same kind (RL after RL, SFT after SFT) and
starts fresh otherwise, as ART does. It is written beside each checkpoint (``OptimizerState``), so
a job after a server restart continues exactly where the previous one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...types.training import JobKind, LoRAConfig
from ..engine.device import Placement
from ..engine.model import WEIGHTS_FILE, BaseModelSpec, load_model, save_weights
from ..engine.resources import torch_threads
from . import lora
from .sequences import ChatFormat

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

TRAINER_THREADS = torch_threads()
BETAS: dict[JobKind, tuple[float, float]] = {"rl": (0.9, 0.99), "sft": (0.9, 0.95)}


@dataclass
class Policy:
    """A model being trained: ``model`` is the causal LM (with LoRA layers when ``adapter`` is set),
    at ``step``, with the optimizer of the last job kind."""

    model_id: str
    step: int
    model: PreTrainedModel
    adapter: PeftModel | None = None
    kind: JobKind | None = None
    optimizer: torch.optim.Optimizer | None = None

    def trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(name, p) for name, p in self.model.named_parameters() if p.requires_grad]

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for _, p in self.trainable()]

    def optimizer_for(self, kind: JobKind) -> torch.optim.Optimizer:
        if self.optimizer is None or self.kind != kind:
            self.optimizer = torch.optim.AdamW(self.parameters(), lr=0.0, betas=BETAS[kind], weight_decay=0.0)
            self.kind = kind
        return self.optimizer

    def save(self, folder: Path) -> None:
        """Write the weights into the (new, empty) ``folder``: the peft adapter, or every weight."""
        if self.adapter is not None:
            lora.save(self.adapter, folder)
        else:
            save_weights(self.model, folder / WEIGHTS_FILE)

    def optimizer_state(self) -> dict[str, Any] | None:
        """What :meth:`restore_optimizer` reads back: the job kind, the names of the parameters in
        the optimizer's order and its state dict (None before any gradient step)."""
        if self.optimizer is None or self.kind is None:
            return None
        return {
            "kind": self.kind,
            "names": [name for name, _ in self.trainable()],
            "optimizer": self.optimizer.state_dict(),
        }

    def restore_optimizer(self, state: dict[str, Any]) -> None:
        """Continue with a saved optimizer state, if it belongs to these very parameters."""
        if state.get("names") != [name for name, _ in self.trainable()]:
            return
        kind: JobKind = state["kind"]
        optimizer = self.optimizer_for(kind)
        optimizer.load_state_dict(state["optimizer"])


class Trainer:
    """Loads policies (reusing the one in memory when it is at the wanted step) and chat formats."""

    def __init__(self, placement: Placement | None = None) -> None:
        self.placement = placement  # the device and dtype of every model a job loads (None: CPU fp32)
        self._policy: Policy | None = None
        self._formats: dict[str, ChatFormat] = {}

    def chat_format(self, spec: BaseModelSpec) -> ChatFormat:
        if spec.name not in self._formats:
            self._formats[spec.name] = ChatFormat(spec)
        return self._formats[spec.name]

    def policy(
        self,
        model_id: str,
        step: int,
        spec: BaseModelSpec,
        weights: Path | None,
        settings: LoRAConfig | None,
        optimizer: Path | None,
        job_seed: int | None = None,
    ) -> Policy:
        """The policy a job trains: the one in memory if it is this model at ``step``, else the
        checkpoint's ``weights`` folder (None: the base) with the ``optimizer`` state saved beside
        it, if any; a fresh adapter is drawn from ``job_seed`` (:func:`.lora.adapter_seed`). Every
        job asks for it before its forward passes, in the job worker thread, which then trains on
        ``TRAINER_THREADS`` torch threads whatever the engine chose."""
        torch.set_num_threads(TRAINER_THREADS)
        current = self._policy
        self._policy = None  # until the job commits, the weights in memory are in flux
        if current is not None and current.model_id == model_id and current.step == step:
            return current
        if settings is None:
            current = Policy(model_id, step, load_model(spec, weights, self.placement))
        else:
            base = load_model(spec, placement=self.placement)
            adapter = (
                lora.load(base, weights, trainable=True)
                if weights is not None
                else lora.attach(base, settings, spec.name, lora.adapter_seed(job_seed))
            )
            current = Policy(model_id, step, base, adapter)
        if optimizer is not None and optimizer.exists():
            device = next(current.model.parameters()).device
            current.restore_optimizer(torch.load(optimizer, map_location=device, weights_only=True))
        return current

    def keep(self, policy: Policy, step: int) -> None:
        """The job saved ``policy`` as ``step``: keep it for the next job of the model."""
        policy.step = step
        self._policy = policy


def reference_model(
    spec: BaseModelSpec, weights: Path | None, placement: Placement | None = None
) -> PreTrainedModel:
    """A checkpoint's weights for inference only (the KL reference): the base, the base with an
    adapter folded in, or whole weights."""
    if weights is not None and lora.is_adapter(weights):
        return lora.merged(load_model(spec, placement=placement), weights)
    return load_model(spec, weights, placement)
