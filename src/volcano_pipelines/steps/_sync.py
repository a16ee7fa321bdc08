"""The `sync` step: stage a dataset from HDFS (or WebHDFS, a local directory, any fsspec
URL) into a mounted directory (the GlusterFS-backed PVC): incremental, parallel, atomic,
verified, with optional shard manifests. See docs/sync.md. The step checks its arguments;
the engine (`transfer/engine.py`) does the work."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.declaration import arg
from volcano_pipelines.errors import InputError
from volcano_pipelines.labels import POD_NAME_ENV, run_id_or_new
from volcano_pipelines.k8s.connection import Connection
from volcano_pipelines.interface.params import check_types
from volcano_pipelines.progress import Progress
from volcano_pipelines.transfer import engine
from volcano_pipelines.transfer.durability import DEFAULT_DURABILITY, MODES
from volcano_pipelines.transfer.executor import DEFAULT_STREAMS, DEFAULT_TRANSFERS, Options
from volcano_pipelines.transfer.inflight import threads_left_behind
from volcano_pipelines.transfer.plan import (
    DEFAULT_MAX_DELETE,
    check_glob,
    display_path,
    parse_max_delete,
    quoted_path,
)
from volcano_pipelines.transfer.progress import Progress as TransferProgress
from volcano_pipelines.transfer.result import DeletionRefused, SyncFailed, SyncInterrupted, SyncResult
from volcano_pipelines.transfer.sources import Auth
from volcano_pipelines.transfer.urls import parse_dest, parse_source

__all__ = [
    "DEFAULT_DURABILITY",
    "DEFAULT_MAX_DELETE",
    "DEFAULT_STREAMS",
    "DURABILITY_MODES",
    "DEFAULT_TRANSFERS",
    "CopyPodOptions",
    "DeletionRefused",
    "SyncFailed",
    "SyncInterrupted",
    "SyncResult",
    "TransferProgress",
    "display_path",
    "quoted_path",
    "sync",
    "sync_report",
    "threads_left_behind",
]

MAX_TRANSFERS = 256
MAX_SHARDS = 1000  # one manifest per worker; a task has at most 1000 replicas (volcano/validate.py)
MAX_CHUNK_MIB = 256
MAX_STREAMS = 16
DURABILITY_MODES = MODES


@dataclass(frozen=True)
class CopyPodOptions:
    """How the copy pods run (`workers` above 1): one parameter group of the sync step, so each
    setting's default and help are written here only; the front ends show the fields as flat
    inputs (--queue, --cpu, ...), and steps/_sync_workers.py builds the copy job from the group."""

    queue: str = arg("default", "with workers above 1, the Volcano queue of the copy job")
    cpu: str = arg("1", "with workers above 1, each copy pod's CPU request")
    memory: str = arg("1Gi", "with workers above 1, each copy pod's memory request and limit")
    node_selector: Mapping[str, str] | None = arg(None, "with workers above 1, node labels the copy pods must match")
    tolerations: Sequence[str] | None = arg(
        None, "with workers above 1, taints the copy pods tolerate, kubectl form KEY[=VALUE]:EFFECT")
    spread: bool = arg(False, "with workers above 1, prefer one copy pod per node (pod anti-affinity)")
    max_retry: int = arg(3, "with workers above 1, runs of the copy job in all before it fails (a killed or evicted "
                            "pod restarts it; files already in place are not copied again)")


def sync_report(src: str, dst: str, dry_run: bool) -> SyncResult:
    """The report of a run that failed before it made one (bad input, say): nothing done, `src` and
    `dst` as a run that got going names them (a URL, an absolute path) where they parse."""
    try:
        src = parse_source(src).url
    except InputError:
        pass
    try:
        dst = parse_dest(dst)
    except InputError:
        pass
    return SyncResult(src=src, dst=dst, dry_run=dry_run)


class _Forward(TransferProgress):
    """The transfer's counters, reported through the Progress every step takes (a KFP or Argo
    step pod's log lines, the quickstart); the CLI passes its own TransferProgress instead."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress

    def planned(self, summary: str) -> None:
        self.progress.note(summary)

    def changed(self) -> None:
        self.progress.files(self.files_done, self.files_total, self.bytes_done, self.bytes_total)

    def stopping(self, message: str) -> None:
        self.progress.note(message)


