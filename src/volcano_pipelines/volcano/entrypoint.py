"""The container entry point: fixed bash scripts that read everything user-supplied from the
environment and from positional arguments, never from the script text itself. That is what
keeps args, env values, URLs and paths verbatim whatever they contain (no shell injection):
the scripts are constants, and bash never re-parses a parameter's value.

Container argv is `bash -c RUN_ENTRY_SCRIPT vpipe-entry ARG...` with the script itself in the
environment (VPIPE_ENTRY_SCRIPT), so `$@` inside the script is exactly the user's ARG list, and
`ps` in the pod shows one short line while the script fetches code and builds the cluster
(the script text as argv was a 150-line command there). The script unsets the variable before
it runs anything: user code never inherits it."""

from __future__ import annotations

from volcano_pipelines.volcano.tf_cluster import CLUSTER_DIR_NAME, CLUSTER_PY

# Where fetched code is unpacked: an emptyDir, so any image user can write there.
CODE_DIR = "/vpipe/code"
SCRIPT_NAME = "vpipe-entry"

# Downloads $VPIPE_CODE_URL into $VPIPE_CODE_DIR. Standard library only: every TF / MPI image
# has python3, not every one has curl or wget. A URL ending in '/' is a directory listing
# (as served by nginx autoindex or `python -m http.server`) fetched recursively below it.
# $VPIPE_FETCH_BACKOFF (seconds, default 1) is the first pause between retries; it doubles
# up to 20 s. Tests set it to 0.
FETCH_PY = r"""
import base64, hashlib, io, os, sys, tarfile, time, urllib.parse, urllib.request, zipfile
from html.parser import HTMLParser

ATTEMPTS = 6
url = os.environ["VPIPE_CODE_URL"]
want = os.environ.get("VPIPE_CODE_SHA256", "").lower()
dest = os.path.realpath(os.environ["VPIPE_CODE_DIR"])
backoff = float(os.environ.get("VPIPE_FETCH_BACKOFF") or 1)
given = urllib.parse.urlsplit(url)
# urllib ignores user-info ('http://user:pass@host/') and would look 'user:pass@host' up as a
# host name: send it as a Basic Authorization header instead, and request the URL without it.
auth = None
if given.username is not None:
    pair = urllib.parse.unquote(given.username) + ":" + urllib.parse.unquote(given.password or "")
    auth = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
parts = given._replace(netloc=given.netloc.rpartition("@")[2])
origin = (parts.scheme, parts.netloc.lower())

def shown(u):
    # Never print credentials or the query (e.g. a signed token).
    p = urllib.parse.urlsplit(u)
    return p._replace(netloc=p.netloc.rpartition("@")[2], query="", fragment="").geturl()

def same_origin(u):
    p = urllib.parse.urlsplit(u)
    return (p.scheme, p.netloc.lower()) == origin

class Redirects(urllib.request.HTTPRedirectHandler):
    # The credentials go to the URL's own scheme, host and port only, never to another
    # server a redirect points at.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and auth and same_origin(new.full_url):
            new.add_unredirected_header("Authorization", auth)
        return new

opener = urllib.request.build_opener(Redirects)

def get(u):
    # A query (e.g. a signed token) applies to every request below the base URL too.
    u = u + ("?" + parts.query if parts.query and "?" not in u else "")
    for attempt in range(ATTEMPTS):
        request = urllib.request.Request(u)
        if auth:
            request.add_unredirected_header("Authorization", auth)
        try:
            with opener.open(request, timeout=60) as r:
                return r.read()
        except Exception as e:
            reason = str(e).replace(parts.query, "...") if parts.query else str(e)
            if attempt == ATTEMPTS - 1 or getattr(e, "code", 500) in (401, 403, 404):
                sys.exit("vpipe: cannot download %s: %s" % (shown(u), reason))
            pause = min(backoff * 2 ** attempt, 20)
            print("vpipe: download of %s failed (%s); retry %d of %d in %g s"
                  % (shown(u), reason, attempt + 1, ATTEMPTS - 1, pause), file=sys.stderr)
            time.sleep(pause)

def safe_target(rel, is_dir=False):
    target = os.path.realpath(os.path.join(dest, rel))
    # '.' and './' (from `tar -C dir -czf code.tgz .`) are the directory itself.
    inside = target.startswith(dest + os.sep) or (is_dir and target == dest)
    if not inside:
        sys.exit("vpipe: refusing to write %r outside %s" % (rel, dest))
    return target

def write(rel, data):
    target = safe_target(rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as f:
        f.write(data)

class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []
    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]

def fetch_dir(base, rel, seen):
    parser = Links()
    parser.feed(get(base + rel).decode("utf-8", "replace"))
    for href in parser.hrefs:
        link = urllib.parse.urljoin(base + rel, href).split("#")[0].split("?")[0]
        if not link.startswith(base) or link in seen:
            continue
        seen.add(link)
        sub = urllib.parse.unquote(link[len(base):])
        if link.endswith("/"):
            fetch_dir(base, link[len(base):], seen)
        else:
            write(sub, get(link))

os.makedirs(dest, exist_ok=True)
path = parts.path
if path.endswith("/"):
    base = parts._replace(query="", fragment="").geturl()
    fetch_dir(base, "", {base})
else:
    data = get(parts._replace(fragment="").geturl())
    got = hashlib.sha256(data).hexdigest()
    if want and got != want:
        sys.exit("vpipe: sha256 of %s is %s, expected %s" % (shown(url), got, want))
    name = os.path.basename(path)
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                safe_target(member.name, member.isdir())
                if member.issym() or member.islnk() or member.isdev():
                    sys.exit("vpipe: refusing link or device %r in %s" % (member.name, shown(url)))
            # The 'data' filter (Python >= 3.11.4) repeats those checks and skips the archive's
            # owners; file modes are kept either way.
            tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    elif name.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                safe_target(member, member.endswith("/"))
            archive.extractall(dest)
    else:
        write(name, data)
print("vpipe: fetched code from %s into %s" % (shown(url), dest), file=sys.stderr)
"""

