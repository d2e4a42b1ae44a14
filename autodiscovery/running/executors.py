"""Where evaluations run: in this process's children (the default), or as tasks on a Ray cluster.

With `executor.kind: ray`, the harness is shipped to the cluster once and every evaluation (and each
head-to-head, and the preflight) is a Ray task asking for one GPU (a GPU harness) or one CPU (a
simulator): Ray pins it to a device of a node that has one. Builds happen on the driver, or as tasks
too (`executor.build_on: workers`); a task whose node lacks the build's file builds it there (builds
are deterministic and cached). A worker or node lost mid-task is retried by Ray
(`executor.max_retries`). The driver alone writes the database, once per returned result, so a
retried task is never recorded twice.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from autodiscovery import AutoDiscoveryError
from autodiscovery.campaign import ExecutorSettings

if TYPE_CHECKING:
    from autodiscovery.interfaces import Harness, HarnessBase, Outcome
    from autodiscovery.toolkit.build import BuildReport


class ExecutorError(AutoDiscoveryError):
    pass


WORKER_CONFIG = {"worker_niceness": 0}
"""The system settings of a local cluster the run starts: workers at the driver's priority, not Ray's
niceness 15 (beside a busy process at the default priority, a worker at 15 gets about a thirtieth of the
CPU)."""


def wrap(harness: HarnessBase, settings: ExecutorSettings) -> Harness:
    """The harness as the loop should use it under these executor settings."""
    # cast: RayHarness is a proxy, what it does not do itself is the harness's own (`__getattr__`)
    return harness if settings.kind == "local" else cast("Harness", RayHarness(harness, settings))


def _call(harness: HarnessBase, method: str, *args: Any) -> Any:
    """Runs inside a Ray task: the harness's method, with the facts of where it ran."""
    import ray

    from autodiscovery.interfaces import Outcome

    if method in ("evaluate", "sanitize"):
        source, build, *rest = args
        args = (*_here(harness, (source, build)), *rest)
    elif method == "head_to_head":
        args = tuple(_here(harness, a) for a in args)
    out = getattr(harness, method)(*args)
    if isinstance(out, Outcome):
        ctx = ray.get_runtime_context()
        gpus = [str(g) for g in ray.get_gpu_ids()]
        out.metrics = dict(out.metrics) | {"ray": {"node": ctx.get_node_id()[:12], "gpu_ids": gpus,
                                                   "pid": os.getpid()}}
        if gpus:
            out.device = f"{out.device} (Ray GPU {','.join(gpus)})"
    return out


def _here(harness: HarnessBase, arg: Any) -> Any:
    """A (source, build) pair whose built file is not on this node is built here first."""
    from autodiscovery.toolkit.build import BuildReport

    if isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], BuildReport):
        source, build = arg
        if build.ok and build.artifact and not os.path.exists(build.artifact):
            return source, harness.build(source)
    return arg


class RayHarness:
    """The harness, with its evaluations run as Ray tasks; everything else is the harness's own."""

    def __init__(self, harness: HarnessBase, settings: ExecutorSettings) -> None:
        try:
            import ray
        except ImportError:
            raise ExecutorError("executor.kind is ray but Ray is not installed: pip install -e '.[ray]'") from None
        self.ray, self.harness, self.settings = ray, harness, settings
        if not ray.is_initialized():
            # A cluster this process starts runs its workers at the driver's priority: Ray's default
            # (niceness 15) starves the processes that build and time kernels on a busy machine.
            own = {} if settings.address or os.environ.get("RAY_ADDRESS") else {"_system_config": WORKER_CONFIG}
            try:
                ray.init(address=settings.address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False, ignore_reinit_error=True, **own)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = settings.address or "a new local cluster"
                raise ExecutorError(f"cannot reach the Ray cluster at {where}: {' '.join(str(exc).split())[:300]}") from None
        self.unit = "GPU" if harness.needs_gpu else "CPU"
        resources = {"num_gpus": 1} if self.unit == "GPU" else {"num_cpus": 1}
        self.task = ray.remote(_call).options(max_retries=settings.max_retries, **resources)
        self.cpu_task = ray.remote(_call).options(max_retries=settings.max_retries, num_cpus=1)
        self.ref = ray.put(harness)

    @property
    def parallel(self) -> int:
        """Tasks at once: the cluster's GPUs (or CPUs), at least one."""
        return max(1, int(self.ray.cluster_resources().get(self.unit, 1)))

    def _run(self, task: Any, method: str, *args: Any) -> Any:
        try:
            return self.ray.get(task.remote(self.ref, method, *args))
        except self.ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
        except (self.ray.exceptions.WorkerCrashedError, self.ray.exceptions.NodeDiedError,
                self.ray.exceptions.ObjectLostError) as exc:
            raise ExecutorError(f"a Ray task failed {self.settings.max_retries + 1} times: "
                                f"{type(exc).__name__}") from None

    def preflight(self, need_gpu: bool = True) -> dict:
        """On the cluster, on a node with the resource evaluations ask for (the driver may have none)."""
        if not need_gpu:
            return self.harness.preflight(need_gpu)
        fp = self._run(self.task, "preflight", need_gpu)
        self.harness.adopt(fp)
        self.ref = self.ray.put(self.harness)  # the evaluations see what the preflight chose
        return fp | {"executor": f"ray ({self.settings.address or 'local'})"}

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        return self._run(self.task, "evaluate", source, build, bar)

    def head_to_head(self, challenger: tuple[str, BuildReport], incumbent: tuple[str, BuildReport]) -> Outcome:
        return self._run(self.task, "head_to_head", challenger, incumbent)

    def sanitize(self, source: str, build: BuildReport) -> Outcome | None:
        return self._run(self.task, "sanitize", source, build)

    def build(self, source: str) -> BuildReport:
        if self.settings.build_on == "workers":
            return self._run(self.cpu_task, "build", source)
        return self.harness.build(source)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.harness, name)
