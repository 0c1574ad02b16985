"""ipywidgets views over the client: build trajectories, launch and monitor jobs, explore checkpoints,
compare models side by side, browse traces and stored trajectories, read a run's RL health and
compare runs. Each widget's logic lives in plain methods, its state in traits; all share one
lifecycle (:class:`~toolkit.widgets._base.ToolkitWidget`): nothing loads in ``__init__``, the first
display or ``start()`` does, and ``close()`` stops what was started."""

from .builder import TrajectoryBuilder
from .chat import ChatCompare
from .checkpoints import CheckpointExplorer
from .compare import RunCompare
from .health import RunHealth
from .launcher import JobLauncher
from .monitor import JobMonitor
from .traces import TraceBrowser
from .trajectories import TrajectoryBrowser

__all__ = [
    "ChatCompare",
    "CheckpointExplorer",
    "JobLauncher",
    "JobMonitor",
    "RunCompare",
    "RunHealth",
    "TraceBrowser",
    "TrajectoryBrowser",
    "TrajectoryBuilder",
]
