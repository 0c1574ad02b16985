"""Trace service resource (``client.traces``): every operation of the Weave trace-server contract.

Method names follow Weave's trace-server interface (``call_start``, ``calls_query``, ``obj_read``,
...). Each takes its request model, or the same fields as keywords, and returns the typed response;
stream queries return iterators that read the JSON Lines as they arrive. :meth:`Traces.call_tree`
nests the calls of one trace. One module per noun holds its op builders (``op_*``, operations as
data) and its sync and async methods; :mod:`.resource` puts them together. On W&B's hosted Weave
the client authenticates as Weave does (HTTP Basic ``api:<key>``, see :mod:`.auth`).
"""

from .auth import is_wandb_hosted, trace_auth_headers
from .base import purge_query
from .calls import (
    CallNode,
    build_tree,
    op_call_end,
    op_call_read,
    op_call_start,
    op_call_update,
    op_call_upsert_batch,
    op_calls_complete,
    op_calls_delete,
    op_calls_query,
    op_calls_query_stats,
)
from .completions import (
    op_completions_create,
    op_completions_create_stream,
)
from .costs import (
    op_cost_create,
    op_cost_purge,
    op_cost_query,
)
from .feedback import (
    op_feedback_batch_create,
    op_feedback_create,
    op_feedback_purge,
    op_feedback_query,
    op_feedback_replace,
)
from .files import (
    op_file_content,
    op_file_create,
)
from .objects import (
    op_obj_create,
    op_obj_delete,
    op_obj_read,
    op_objs_query,
)
from .otel import (
    op_otel_export,
)
from .refs import (
    op_refs_read_batch,
)
from .resource import AsyncTraces, Traces
from .service import (
    op_health,
    op_server_info,
)
from .tables import (
    op_table_create,
    op_table_query,
    op_table_query_stats,
    op_table_query_stream,
    op_table_update,
)
from .threads import (
    op_threads_query,
)

__all__ = [
    "AsyncTraces",
    "CallNode",
    "Traces",
    "build_tree",
    "is_wandb_hosted",
    "op_call_end",
    "op_call_read",
    "op_call_start",
    "op_call_update",
    "op_call_upsert_batch",
    "op_calls_complete",
    "op_calls_delete",
    "op_calls_query",
    "op_calls_query_stats",
    "op_completions_create",
    "op_completions_create_stream",
    "op_cost_create",
    "op_cost_purge",
    "op_cost_query",
    "op_feedback_batch_create",
    "op_feedback_create",
    "op_feedback_purge",
    "op_feedback_query",
    "op_feedback_replace",
    "op_file_content",
    "op_file_create",
    "op_health",
    "op_obj_create",
    "op_obj_delete",
    "op_obj_read",
    "op_objs_query",
    "op_otel_export",
    "op_refs_read_batch",
    "op_server_info",
    "op_table_create",
    "op_table_query",
    "op_table_query_stats",
    "op_table_query_stream",
    "op_table_update",
    "op_threads_query",
    "purge_query",
    "trace_auth_headers",
]