def sync(
    src: str,
    dst: str,
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    checksum: bool = False,
    delete: bool = False,
    max_delete: str = DEFAULT_MAX_DELETE,
    force_delete: bool = False,
    dry_run: bool = False,
    transfers: int = DEFAULT_TRANSFERS,
    shards: int = 0,
    user: str | None = None,
    kerberos_principal: str | None = None,
    kerberos_keytab: str | None = None,
    kerberos_ccache: str | None = None,
    hadoop_conf_dir: str | None = None,
    chunk_mib: int = 8,
    full_scan: bool = False,
    durability: str = DEFAULT_DURABILITY,
    streams: int = DEFAULT_STREAMS,
    workers: int = 1,
    run_id: str | None = None,
    dest_pvc: str | None = None,
    dest_subpath: str | None = None,
    namespace: str | None = None,
    image: str | None = None,
    copy_pods: CopyPodOptions = CopyPodOptions(),
    owner: str | None = None,
    connection: Connection = Connection(),
    progress: Progress | TransferProgress | None = None,
) -> SyncResult:
    """Copy new and changed files from `src` into the directory `dst`.

    Raises InputError (bad arguments, missing source; DeletionRefused when `delete` would
    remove more than `max_delete` - "N" files or "P%" of the destination's - or the source
    selected nothing, unless `force_delete`), ClusterError (NameNode / WebHDFS
    unreachable, destination refuses writes), SyncFailed (some files failed, the
    destination is full) or SyncInterrupted (Ctrl-C; a KeyboardInterrupt). SyncFailed,
    DeletionRefused and SyncInterrupted carry the report in `.result`.

    The destination scan reuses the listing of every directory whose mtime has not
    moved since the last run (`.vpipe/scan-cache.json`); `full_scan` reads them all, which
    also catches files edited in place by something other than sync.

    `durability` ("file", "batch", "none"; docs/sync.md) says when a file's data is
    forced to stable storage before it gets its final name; `streams` how many reads of
    large files run at once: one file alone is read as that many ranges in parallel, many
    files that many at a time (transfer/streams.py).

    Args:
        src: hdfs://nn:8020/path, hdfs://nameservice/path, viewfs://..., webhdfs://host:9870/path, file:///path
        dst: destination directory (the mounted volume)
        include: only files matching (repeatable); '**' crosses directories
        exclude: skip files matching (repeatable)
        checksum: compare and verify by content hash, not size + mtime
        delete: remove destination files that are not in the source
        max_delete: with --delete, refuse (exit 2, nothing changed) a plan that deletes more than N files or P% of
            the destination's files; a source that selects no file never deletes without --force-delete
        force_delete: with --delete, delete whatever the plan says, even everything (no --max-delete, no
            empty-source check)
        dry_run: print the plan, change nothing
        transfers: parallel file transfers
        shards: write N manifests balanced by bytes under DST/.vpipe/shards/ (up to 1000, and no more than the
            files selected)
        user: simple-auth user (default: $HADOOP_USER_NAME or the login user)
        kerberos_principal: Kerberos principal (with --kerberos-keytab, or a ticket cache)
        kerberos_keytab: keytab file for --kerberos-principal
        kerberos_ccache: Kerberos ticket cache (default: KRB5CCNAME)
        hadoop_conf_dir: directory with core-site.xml / hdfs-site.xml (default: $HADOOP_CONF_DIR)
        chunk_mib: streaming chunk size in MiB, 1 to 256
        full_scan: read every destination directory instead of reusing the listings of unchanged ones
            (DST/.vpipe/scan-cache.json); also finds files edited in place by other writers
        durability: when data reaches stable storage, always before the file gets its final name: file (fsync
            each file), batch (flush the files written meanwhile together), none (no fsync: after a crash a
            file may be empty under its name)
        streams: large-file reads at once, 1 to 16: a file alone is read as up to N parallel ranges, many files N at a
            time
        workers: copy pods: above 1, the step plans once and the files are copied by N pods of one Volcano Job, each
            mounting the destination's volume, each with its share of the bytes (docs/sync.md)
        run_id: with workers above 1, the run's identity: the same step run again with it attaches to the copy job or
            resumes the run's plan (default $VPIPE_RUN_ID, else a new one)
        dest_pvc: with workers above 1, the PersistentVolumeClaim holding DST (default: the one this step's pod mounts
            at DST)
        dest_subpath: with dest_pvc, the directory inside the claim that DST is (default: the claim's root)
        namespace: with workers above 1, the namespace of the copy job (default: the context's, the pod's own in a cluster)
        image: with workers above 1, the copy pods' image (default: this step pod's own, else the project's runtime
            image of this version)
        owner: with workers above 1, the copy job's owner, API_VERSION/KIND/NAME/UID in its namespace: deleting the
            owner deletes the job (default in a KFP or Argo pipeline: the Workflow that owns this step's pod, when
            the copy job is in the pod's namespace: deleting the run stops its copy pods)
    """
    check_types(sync, locals())
    location = parse_source(src)
    root = parse_dest(dst)
    for name, globs in (("include", include), ("exclude", exclude)):
        for pattern in globs:
            bad = check_glob(pattern)
            if bad:
                raise InputError(name, pattern, bad)
    if not 1 <= transfers <= MAX_TRANSFERS:
        raise InputError("transfers", transfers, f"an integer from 1 to {MAX_TRANSFERS}")
    if not 0 <= shards <= MAX_SHARDS:
        raise InputError("shards", shards, f"0 (no manifests) or a count up to {MAX_SHARDS}")
    if not 1 <= chunk_mib <= MAX_CHUNK_MIB:
        raise InputError("chunk_mib", chunk_mib, f"a chunk size in MiB from 1 to {MAX_CHUNK_MIB}")
    if durability not in MODES:
        raise InputError("durability", durability, f"one of {', '.join(MODES)}")
    if not 1 <= streams <= MAX_STREAMS:
        raise InputError("streams", streams, f"an integer from 1 (one stream per file) to {MAX_STREAMS}")
    _check_workers(locals(), location.scheme)
    if not delete and force_delete:  # silently ignored before: the user meant something by it
        raise InputError("force_delete", force_delete, "only with delete")
    if not delete and max_delete != DEFAULT_MAX_DELETE:
        raise InputError("max_delete", max_delete, "only with delete")
    limit = parse_max_delete(max_delete)
    if limit is None:
        raise InputError("max_delete", max_delete, "a number of files N, or a share of the destination's files P% (0% to 100%)")
    if kerberos_keytab and not kerberos_principal:
        raise InputError("kerberos_keytab", kerberos_keytab, "a keytab needs --kerberos-principal too")
    if kerberos_keytab and not os.path.isfile(kerberos_keytab):
        raise InputError("kerberos_keytab", kerberos_keytab, "an existing keytab file")
    if os.path.exists(root) and not os.path.isdir(root):
        raise InputError("dst", dst, "a directory (the mounted volume), not a file")
    if location.scheme == "file":
        shown = display_path(location.path)
        if _contains(location.path, root):
            raise InputError("dst", dst, f"a directory outside the source {shown} (compared resolved, symlinks followed)")
        if _contains(root, location.path):
            raise InputError("dst", dst, f"a directory that does not contain the source {shown} (compared resolved, symlinks followed)")

    fanout = _fanout(locals(), location.scheme) if workers > 1 else {}
    progress = progress if isinstance(progress, TransferProgress) else _Forward(progress or Progress())
    request = engine.SyncRequest(
        src=src,
        location=location,
        root=root,
        auth=Auth(user, kerberos_principal, kerberos_keytab, kerberos_ccache, hadoop_conf_dir),
        options=Options(transfers=transfers, checksum=checksum, chunk_size=chunk_mib << 20, durability=durability,
                        streams=streams),
        include=tuple(include),
        exclude=tuple(exclude),
        delete=delete,
        limit=limit,
        max_delete=max_delete,
        force_delete=force_delete,
        dry_run=dry_run,
        shards=shards,
        full_scan=full_scan,
        workers=workers,
        **fanout,
    )
    return engine.run(request, progress)