_PRELUDE = r'''set -euo pipefail
log() { printf 'vpipe: %s\n' "$*" >&2; }
task_index="${VK_TASK_INDEX:-0}"
case "$task_index" in ''|*[!0-9]*) log "VK_TASK_INDEX is not a number: '$task_index'"; exit 64;; esac
# A role split over several Volcano tasks (volcano/slices.py): this task's pods start at the offset.
task_offset="${VPIPE_TASK_OFFSET:-0}"
case "$task_offset" in ''|*[!0-9]*) log "VPIPE_TASK_OFFSET is not a number: '$task_offset'"; exit 64;; esac
task_index=$(( task_offset + task_index ))
if [ -n "${VPIPE_CODE_URL:-}" ]; then
  mkdir -p "$VPIPE_CODE_DIR"
  python3 - <<'VPIPEFETCH_PY'
''' + FETCH_PY + r'''VPIPEFETCH_PY
  cd "$VPIPE_CODE_DIR"
  # Directory listings and zip archives carry no file modes: an entry point run as a program
  # ('trainbin', not .sh / .py) must still be executable.
  if [ -f "${VPIPE_ENTRY:-}" ] && [ ! -x "$VPIPE_ENTRY" ]; then chmod +x -- "$VPIPE_ENTRY"; fi
elif [ -n "${VPIPE_CODE_PATH:-}" ]; then
  cd "$VPIPE_CODE_PATH"
fi
run_entry() {
  if [ ! -e "$VPIPE_ENTRY" ]; then
    log "entry point '$VPIPE_ENTRY' not found in $(pwd)"; exit 66
  fi
  case "$VPIPE_ENTRY" in
    *.sh) exec bash "./$VPIPE_ENTRY" "$@" ;;
    *.py) exec python3 "./$VPIPE_ENTRY" "$@" ;;
    *) exec "./$VPIPE_ENTRY" "$@" ;;
  esac
}
'''

