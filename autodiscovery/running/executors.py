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
from typing import TYPE_CHECKING, Any

from autodiscovery import AutoDiscoveryError
from autodiscovery.campaign import ExecutorSettings
from autodiscovery.roles import Resuming, Sanitizing, declared

if TYPE_CHECKING:
    from autodiscovery.interfaces import Objective, Outcome
    from autodiscovery.roles import Evaluating
    from autodiscovery.toolkit.build import BuildReport


class ExecutorError(AutoDiscoveryError):
    pass


WORKER_CONFIG = {"worker_niceness": 0}
"""The system settings of a local cluster the run starts: workers at the driver's priority, not Ray's
niceness 15 (beside a busy process at the default priority, a worker at 15 gets about a thirtieth of the
CPU)."""


def wrap(harness: Evaluating, settings: ExecutorSettings) -> Evaluating:
    """Where the loop runs the harness's evaluations under these executor settings: the harness itself,
    or its evaluations as Ray tasks (`RayHarness`). Every other role is asked of the harness."""
    return harness if settings.kind == "local" else RayHarness(harness, settings)


def _call(harness: Evaluating, method: str, *args: Any) -> Any:
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


def _here(harness: Evaluating, arg: Any) -> Any:
    """A (source, build) pair whose built file is not on this node is built here first."""
    from autodiscovery.toolkit.build import BuildReport

    if isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], BuildReport):
        source, build = arg
        if build.ok and build.artifact and not os.path.exists(build.artifact):
            return source, harness.build(source)
    return arg


class RayHarness:
    """A harness's evaluations run as Ray tasks: it plays `Evaluating`, `Sanitizing` and `Resuming`, each member
    forwarded to the harness on a node of the cluster (a build on the driver, or as a task); the loop
    asks every other role of the harness itself."""

    def __init__(self, harness: Evaluating, settings: ExecutorSettings) -> None:
        try:
            import ray
        except ImportError:
            raise ExecutorError("executor.kind is ray but Ray is not installed: pip install -e '.[ray]'") from None
        self.ray, self.harness, self.settings = ray, harness, settings
        self.name: str = harness.name
        self.objective: Objective = harness.objective
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
        self.unit = "GPU" if declared(harness).needs_gpu else "CPU"
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
        if isinstance(self.harness, Resuming):
            self.harness.adopt(fp)
        self.ref = self.ray.put(self.harness)  # the evaluations see what the preflight chose
        return fp | {"executor": f"ray ({self.settings.address or 'local'})"}

    def evaluate(self, source: str, build: BuildReport, bar: float | None = None) -> Outcome:
        return self._run(self.task, "evaluate", source, build, bar)

    def head_to_head(self, challenger: tuple[str, BuildReport], incumbent: tuple[str, BuildReport]) -> Outcome:
        return self._run(self.task, "head_to_head", challenger, incumbent)

    def adopt(self, fingerprint: dict) -> None:
        """The harness takes what a recorded run fixed, and the tasks see it."""
        if isinstance(self.harness, Resuming):
            self.harness.adopt(fingerprint)
            self.ref = self.ray.put(self.harness)

    @property
    def sanitizes(self) -> bool:
        return isinstance(self.harness, Sanitizing) and self.harness.sanitizes

    def sanitize(self, source: str, build: BuildReport) -> Outcome | None:
        return self._run(self.task, "sanitize", source, build) if self.sanitizes else None

    def build(self, source: str) -> BuildReport:
        if self.settings.build_on == "workers":
            return self._run(self.cpu_task, "build", source)
        return self.harness.build(source)
