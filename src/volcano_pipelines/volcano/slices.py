"""A role's replicas as one or more Volcano tasks ("slices"), so that a job of thousands of
parameter servers or tens of thousands of workers can start under Volcano's svc plugin.

The svc plugin (Volcano v1.14, no flag turns it off) gives every container of a job
`VC_<TASK>_HOSTS`, every host of each task comma-joined, and Linux refuses to start a process
with one environment string over 128 KiB (MAX_ARG_STRLEN, NUL included): 3,887 workers in one
task for a job named `trainjob01`. The limit is per task, not per job, so a role too large for
one task is rendered as several tasks of the same pod template, `worker`, `worker-s1`,
`worker-s2`, ..., each small enough, with `VPIPE_TASK_OFFSET` telling its pods where their
indices start: pod `<job>-worker-s1-17` is worker `offset + 17`. The role's cluster is the
slices' hosts in order (volcano/tf_cluster.py, the MPI master's hostfile).

What stays shared is the plugin's ConfigMap, which holds every list twice (`<task>.host` and
`VC_<TASK>_HOSTS`) within the API server's 1 MiB, and an MPI job's ssh Secret, which names
every host twice within the same 1 MiB: `check_plugin_objects` refuses a job past either
before anything is built. Every size here is arithmetic on the names Volcano will make
(`<job>-<task>-<index>.<job>`), checked against the real kernel and Volcano's own formats in
tests/unit/volcano/test_slices.py."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from volcano_pipelines.objects.validate import MAX_EXEC_STRING, fail

__all__ = [
    "MAX_PLUGIN_OBJECT",
    "TASK_OFFSET_ENV",
    "SLICED_ROLES",
    "SSH_KEYS_BYTES",
    "Slice",
    "check_plugin_objects",
    "most_replicas",
    "plan_slices",
    "role_of",
    "slice_name",
    "slice_roles",
    "split_min_available",
    "svc_configmap_size",
    "svc_env_string",
    "svc_host_file",
    "svc_hosts_size",
    "ssh_secret_size",
    "task_offsets",
]

# The API server refuses a ConfigMap or Secret whose values exceed 1 MiB together.
MAX_PLUGIN_OBJECT = 1024 * 1024
# The ssh plugin's Secret beside its config: an RSA-2048 private key in PEM (about 1,700
# bytes) and its public key twice (about 400 each); rounded up.
SSH_KEYS_BYTES = 4096
# The roles that can have more replicas than one task holds (a chief, an evaluator and an MPI
# master are one pod).
SLICED_ROLES = ("ps", "worker", "mpiworker")
# In every pod of a slice but the first: the role index of the slice's pod 0.
TASK_OFFSET_ENV = "VPIPE_TASK_OFFSET"
_SLICE = re.compile(r"(?P<role>[a-z][a-z0-9-]*?)-s(?P<k>[1-9][0-9]*)")


@dataclass(frozen=True)
class Slice:
    """One Volcano task of a role: its name, the role index of its pod 0, its replicas."""

    task: str
    offset: int
    replicas: int


def slice_name(role: str, k: int) -> str:
    return role if k == 0 else f"{role}-s{k}"


def role_of(task: str, roles: Sequence[str] | None = None) -> str:
    """The role a Volcano task belongs to: `worker-s2` -> `worker`; any other name is its own
    role. With `roles`, only a slice of one of them is folded (a task of another job that
    happens to end in `-s<k>` stays as it is)."""
    found = _SLICE.fullmatch(task)
    if found is None or (roles is not None and found["role"] not in roles):
        return task
    return found["role"]


def _digits(count: int) -> int:
    """The decimal digits of 0, 1, ..., count - 1 together, without building them."""
    total, low, width = 0, 0, 1
    while low < count:
        high = min(count, 10 ** width)
        total += (high - low) * width
        low, width = high, width + 1
    return total


def _task_key(task: str) -> str:
    """How the plugins write a task's name in keys and variables: '-' becomes '_'."""
    return task.replace("-", "_")


def svc_host_file(task: str) -> str:
    """Where the svc plugin mounts a task's hosts, one a line."""
    return f"/etc/volcano/{_task_key(task)}.host"


def svc_hosts_size(job_name: str, task: str, replicas: int) -> int:
    """Bytes of one task's host list as the svc plugin writes it: `<job>-<task>-<i>.<job>`
    joined by one separator."""
    fixed = len(f"{job_name}-{task}-.{job_name}")
    return replicas * fixed + _digits(replicas) + max(replicas - 1, 0)


def svc_env_string(job_name: str, task: str, replicas: int) -> int:
    """Bytes the kernel counts for `VC_<TASK>_HOSTS=<hosts>` (its NUL included)."""
    variable = f"VC_{_task_key(task).upper()}_HOSTS"
    return len(variable) + 1 + svc_hosts_size(job_name, task, replicas) + 1


def most_replicas(job_name: str, task: str) -> int:
    """The most replicas whose svc variable fits one environment string (binary search)."""
    low, high = 0, MAX_EXEC_STRING
    while low < high:
        mid = (low + high + 1) // 2
        if svc_env_string(job_name, task, mid) <= MAX_EXEC_STRING:
            low = mid
        else:
            high = mid - 1
    return low


