"""From a rendered Volcano Job to the processes that stand for its pods: argv, environment,
working directory and the files Volcano's `svc` plugin would mount. Pure: directories, the
interpreter and free ports come in as arguments.

What a pod gets on a cluster, and what stands for it here:
- its container's `command` + `args` and `env`, with Kubernetes' `$(VAR)` expansion;
- Volcano's `env` plugin: `VK_TASK_INDEX` / `VC_TASK_INDEX`; its `svc` plugin:
  `VC_<TASK>_HOSTS` / `VC_<TASK>_NUM` and the same keys plus `<task>.host` as files under
  /etc/volcano (here a directory of the job);
- pod DNS names `<job>-<task>-<i>.<job>[:port]` in env values: 127.0.0.1 with a port of its
  own per pod and container port (every pod shares this machine's network);
- its own /tmp: TMPDIR names a directory of the pod, removed when the pod ends (mktemp in
  the container's script must not leave files in this machine's /tmp);
- volumes: emptyDir -> a directory per pod, the data / log PVCs -> the backend's data and
  log directories, other PVCs -> a directory per claim; env values naming a path under a
  mount point name the local directory instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from volcano_pipelines.errors import InputError
from volcano_pipelines.objects.podspec import literal
from volcano_pipelines.volcano.common import DATA_VOLUME, LOG_VOLUME
from volcano_pipelines.volcano.slices import TASK_OFFSET_ENV
from volcano_pipelines.volcano.tf_cluster import ADDRESSES_ENV
from volcano_pipelines.volcano.entrypoint import ENTRY_SCRIPT_ENV, MPI_MASTER_SCRIPT, MPI_WORKER_SCRIPT, TF_SCRIPT

LOCAL_ADDRESS = "127.0.0.1"
TF_TASKS_ENV = "VPIPE_TF_TASKS"  # set in every task of a TF job (volcano/tf.py)
TF_ADDRESSES_FILE = "vpipe-tf-addresses.json"
SVC_MOUNT = "/etc/volcano"  # where Volcano's svc plugin mounts its ConfigMap
# Every process of a pod, and everything it starts, carries this variable: stopping a pod
# finds its processes by it even when they left the process group (mpiexec's ranks do).
POD_UID_ENV = "VPIPE_LOCAL_POD_UID"
# Open MPI (PRRTE) reads this from the environment: with every worker on one machine, the
# hostfile has one node, and mpiexec must place all ranks on it.
PRTE_MAPPING_ENV = "PRTE_MCA_rmaps_default_mapping_policy"



@dataclass(frozen=True)
class Layout:
    """Where a job's volumes and Volcano's files are on this machine."""

    data_dir: str  # the data PVC
    log_dir: str  # the log PVC
    pvc_root: str  # any other PVC: <pvc_root>/<claim>
    svc_dir: str  # stands for /etc/volcano
    pods_dir: str  # <pods_dir>/<pod>/: the pod's emptyDirs and working directory


@dataclass(frozen=True)
class ReplicaPlan:
    task: str
    index: int
    pod: str
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    dirs: tuple[str, ...]  # to create before the process starts (emptyDirs, PVC directories)
    # What the gang start checks before anything runs (the container would fetch and run these).
    code_url: str | None = None
    code_sha256: str | None = None
    code_path: str | None = None
    entry: str | None = None  # the entry point the container runs, when it runs one
    standin: str | None = None  # "sshd": the backend's stand-in runs instead of the container's sshd
    ports: dict[int, int] = field(default_factory=dict)  # container port -> local port
    tmp_dir: str | None = None  # the pod's /tmp (TMPDIR), removed when the pod ends


def pod_name(job_name: str, task: str, index: int) -> str:
    """Volcano's pod name for replica `index` of `task`."""
    return f"{job_name}-{task}-{index}"


