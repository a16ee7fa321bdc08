"""Each TensorFlow task's view of its cluster, built in the container at start.

The job object carries no host list: only the task counts (`VPIPE_TF_TASKS`) and the port. A
list of every host in every pod's environment grows with the square of the replicas (10,000
workers: 340 KB per pod, past Linux's 128 KiB per environment string); instead the entry
point runs CLUSTER_PY, which reads the hosts Volcano's svc plugin already mounts
(/etc/volcano/<task>.host) and writes, per task, the view its role needs.

TF_CONFIG per role (docs/scale.md says why each is enough):
- chief, evaluator: the whole cluster — a TF2 coordinator connects to every task. Past the
  limit, the chief and the parameter servers only, and the coordinator takes the whole
  cluster from `vpipe_cluster.cluster_resolver()` (the file).
- worker i: the chief, every parameter server and `{"i": itself}` — a sparse job, which
  TensorFlow's ClusterSpec accepts. A TF1 between-graph worker talks only to the parameter
  servers and itself (device filters); a TF2 worker learns the cluster from its coordinator.
- ps i: the chief and `{"i": itself}` — TF2's coordinator gives it the cluster; TF1
  parameter servers build theirs from the `--ps_hosts` / `--worker_hosts` flags.
The flags keep the classic comma lists while a list fits one argument, and name a file
(`@/vpipe/code/.vpipe-cluster/worker_hosts`) past that; `vpipe_cluster.hosts(value)` reads either.
"""

from __future__ import annotations

# Where the entry point writes the views, under the code emptyDir (writable by any image user).
CLUSTER_DIR_NAME = ".vpipe-cluster"
# The env variable (a JSON file {task: [address, ...]}) that replaces the svc plugin's files
# where pods do not have their own DNS names (the local backend).
ADDRESSES_ENV = "VPIPE_TF_ADDRESSES"

# The module user code imports (`import vpipe_cluster`: the entry point puts it on PYTHONPATH)
# for the whole cluster where TF_CONFIG cannot hold it. Standard library only until TensorFlow
# is asked for.
RESOLVER_PY = '''"""The whole TensorFlow cluster of this job, written by volcano-pipelines at container start.

cluster()           -> {"chief": [...], "ps": [...], "worker": [...]}: every address, in index order
hosts(flag_value)   -> the list a --ps_hosts / --worker_hosts value names ("a:1,b:2" or "@FILE")
cluster_resolver()  -> a tf.distribute ClusterResolver for the whole cluster and this task
"""
import json
import os


def cluster():
    with open(os.environ["VPIPE_CLUSTER_FILE"], encoding="utf-8") as f:
        return json.load(f)


def hosts(flag_value):
    if flag_value.startswith("@"):
        with open(flag_value[1:], encoding="utf-8") as f:
            flag_value = f.read()
    return [h for h in flag_value.strip().split(",") if h]


def cluster_resolver(rpc_layer="grpc"):
    import tensorflow as tf

    task = json.loads(os.environ["TF_CONFIG"])["task"]
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster()), task_type=task["type"], task_id=int(task["index"]), rpc_layer=rpc_layer)
'''

# In: VPIPE_TF_TASKS ("chief=1,ps=2,worker=3", task order), VPIPE_TF_PORT, VPIPE_ROLE,
# VPIPE_TASK_INDEX, VPIPE_CLUSTER_DIR, and the hosts: $VPIPE_TF_ADDRESSES or else
# /etc/volcano/<task>.host ($VPIPE_SVC_DIR in tests). Out, in $VPIPE_CLUSTER_DIR: cluster.json (every address),
# tf_config.json (this role's TF_CONFIG), ps_hosts / worker_hosts (comma lists),
# ps_hosts.flag / worker_hosts.flag (a flag's value: the list, or "@FILE" past one argument's
# limit) and vpipe_cluster.py. Each file is written whole (temporary name, rename).
CLUSTER_PY = r'''
import json, os, sys
LIMIT = 128 * 1024 - 1  # bytes of one argument or NAME=value, without the final NUL
out = os.environ["VPIPE_CLUSTER_DIR"]
role, index = os.environ["VPIPE_ROLE"], int(os.environ["VPIPE_TASK_INDEX"])
port = os.environ["VPIPE_TF_PORT"]
counts = [(t, int(n)) for t, n in (item.split("=") for item in os.environ["VPIPE_TF_TASKS"].split(","))]
given = os.environ.get("VPIPE_TF_ADDRESSES")
known = {}
if given:
    with open(given, encoding="utf-8") as f:
        known = json.load(f)
cluster = {}
for task, n in counts:
    if task == "evaluator":  # TensorFlow keeps the evaluator out of the cluster
        continue
    if given:
        addresses = known[task]
    else:
        # A role past one Volcano task's limit is split over tasks <role>, <role>-s1, ... in
        # order (volcano/slices.py); the svc plugin writes '-' in a file name as '_'.
        addresses, part = [], 0
        while len(addresses) < n:
            name = task if part == 0 else "%s_s%d" % (task, part)
            path = os.path.join(os.environ.get("VPIPE_SVC_DIR") or "/etc/volcano", name + ".host")
            try:
                with open(path, encoding="utf-8") as f:
                    addresses += ["%s:%s" % (line.strip(), port) for line in f if line.strip()]
            except OSError as e:
                sys.exit("vpipe: cannot read the %s hosts that Volcano's svc plugin mounts: %s" % (task, e))
            part += 1
    if len(addresses) != n:
        sys.exit("vpipe: %d %s hosts, expected %d" % (len(addresses), task, n))
    cluster[task] = addresses


def dump(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def config(view):
    return dump({"cluster": view, "task": {"type": role, "index": index}})


def fits(view):
    return len(("TF_CONFIG=" + config(view)).encode()) <= LIMIT


chief = {"chief": cluster["chief"]} if "chief" in cluster else {}
if role in ("chief", "evaluator"):
    views = [cluster, dict(chief, ps=cluster.get("ps", []))]
else:
    own = {str(index): cluster[role][index]}
    if role == "worker":
        views = [dict(chief, ps=cluster.get("ps", []), worker=own), {"worker": own}]
    else:
        views = [dict(chief, **{role: own}), {role: own}]
view = next((v for v in views if fits(v)), views[-1])
files = {"cluster.json": dump(cluster), "tf_config.json": config(view), "vpipe_cluster.py": RESOLVER_PY}
for task in ("ps", "worker"):
    joined = ",".join(cluster.get(task, []))
    files[task + "_hosts"] = joined
    fits_flag = len(("--%s_hosts=%s" % (task, joined)).encode()) <= LIMIT
    files[task + "_hosts.flag"] = joined if fits_flag else "@" + os.path.join(out, task + "_hosts")
os.makedirs(out, exist_ok=True)
for name, text in files.items():
    with open(os.path.join(out, name + ".tmp"), "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))
'''.replace("RESOLVER_PY", repr(RESOLVER_PY))