def plan_slices(job_name: str, role: str, replicas: int) -> list[Slice]:
    """The fewest tasks whose svc variables each fit one environment string, sized evenly
    (the first ones take the remainder). One task named as the role when it fits."""
    # At least as many as the role's own name needs (slice names are longer): few steps.
    count = max(1, -(-replicas // max(1, most_replicas(job_name, role))))
    while True:
        size = -(-replicas // count)  # ceil
        # The last slice's name is the longest; every slice is checked against it.
        if size <= most_replicas(job_name, slice_name(role, count - 1)):
            break
        count += 1
    base, extra = divmod(replicas, count)
    slices, offset = [], 0
    for k in range(count):
        n = base + (1 if k < extra else 0)
        slices.append(Slice(slice_name(role, k), offset, n))
        offset += n
    return slices


def slice_roles(job_name: str, roles: Mapping[str, int]) -> dict[str, list[Slice]]:
    """Every role (name -> replicas, in the job's order) as its slices."""
    return {role: plan_slices(job_name, role, n) for role, n in roles.items()}


def split_min_available(slices: Sequence[Slice], min_available: int) -> list[int]:
    """A role's gang size over its slices, the first ones filled first."""
    mins = []
    for s in slices:
        mins.append(min(s.replicas, min_available))
        min_available -= mins[-1]
    return mins


def task_offsets(tasks: Mapping[str, int], roles: Sequence[str]) -> dict[str, tuple[str, int]]:
    """Per Volcano task (name -> replicas, in the job's order), its role and the role index of
    its pod 0."""
    seen: dict[str, int] = {}
    result = {}
    for task, replicas in tasks.items():
        role = role_of(task, roles)
        result[task] = (role, seen.get(role, 0))
        seen[role] = seen.get(role, 0) + replicas
    return result


def svc_configmap_size(job_name: str, tasks: Mapping[str, int]) -> int:
    """Bytes of the svc plugin's ConfigMap values: per task its hosts newline-joined, comma-
    joined, and their number."""
    return sum(2 * svc_hosts_size(job_name, task, n) + len(str(n)) for task, n in tasks.items())


def ssh_secret_size(job_name: str, tasks: Mapping[str, int]) -> int:
    """Bytes of the ssh plugin's Secret values: its keys and a config naming every pod twice,
    `Host <pod>` / `  HostName <pod>.<job>`."""
    config = len("StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n")
    for task, n in tasks.items():
        pod = len(f"{job_name}-{task}-")
        per_host = len("Host \n  HostName .\n") + 2 * pod + len(job_name)
        config += n * per_host + 2 * _digits(n)
    return SSH_KEYS_BYTES + config


def _plugin_objects(job_name: str, roles: Mapping[str, int], ssh: bool) -> list[tuple[str, int]]:
    """(what, bytes) of the objects the plugins make for these roles, sliced. Slicing only
    lengthens names: when the roles unsliced already overflow an object, those sizes are
    returned (a bound from below, without planning slices for absurd counts)."""
    def sizes(tasks: Mapping[str, int]) -> list[tuple[str, int]]:
        objects = [("the svc plugin's ConfigMap names every host twice", svc_configmap_size(job_name, tasks))]
        if ssh:
            objects.append(("the ssh plugin's Secret names every host twice in its ssh config",
                            ssh_secret_size(job_name, tasks)))
        return objects

    unsliced = sizes(roles)
    if any(n > MAX_PLUGIN_OBJECT for _, n in unsliced):
        return unsliced
    return sizes({s.task: s.replicas for slices in slice_roles(job_name, roles).values() for s in slices})


def check_plugin_objects(job_name: str, roles: Mapping[str, int], role: str, *, ssh: bool) -> None:
    """The svc plugin's ConfigMap (and the ssh plugin's Secret) must fit 1 MiB. A failure
    names `role` (the largest), the most replicas of it that fit beside the others, and the
    object that stops one more."""
    def fits(n: int) -> bool:
        return all(size <= MAX_PLUGIN_OBJECT for _, size in _plugin_objects(job_name, {**roles, role: n}, ssh))

    if fits(roles[role]):
        return
    low, high = 0, roles[role]
    while low < high:  # the most replicas of `role` that fit: the sizes grow with them
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    [(what, _), *_] = [(w, n) for w, n in _plugin_objects(job_name, {**roles, role: low + 1}, ssh)
                       if n > MAX_PLUGIN_OBJECT]
    size = dict(_plugin_objects(job_name, roles, ssh))[what]
    others = ", ".join(f"{n} {r}" for r, n in roles.items() if r != role)
    fail(f"{role}.replicas", roles[role],
         f"at most {low} {role} replicas{' beside ' + others if others else ''} for job name {job_name!r}: "
         f"{what} ({size} bytes here) and the API server refuses one over {MAX_PLUGIN_OBJECT} bytes; use fewer "
         "replicas or a shorter job name")