MAX_WORKERS = 1000  # a task has at most 1000 replicas (volcano/validate.py)
# The inputs that only the copy pods use, and their defaults: given with workers=1, a mistake.
_POD_INPUTS = {"dest_pvc": None, "dest_subpath": None, "spread": False}


def _check_workers(args: Mapping[str, Any], scheme: str) -> None:
    workers = args["workers"]
    if not 1 <= workers <= MAX_WORKERS:
        raise InputError("workers", workers, f"an integer from 1 (this process copies) to {MAX_WORKERS} (copy pods)")
    if workers == 1:
        given = {"dest_pvc": args["dest_pvc"], "dest_subpath": args["dest_subpath"], "spread": args["copy_pods"].spread}
        for name, value in given.items():
            if value != _POD_INPUTS[name]:
                raise InputError(name, value, "only with workers above 1 (copy pods)")
        return
    if scheme == "file":
        raise InputError("workers", workers, "1 for a local source (copy pods cannot read this machine's files): "
                                             "more with hdfs://, webhdfs:// or another network URL")
    for name in ("kerberos_keytab", "kerberos_ccache", "hadoop_conf_dir"):
        if args[name] and not os.environ.get(POD_NAME_ENV):
            # A file of this machine: the copy pods get the step pod's Secret / ConfigMap volumes instead.
            raise InputError(name, args[name], "with workers above 1, a file on a Secret or ConfigMap volume of a step "
                                               f"pod (${POD_NAME_ENV} names it), which the copy pods mount too")
    if args["dest_subpath"] and not args["dest_pvc"]:
        raise InputError("dest_subpath", args["dest_subpath"], "only with dest_pvc")