TF_SCRIPT = _PRELUDE + r'''case "$VPIPE_ROLE" in worker) shard_index="$task_index" ;; *) shard_index=0 ;; esac
# The cluster is built here, at container start, from the task counts in the job and the
# hosts Volcano's svc plugin mounts: the job object carries no host list (see CLUSTER_PY).
export VPIPE_CLUSTER_DIR="$VPIPE_CODE_DIR/''' + CLUSTER_DIR_NAME + r'''"
VPIPE_TASK_INDEX="$task_index" python3 - <<'VPIPECLUSTER_PY'
''' + CLUSTER_PY + r'''VPIPECLUSTER_PY
export TF_CONFIG="$(cat "$VPIPE_CLUSTER_DIR/tf_config.json")"
export VPIPE_CLUSTER_FILE="$VPIPE_CLUSTER_DIR/cluster.json"
export PYTHONPATH="$VPIPE_CLUSTER_DIR${PYTHONPATH:+:$PYTHONPATH}"
ps_hosts="$(cat "$VPIPE_CLUSTER_DIR/ps_hosts.flag")"
worker_hosts="$(cat "$VPIPE_CLUSTER_DIR/worker_hosts.flag")"
log "starting $VPIPE_ROLE $task_index of job ${VPIPE_JOB_NAME}"
run_entry --job_name="$VPIPE_ROLE" --task_index="$task_index" \
  --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" \
  --data_dir="$VPIPE_DATA_DIR" --log_dir="$VPIPE_LOG_DIR" \
  --shard_index="$shard_index" --num_shards="$VPIPE_NUM_SHARDS" "$@"
'''

MPI_WORKER_SCRIPT = _PRELUDE + r'''log "mpiworker $task_index of job ${VPIPE_JOB_NAME}: starting sshd"
mkdir -p /var/run/sshd
# VPIPE_SSHD: where sshd lives (the local backend points it at a stand-in).
exec "${VPIPE_SSHD:-/usr/sbin/sshd}" -D -e
'''

# The first $VPIPE_MPIEXEC_NARGS positional arguments are extra mpiexec options, the rest is
# the program and its arguments; both are user lists passed through untouched.
MPI_MASTER_SCRIPT = _PRELUDE + r'''nargs="${VPIPE_MPIEXEC_NARGS:-0}"
mpiexec_args=("${@:1:$nargs}")
program=("${@:$((nargs + 1))}")
# VPIPE_WORKER_HOSTFILE: the svc plugin's host file of each worker task, space-separated, in
# order (more than one when the workers are split over several tasks, volcano/slices.py).
read -r -a worker_hostfiles <<< "$VPIPE_WORKER_HOSTFILE"
hostfile="$(mktemp)"
for file in "${worker_hostfiles[@]}"; do
  for _ in $(seq 1 300); do [ -s "$file" ] && break; sleep 1; done
  while read -r host _ || [ -n "$host" ]; do
    [ -n "$host" ] && printf '%s slots=%s\n' "$host" "$VPIPE_SLOTS_PER_WORKER" >> "$hostfile"
  done < "$file"
done
# Gang scheduling starts every pod together, but sshd may not listen yet: wait for each.
ssh_port="${VPIPE_SSH_PORT:-22}"
while read -r host _ || [ -n "$host" ]; do
  for attempt in $(seq 1 120); do
    if (exec 3<>"/dev/tcp/$host/$ssh_port") 2>/dev/null; then break; fi
    [ "$attempt" = 120 ] && { log "sshd on $host did not answer in 120 s"; exit 69; }
    sleep 1
  done
done < "$hostfile"
np=$(( VPIPE_NUM_WORKERS * VPIPE_SLOTS_PER_WORKER ))
log "mpiexec on $VPIPE_NUM_WORKERS workers, $np slots"
exec mpiexec --allow-run-as-root --hostfile "$hostfile" -np "$np" "${mpiexec_args[@]}" "${program[@]}"
'''


ENTRY_SCRIPT_ENV = "VPIPE_ENTRY_SCRIPT"
RUN_ENTRY_SCRIPT = f'vpipe_entry_script="${ENTRY_SCRIPT_ENV}"; unset {ENTRY_SCRIPT_ENV}; eval "$vpipe_entry_script"'
ENTRY_COMMAND = ("bash", "-c", RUN_ENTRY_SCRIPT, SCRIPT_NAME)


def entry_script_env(script: str) -> dict[str, str]:
    """The container's first variable: the entry script ENTRY_COMMAND runs (first, so that no
    `$(VAR)` of the kubelet's expansion refers to anything before it)."""
    return {"name": ENTRY_SCRIPT_ENV, "value": script}
