"""A GGUF file turned into a Hugging Face model folder the engine serves: float32 safetensors, config,
generation config, ``tokenizer.json`` and the given chat template.

``transformers`` reads GGUF through the ``gguf`` package (the weights dequantized), but will not save
a model it loaded so: the same architecture is built from the config (without its quantization
config), given the loaded weights, and saved.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.initialization import no_init_weights

from .building import BUILDING

STEPS = ("tokenizer", "weights", "write")


def convert(gguf: Path, folder: Path, chat_template: str) -> None:
    """Write the model folder of ``gguf`` to ``folder`` (created), with ``chat_template``; a progress
    bar of its steps on stderr."""
    with tqdm(total=len(STEPS), desc="convert", unit="step") as bar:
        bar.set_postfix_str(STEPS[0])
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        bar.update()
        bar.set_postfix_str(STEPS[1])
        with BUILDING:
            loaded = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
            config = loaded.config
            del config.quantization_config
            with no_init_weights():
                model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())  # strict: every weight, none left initialised
        model.tie_weights()  # as from_config would have, outside no_init_weights (tied embeddings)
        model.generation_config = loaded.generation_config
        bar.update()
        bar.set_postfix_str(STEPS[2])
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "chat_template.jinja").write_text(chat_template)
        bar.update()