def _fanout(args: Mapping[str, Any], scheme: str) -> dict[str, Any]:
    """The request's fields for a sync over copy pods: every input checked first, then the
    destination's claim found (the step's own pod may be asked)."""
    from volcano_pipelines.objects.validate import (check_dns_label, check_dns_subdomain, check_image, check_quantity,
                                                 check_relative_path, checked_placement, owner_reference)
    from volcano_pipelines.transfer.partition import check_run_id
    from volcano_pipelines.volcano.copyjob import copy_job_name

    run_id = run_id_or_new(args["run_id"])
    bad = check_run_id(run_id)
    if bad:
        raise InputError("run_id", run_id, bad)
    if args["namespace"] is not None:
        check_dns_label("namespace", args["namespace"])
    check_image("image", args["image"])
    if args["dest_pvc"] is not None:  # refused here, before the plan is written, not by the API server
        check_dns_subdomain("dest_pvc", args["dest_pvc"])
    if args["dest_subpath"]:
        check_relative_path("dest_subpath", args["dest_subpath"])
    options: CopyPodOptions = args["copy_pods"]
    check_quantity("cpu", options.cpu)
    check_quantity("memory", options.memory)
    checked_placement(options.node_selector, options.tolerations)
    if not 1 <= options.max_retry <= 100:
        raise InputError("max_retry", options.max_retry, "an integer from 1 to 100")
    if args["owner"] is not None:
        owner_reference("owner", args["owner"])
    if args["dry_run"]:
        return {"run_id": run_id, "job_name": copy_job_name(run_id)}
    from volcano_pipelines.steps._sync_workers import CopyPods, copy_job_owner, destination_claim, launcher

    # The client files the copy pods need where this pod has them (explicit, or from the environment).
    carried = {"kerberos_keytab": args["kerberos_keytab"], "kerberos_ccache": args["kerberos_ccache"],
               "hadoop_conf_dir": args["hadoop_conf_dir"] or os.environ.get("HADOOP_CONF_DIR")}
    found = destination_claim(args["dst"], args["dest_pvc"], args["dest_subpath"], args["image"], args["connection"],
                              {k: v for k, v in carried.items() if v})
    pods = CopyPods(namespace=args["namespace"], claim=found.claim, subpath=found.subpath, image=found.image,
                    config=found.config, options=options,
                    owner=copy_job_owner(args["owner"], found, args["namespace"]),
                    connection=args["connection"])
    return {"run_id": run_id, "job_name": copy_job_name(run_id), "launcher": launcher(pods)}


def _contains(outer: str, inner: str) -> bool:
    """True when `inner` is `outer` or lies below it, however it is spelled: the resolved
    paths (symlinks followed) are compared, and so are the device and inode of `outer`
    with those of every existing directory above `inner` (a bind mount, or a symlink
    created between the two checks)."""
    real_outer, real_inner = os.path.realpath(outer), os.path.realpath(inner)
    if real_inner == real_outer or real_inner.startswith(real_outer.rstrip("/") + "/"):
        return True
    try:
        st = os.stat(outer)
    except OSError:
        return False  # does not exist (yet): nothing can lie below it
    if not stat.S_ISDIR(st.st_mode):
        return False
    path = real_inner
    while True:
        try:
            here = os.stat(path)
            if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino):
                return True
        except OSError:
            pass  # not created yet
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