def tasks_of(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    return [(t["name"], int(t.get("replicas", 1))) for t in job["spec"]["tasks"]]


def _task_key(task: str) -> str:
    return task.replace("-", "_")


def svc_env(job: Mapping[str, Any]) -> dict[str, str]:
    """The svc plugin's variables: every task's hosts (comma-separated) and count."""
    env: dict[str, str] = {}
    for task, replicas in tasks_of(job):
        key = _task_key(task).upper()
        env[f"VC_{key}_HOSTS"] = ",".join([LOCAL_ADDRESS] * replicas)
        env[f"VC_{key}_NUM"] = str(replicas)
    return env


def svc_files(job: Mapping[str, Any]) -> dict[str, str]:
    """The svc plugin's ConfigMap as files: `<task>.host` (one host a line, no newline after
    the last one, as Volcano writes it) plus the variables of `svc_env` under their names."""
    files = {f"{_task_key(task)}.host": "\n".join([LOCAL_ADDRESS] * replicas) for task, replicas in tasks_of(job)}
    files.update(svc_env(job))
    return files


def expand(text: str, defined: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion of command, args and env values: a defined variable is
    replaced, `$$` is a literal `$`, anything else stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            if close == -1:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : close]
                out.append(defined.get(name, f"$({name})"))
                i = close + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


def host_rewriter(job: Mapping[str, Any], port_of: Callable[[str, int], int]) -> Callable[[str], str]:
    """Replaces the job's pod DNS names (`<pod>.<job>`, optionally `.<namespace>.svc[.cluster.local]`)
    in a string by 127.0.0.1, and `<name>:<port>` by 127.0.0.1 and that pod's local port."""
    meta = job["metadata"]
    name, namespace = meta["name"], meta.get("namespace", "default")
    pods = sorted((pod_name(name, t, i) for t, n in tasks_of(job) for i in range(n)), key=len, reverse=True)
    if not pods:
        return lambda value: value
    pattern = re.compile(
        r"(?<![A-Za-z0-9_.-])(?P<pod>" + "|".join(map(re.escape, pods)) + r")\." + re.escape(name)
        + r"(?:\." + re.escape(namespace) + r"\.svc(?:\.cluster\.local)?)?"
        + r"(?::(?P<port>\d+))?(?![A-Za-z0-9_-]|\.[A-Za-z0-9])"
    )

    def replace(match: re.Match[str]) -> str:
        port = match.group("port")
        if port is None:
            return LOCAL_ADDRESS
        return f"{LOCAL_ADDRESS}:{port_of(match.group('pod'), int(port))}"

    return lambda value: pattern.sub(replace, value)


def remap_path(value: str, mounts: Sequence[tuple[str, str]]) -> str:
    """A value that is a path at or under a mount point, with the mount's local directory
    in its place (the longest mount point wins). Other values are left alone."""
    for mount, local in sorted(mounts, key=lambda m: len(m[0].rstrip("/")), reverse=True):
        mount = mount.rstrip("/")
        if value == mount or (mount == "" and value == "/"):
            return local
        if value.startswith(mount + "/"):
            return local.rstrip("/") + value[len(mount):]
    return value


def _field_value(path: str, pod: str, namespace: str, pod_uid: str) -> str | None:
    return {
        "metadata.name": pod,
        "metadata.namespace": namespace,
        "metadata.uid": pod_uid,
        "status.podIP": LOCAL_ADDRESS,
        "status.hostIP": LOCAL_ADDRESS,
        "spec.nodeName": "localhost",
    }.get(path)


def _container_env(container: Mapping[str, Any], where: str, pod: str, namespace: str, pod_uid: str) -> dict[str, str]:
    """The container's env list in order (later entries win), each value expanded with the
    ones defined before it, as the kubelet does (the image's own environment takes no part)."""
    defined: dict[str, str] = {}
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item or "valueFrom" not in item:
            defined[name] = expand(str(item.get("value", "")), defined)
            continue
        ref = (item.get("valueFrom") or {}).get("fieldRef") or {}
        value = _field_value(str(ref.get("fieldPath", "")), pod, namespace, pod_uid)
        if value is None:
            raise InputError(
                f"{where}.env[{name}]", item["valueFrom"],
                "a plain value or a fieldRef to metadata.name, metadata.namespace, metadata.uid, status.podIP, "
                "status.hostIP or spec.nodeName: the local backend has no ConfigMaps, Secrets or resource fields",
            )
        defined[name] = value
    return defined


def _mounts(spec: Mapping[str, Any], container: Mapping[str, Any], layout: Layout, pod_dir: str,
            where: str) -> list[tuple[str, str, bool]]:
    """(mount path, local directory, whether the backend creates it) per volume mount."""
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    mounts: list[tuple[str, str, bool]] = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise InputError(f"{where}.volumeMounts[{mount['name']}]", mount["name"], "a volume of the pod")
        if "emptyDir" in volume:
            local = f"{pod_dir}/volumes/{mount['name']}"
        elif "persistentVolumeClaim" in volume:
            if mount["name"] == DATA_VOLUME:
                local = layout.data_dir
            elif mount["name"] == LOG_VOLUME:
                local = layout.log_dir
            else:
                local = f"{layout.pvc_root}/{volume['persistentVolumeClaim']['claimName']}"
        elif "hostPath" in volume:
            local = volume["hostPath"]["path"]
            mounts.append((mount["mountPath"], local + (f"/{mount['subPath']}" if mount.get("subPath") else ""), False))
            continue
        else:
            raise InputError(f"{where}.volumes[{mount['name']}]", sorted(volume), "an emptyDir, persistentVolumeClaim or hostPath volume")
        if mount.get("subPath"):
            local = f"{local}/{mount['subPath']}"
        mounts.append((mount["mountPath"], local, True))
    return mounts


def plan_job(
    job: Mapping[str, Any],
    layout: Layout,
    *,
    pod_uids: Mapping[str, str],
    base_env: Mapping[str, str],
    python: str,
    sshd_standin: str,
    allocate_port: Callable[[], int],
) -> list[ReplicaPlan]:
    """One plan per replica of every task, in task order. `pod_uids` maps each pod name to
    the uid of this attempt's pod; `allocate_port` returns a free local port."""
    meta = job["metadata"]
    name, namespace = meta["name"], meta.get("namespace", "default")
    plugins = (job["spec"].get("plugins") or {})
    local_ports: dict[tuple[str, int], int] = {}

    def port_of(pod: str, port: int) -> int:
        if (pod, port) not in local_ports:
            local_ports[(pod, port)] = allocate_port()
        return local_ports[(pod, port)]

    # Every mpiworker "sshd" listens on the one port the master checks (one address here).
    ssh_port = allocate_port() if any(_runs_script(t, MPI_WORKER_SCRIPT) for t in job["spec"]["tasks"]) else None
    rewrite_hosts = host_rewriter(job, port_of)
    plans: list[ReplicaPlan] = []
    for t_pos, task in enumerate(job["spec"]["tasks"]):
        spec = task["template"]["spec"]
        containers = spec.get("containers") or []
        where = f"spec.tasks[{t_pos}].template.spec.containers[0]"
        if len(containers) != 1:
            raise InputError(f"spec.tasks[{t_pos}].template.spec.containers", len(containers),
                             "exactly one container per pod (the local backend runs one process group per pod)")
        container = containers[0]
        for index in range(int(task.get("replicas", 1))):
            pod = pod_name(name, task["name"], index)
            pod_dir = f"{layout.pods_dir}/{pod}"
            for port in container.get("ports") or []:
                port_of(pod, int(port["containerPort"]))
            volume_mounts = _mounts(spec, container, layout, pod_dir, where)
            mounts = [(path, local) for path, local, _ in volume_mounts]
            if "svc" in plugins:
                mounts.append((SVC_MOUNT, layout.svc_dir))
            env = _container_env(container, where, pod, namespace, pod_uids[pod])
            # Plugins add their variables after the container's own, so theirs win.
            if "svc" in plugins:
                env.update(svc_env(job))
            if "env" in plugins:
                env["VK_TASK_INDEX"] = env["VC_TASK_INDEX"] = str(index)
            # Our contract's data and log directories exist here even without a PVC.
            storage = [(env[key], local) for key, local in (("VPIPE_DATA_DIR", layout.data_dir),
                                                            ("VPIPE_LOG_DIR", layout.log_dir)) if key in env]
            all_mounts = mounts + [m for m in storage if m[0] not in {mp for mp, _ in mounts}]
            env = {key: value if key == ENTRY_SCRIPT_ENV else remap_path(rewrite_hosts(value), all_mounts)
                   for key, value in env.items()}
            if TF_TASKS_ENV in env:
                # Pods have no DNS names of their own here: the entry point takes every task's
                # address (this machine, a port per pod) from a file instead of the svc plugin's.
                env[ADDRESSES_ENV] = f"{layout.svc_dir}/{TF_ADDRESSES_FILE}"
            argv = [expand(part, env) for part in [*(container.get("command") or []), *(container.get("args") or [])]]
            standin = None
            if _runs_script(task, MPI_WORKER_SCRIPT):
                # mpiexec starts every rank on this machine without ssh; the workers only need
                # to answer on the ssh port the master waits for.
                standin = "sshd"
                argv = [python, sshd_standin, "--address", LOCAL_ADDRESS, "--port", str(ssh_port)]
            if _runs_script(task, MPI_MASTER_SCRIPT):
                env["VPIPE_SSH_PORT"] = str(ssh_port)
                env.setdefault(PRTE_MAPPING_ENV, ":oversubscribe")
                if "VPIPE_WORKER_HOSTFILE" in env:
                    env["VPIPE_WORKER_HOSTFILE"] = f"{layout.svc_dir}/nodes"
            cwd = remap_path(container["workingDir"], all_mounts) if container.get("workingDir") else f"{pod_dir}/work"
            tmp_dir = f"{pod_dir}/tmp"
            # A container's /tmp is its own; TMPDIR set by the container's env wins.
            full_env = {**base_env, "HOSTNAME": pod, "TMPDIR": tmp_dir, **env, POD_UID_ENV: pod_uids[pod]}
            created = [local for _, local, create in volume_mounts if create] + [local for _, local in storage]
            dirs = tuple(dict.fromkeys([cwd, tmp_dir, *created]))
            plans.append(ReplicaPlan(
                task=task["name"],
                index=index,
                pod=pod,
                argv=tuple(argv),
                env=full_env,
                cwd=cwd,
                dirs=dirs,
                code_url=env.get("VPIPE_CODE_URL") or None,
                code_sha256=env.get("VPIPE_CODE_SHA256") or None,
                code_path=env.get("VPIPE_CODE_PATH") or None,
                entry=env.get("VPIPE_ENTRY") if _runs_script(task, TF_SCRIPT) else None,
                standin=standin,
                ports={port: local for (p, port), local in local_ports.items() if p == pod},
                tmp_dir=tmp_dir,
            ))
    return plans


def tf_addresses(plans: Sequence[ReplicaPlan]) -> dict[str, str]:
    """The file the entry point of a TF job reads here instead of the svc plugin's hosts:
    {task: [address of replica 0, 1, ...]}, each replica at its own local port. Empty for a
    job that is not a TF job."""
    tf_plans = [p for p in plans if TF_TASKS_ENV in p.env]
    if not tf_plans:
        return {}
    port = int(tf_plans[0].env["VPIPE_TF_PORT"])
    addresses: dict[str, list[str]] = {}
    # By role and role index: a role split over several tasks (volcano/slices.py) is one list.
    for plan in sorted(tf_plans, key=lambda p: int(p.env.get(TASK_OFFSET_ENV, "0")) + p.index):
        addresses.setdefault(plan.env["VPIPE_ROLE"], []).append(f"{LOCAL_ADDRESS}:{plan.ports[port]}")
    return {TF_ADDRESSES_FILE: json.dumps(addresses, sort_keys=True)}


def nodes_file() -> str:
    """The host list the MPI master reads here: this machine, once. The svc plugin's
    mpiworker.host lists one line per pod, and every pod has the same address here, but Open
    MPI refuses a node listed twice with a slot count. It ends with a newline: the master's
    `while read` loop skips a last line without one."""
    return LOCAL_ADDRESS + "\n"


def _runs_script(task: Mapping[str, Any], script: str) -> bool:
    """Whether the task's container runs this entry script of ours (volcano/entrypoint.py)."""
    containers = task["template"]["spec"].get("containers") or []
    env = containers[0].get("env") or [] if containers else []
    return any(e.get("name") == ENTRY_SCRIPT_ENV and e.get("value") == literal(script) for e in env)


def coordinator_note(job: Mapping[str, Any]) -> str | None:
    """A warning for a TF job with parameter servers and no chief: TF2 ParameterServerStrategy
    code needs a coordinator, and without one its parameter servers and workers wait for it
    without end (TF1 between-graph code needs none, so this is a warning, not an error)."""
    names = {task.get("name") for task in (job.get("spec") or {}).get("tasks") or []}
    if "ps" not in names or "chief" in names:
        return None
    name = (job.get("metadata") or {}).get("name", "")
    return (f"job {name} has parameter servers and no chief: TF2 ParameterServerStrategy code needs a coordinator "
            "(--chief) and its tasks wait for one without end (TF1 between-graph code runs without); "
            "--timeout bounds the run")
