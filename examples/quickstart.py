#!/usr/bin/env python3
"""The main job on its embedded default, on this machine: make a sample dataset, stage it with
the real sync engine, train it with real TensorFlow (1 parameter server + 2 workers + a chief,
TF2 ParameterServerStrategy) as the same Volcano Job a cluster would run — each task a process
with Volcano's environment (the local backend) — see the chief's completion end the parameter
server, open TensorBoard over the logs, and load the exported model for one prediction.

    scripts/quickstart                       # all of the above, locally
    scripts/quickstart --render              # print the same job as a Volcano Job (YAML)
    scripts/quickstart --kubeconfig PATH --code-url http://files/tf-ps/   # submit it to a cluster
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from volcano_pipelines.errors import VpipeError
from volcano_pipelines.manifest import to_yaml
from volcano_pipelines.progress import LineProgress
from volcano_pipelines.steps import render_tf, sync, train_tf

EXAMPLES = Path(__file__).resolve().parent
JOB = "quickstart"
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2"}
TRAIN_ARGS = ["--api=tf2", "--steps=300", "--threads=1", "--log_every=100", "--checkpoint_every=150"]
PREDICT = r"""
import csv, glob, json, sys
import numpy as np, tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
row = list(csv.reader(open(sorted(glob.glob(sys.argv[2] + "/eval-*.csv"))[0])))[1]
x = np.asarray([list(map(float, row[:-1]))], dtype=np.float32)
p = float(model.signatures["serving_default"](x=tf.constant(x))["probability"].numpy()[0])
print(json.dumps({"features": row[:-1], "label": row[-1], "probability": p}))
"""


def say(line: str) -> None:
    print(f"quickstart | {line}", file=sys.stderr, flush=True)


def job_arguments(code_url: str) -> dict:
    """The job: the same for the local run, --render and --kubeconfig."""
    return dict(ps=1, workers=2, chief=True, code_url=code_url, args=TRAIN_ARGS, env={"": QUIET_TF},
                cpu={"": "1"}, memory={"": "1Gi"})


def serve_directory(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_tensorboard(logdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **QUIET_TF},
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tensorboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "data/runs", timeout=2) as answer:
                runs = json.load(answer)
                if runs:
                    return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("tensorboard did not answer in 120 s")


def run_locally(workdir: Path, keep_tensorboard: bool) -> int:
    started = time.monotonic()
    source, data, logs = workdir / "source", workdir / "data", workdir / "logs"
    say(f"working in {workdir}")
    subprocess.run([sys.executable, str(EXAMPLES / "data" / "make_dataset.py"), str(source)], check=True,
                   stdout=subprocess.DEVNULL)
    synced = sync(str(source), str(data))
    say(f"synced {synced.copied} files ({synced.bytes_copied / 1e6:.2f} MB) from {source} to {data}, "
        f"{synced.skipped} already there")
    server, base = serve_directory(EXAMPLES)
    try:
        say(f"training: 1 ps + 2 workers + chief, code from {base}tf-ps/ (the container's own fetch script)")
        result = train_tf(JOB, backend="local", local_dir=str(workdir), local_data_dir=str(data),
                          local_log_dir=str(logs), run_id=f"quickstart-{int(time.time())}",
                          progress=LineProgress(sys.stderr), **job_arguments(base + "tf-ps/"))
    finally:
        server.shutdown()
    if not result.succeeded:
        say(f"training failed: {result.message}")
        if result.failure and result.failure.get("log_tail"):
            say(f"last log lines of {result.failure['pod']}:\n{result.failure['log_tail']}")
        return 1
    metrics = json.loads((logs / "metrics.json").read_text())
    tensorboard, url = start_tensorboard(logs)
    say(f"TensorBoard: {url}")
    try:
        predicted = subprocess.run([sys.executable, "-c", PREDICT, metrics["export"], str(data)], check=True,
                                   capture_output=True, text=True, env={**os.environ, **QUIET_TF})
        prediction = json.loads(predicted.stdout.strip().splitlines()[-1])
        summary = [
            "",
            "== quickstart summary",
            f"dataset        {synced.files_selected} files synced into {data} ({synced.copied} copied this run)",
            f"job            {result.namespace}/{result.name}: {result.phase} in {result.duration_seconds or 0:.1f}s, "
            f"{result.retries} restart(s)",
            "tasks          " + "; ".join(
                f"{t}: " + (", ".join(f"{n} {state}" for state, n in c.items() if n) or "stopped by CompleteJob")
                for t, c in result.tasks.items()),
            f"parameter server outlived the chief by {result.ps_linger_seconds or 0:.2f}s, then CompleteJob ended it",
            f"accuracy       {metrics['accuracy']:.3f} on held-out rows (loss {metrics['initial_loss']:.3f} -> "
            f"{metrics['final_loss']:.3f})",
            f"model          {metrics['export']} (version {Path(metrics['export']).name})",
            f"prediction     label {prediction['label']}: probability {prediction['probability']:.3f}",
            f"TensorBoard    {url}" + ("" if keep_tensorboard else " (stopped at exit; --keep-tensorboard keeps it)"),
            f"total          {time.monotonic() - started:.0f}s",
        ]
        print("\n".join(summary))
        if keep_tensorboard:
            say("TensorBoard keeps running; Ctrl-C stops it")
            tensorboard.wait()
    finally:
        tensorboard.terminate()
        tensorboard.wait(timeout=30)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="vpipe-quickstart", help="where data, logs and job files go")
    parser.add_argument("--render", action="store_true", help="print the job as a Volcano Job and stop")
    parser.add_argument("--kubeconfig", help="submit the job to this cluster instead of running it here")
    parser.add_argument("--code-url", default="http://files.example/tf-ps/",
                        help="where a cluster's pods fetch examples/tf-ps/ (with --render / --kubeconfig)")
    parser.add_argument("--keep-tensorboard", action="store_true", help="keep TensorBoard running at the end")
    args = parser.parse_args(argv)
    try:
        if args.render:
            sys.stdout.write(to_yaml(render_tf(JOB, **job_arguments(args.code_url))))
            return 0
        if args.kubeconfig:
            result = train_tf(JOB, kubeconfig=args.kubeconfig, **job_arguments(args.code_url))
            print(json.dumps(result.to_dict(), indent=2))
            return 0 if result.succeeded else 1
        return run_locally(Path(args.workdir).absolute(), args.keep_tensorboard)
    except VpipeError as err:
        print(f"quickstart: error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
