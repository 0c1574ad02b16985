"""The bare PyTorch loops bench_training.py measures the training API against.

Same model (the base's weights, loaded in this process), same data cut the server's way (its
tokenization, advantages and minibatches for RL, its rendered and masked conversations for SFT), the
server's own PPO loss, AdamW with the server's betas and gradient-norm clip: the gradient work of a
job and nothing else (no HTTP, no job, no events, no checkpoint; the weights are usable at once).
Preparing the tensors is not timed, as a bare loop gets them from its own sampler. The steps run in a
thread of their own that sets torch's thread count, as the server's job worker does (under load, torch
on 2 threads ran this model's steps several times slower from the main thread than from another).
With a placement the model goes where the server would put it (bf16 on a GPU; the timing then waits
for the device), and with a LoRA config it trains a peft adapter, as the server does for models that
are not the tiny built-in ones (bench/gpu.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from toolkit.server.engine.device import Placement
from toolkit.server.engine.model import BaseModelSpec, load_model
from toolkit.server.training import lora
from toolkit.server.training.config import RLConfig
from toolkit.server.training.forward import Batch, make_batch
from toolkit.server.training.loss import LossInputs, policy_loss
from toolkit.server.training.policy import BETAS
from toolkit.server.training.sequences import ChatFormat
from toolkit.server.training.trainer import GRAD_CLIP, plan_rl, sft_batches
from toolkit.types.training import JobKind, LoRAConfig, TrajectoryGroup


class BareLoop:
    """One model (every weight, or a peft adapter with ``adapter``) and one AdamW, trained in place on
    ``threads`` torch threads, on ``placement`` (default: the CPU in float32)."""

    def __init__(
        self,
        spec: BaseModelSpec,
        kind: JobKind,
        threads: int,
        placement: Placement | None = None,
        adapter: LoRAConfig | None = None,
    ) -> None:
        self.spec = spec
        self.format = ChatFormat(spec)
        self.model = load_model(spec, placement=placement)
        if adapter is not None:
            self.model = lora.attach(self.model, adapter, spec.name)
        self.device = next(self.model.parameters()).device
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=0.0, betas=BETAS[kind], weight_decay=0.0)
        self.worker = ThreadPoolExecutor(1, initializer=torch.set_num_threads, initargs=(threads,))

    def timed(self, steps: Callable[[], None]) -> float:
        """Seconds ``steps`` take in the loop's thread."""

        def run() -> float:
            started = time.perf_counter()
            steps()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            return time.perf_counter() - started

        return self.worker.submit(run).result()

    def logprobs(self, batch: Batch) -> torch.Tensor:
        """``[B, T]``: log p(token t | tokens before it), 0 at t = 0 (the server's layout)."""
        logits = self.model(input_ids=batch.tokens, attention_mask=batch.attention).logits[:, :-1]
        picked = torch.log_softmax(logits.float(), -1).gather(-1, batch.tokens[:, 1:, None]).squeeze(-1)
        return torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)

    def update(self, loss: torch.Tensor, lr: float) -> None:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, GRAD_CLIP)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class BareRL(BareLoop):
    """An RL step: every minibatch of the server's plan (``num_iterations`` passes) once."""

    def __init__(
        self,
        spec: BaseModelSpec,
        cfg: RLConfig,
        threads: int,
        placement: Placement | None = None,
        adapter: LoRAConfig | None = None,
    ) -> None:
        super().__init__(spec, "rl", threads, placement, adapter)
        self.cfg = cfg

    def batches(self, groups: Sequence[TrajectoryGroup], seed: int) -> list[Batch]:
        plan = plan_rl(groups, self.cfg, self.format, seed)
        return [make_batch(b, self.spec.pad_token_id, self.device) for b in plan.batches]

    def step(self, batches: Sequence[Batch]) -> float:
        """Seconds for the gradient steps over ``batches``."""

        def steps() -> None:
            self.model.eval()  # as the server: no dropout, so the first ratio is exactly 1
            for batch in batches:
                inputs = LossInputs(
                    new_logprobs=self.logprobs(batch),
                    old_logprobs=batch.logprobs,
                    advantages=batch.advantages,
                    mask=batch.mask,
                    weights=batch.weights,
                )
                self.update(policy_loss(inputs, self.cfg).loss, self.cfg.learning_rate)

        return self.timed(steps)


class BareSFT(BareLoop):
    """SFT batches: cross-entropy on the assistant tokens, averaged over them."""

    def __init__(
        self,
        spec: BaseModelSpec,
        threads: int,
        placement: Placement | None = None,
        adapter: LoRAConfig | None = None,
    ) -> None:
        super().__init__(spec, "sft", threads, placement, adapter)

    def batches(self, conversations: Sequence[Any], batch_size: int) -> list[Batch]:
        """The batches of ``conversations``: message lists, or SFT lines (``messages`` and ``tools``)."""
        pairs = [(c["messages"], c.get("tools")) if isinstance(c, dict) else (c, None) for c in conversations]
        samples = [s for messages, tools in pairs for s in self.format.conversation(messages, tools)]
        batches = sft_batches(samples, batch_size)
        return [make_batch(b, self.spec.pad_token_id, self.device) for b in batches]

    def step(self, batches: Sequence[Batch], lr: float) -> float:
        """Seconds for one gradient step per batch."""

        def steps() -> None:
            self.model.train()
            for batch in batches:
                logp = self.logprobs(batch)
                self.update(-(logp * batch.mask).sum() / batch.mask.sum().clamp(min=1), lr)

        return self.timed(steps)
