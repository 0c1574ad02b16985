"""A Jupyter-centric toolkit for fine-tuning LLM agents with RL and SFT.

``import toolkit as tk; client = tk.connect()`` gives a client of the training API, the chat
endpoint and the trace service: the embedded local server by default, any deployment by
environment or arguments.
"""

__version__ = "0.1.0"

from .client import AsyncClient, Client, connect, connect_async

__all__ = ["AsyncClient", "Client", "__version__", "connect", "connect_async"]
