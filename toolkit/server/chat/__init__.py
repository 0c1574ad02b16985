"""The chat-completion service (vLLM's ``POST /v1/chat/completions``, spec: chat-completions.md).

``routes`` (HTTP, Server-Sent Events, ``GET /v1/usage``) hands a request body to ``responses``
(the whole completion) or ``streaming`` (chunks). Both ``prepare`` it: ``checks`` (vLLM's checks and
messages), ``model_names`` (which weights), ``sampling_options`` (sampling parameters, structured
output constraint, logits processors) and the rendered prompt; then run it on the engine
(``generation``) and shape the output (``logprobs``, ``usage``). The trace service's completions call
``responses`` and ``streaming`` in-process.
"""
