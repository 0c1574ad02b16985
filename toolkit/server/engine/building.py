"""One lock for building models and adapters in the server's threads.

``transformers``' ``no_init_weights()`` (used by ``from_pretrained`` and by the engine's fast
checkpoint load) disables weight initialisation by replacing ``torch.nn.init``'s functions,
process-wide, for as long as it runs. A thread that initialises weights meanwhile (``peft`` drawing a
fresh adapter: A at random, B = 0) gets uninitialised memory instead, and a second thread entering
the patch saves the patched functions as the originals, leaving initialisation off for the whole
process. The engine loads checkpoints while training jobs build their models and adapters in another
thread, so every such build holds :data:`BUILDING`.

The server imports ``transformers`` and ``peft`` when it first builds a model or an adapter (their
model classes take seconds to import: start-up does without them), inside these builds, so the
first import also happens in one thread at a time: a lazy import racing another thread's can find
a module half initialised.
"""

from __future__ import annotations

import threading

BUILDING = threading.RLock()
