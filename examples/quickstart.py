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
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from volcano_pipelines.errors import VpipeError
from volcano_pipelines.localjob.ports import free_port
from volcano_pipelines.localjob.processes import supervised_popen
from volcano_pipelines.manifest import to_yaml
from volcano_pipelines.progress import LineProgress
from volcano_pipelines.steps import Connection, render_tf, sync, train_tf

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


class Stopped(Exception):
    """SIGTERM outside the training step (which handles it itself): stop, cleaning up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class TensorBoard:
    """TensorBoard under the local backend's shim: it ends with this program however this
    program ends (a SIGKILL too: the shim sees its control pipe close)."""

    def __init__(self, logdir: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/"
        self.proc, self._control = supervised_popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", str(port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, **QUIET_TF},
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "data/runs", timeout=2) as answer:
                    if json.load(answer):
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"tensorboard did not answer in {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # the shim passes it on
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.write(self._control, b"k")  # the shim kills it
                self.proc.wait()
        os.close(self._control)


def next_run_dir(logs: Path) -> Path:
    """logs/run-N, N one more than the last: every run trains from scratch into a directory of
    its own (a re-run would otherwise resume from the last checkpoint, already at the final
    step, and train nothing), and TensorBoard over logs/ shows the runs side by side."""
    taken = [int(p.name[4:]) for p in logs.glob("run-*") if p.name[4:].isdigit()] if logs.is_dir() else []
    return logs / f"run-{max(taken, default=0) + 1}"


def summary_lines(synced: Any, data: Path, result: Any, metrics: dict, run_logs: Path, prediction: dict,
                  tensorboard_url: str, logs: Path, keep_tensorboard: bool, seconds: float) -> list[str]:
    """The summary the run on this machine prints (--json: the same as one object)."""
    return [
        "",
        "== quickstart summary",
        f"dataset        {synced.files_selected} files synced into {data} ({synced.copied} copied this run, "
        f"{synced.skipped} already there)",
        f"job            {result.namespace}/{result.name}: {result.phase} in {result.duration_seconds or 0:.1f}s, "
        f"{result.retries} restart(s)",
        *(f"restarted      {entry.get('text', entry)}" for entry in result.restarts),
        "tasks          " + "; ".join(
            f"{t}: " + ", ".join(f"{n} {'stopped by CompleteJob' if state == 'stopped' else state}"
                                for state, n in c.items() if n)
            for t, c in result.tasks.items()),
        f"parameter server outlived the chief by {result.ps_linger_seconds or 0:.2f}s, then CompleteJob ended it",
        f"trained        steps 1..{metrics['global_step']} into {run_logs}",
        f"accuracy       {metrics['accuracy']:.3f} on held-out rows (loss {metrics['initial_loss']:.3f} -> "
        f"{metrics['final_loss']:.3f})",
        f"model          {metrics['export']} (version {Path(metrics['export']).name})",
        f"prediction     label {prediction['label']}: probability {prediction['probability']:.3f}",
        f"TensorBoard    {tensorboard_url} (every run in {logs})"
        + ("" if keep_tensorboard else "; stopped at exit, --keep-tensorboard keeps it"),
        f"total          {seconds:.0f}s",
    ]


def run_locally(workdir: Path, keep_tensorboard: bool, as_json: bool = False) -> int:
    started = time.monotonic()
    source, data, logs = workdir / "source", workdir / "data", workdir / "logs"
    say(f"working in {workdir}")
    if (source / "dataset.json").is_file():
        say(f"sample dataset already in {source}")
    else:
        # Made once: the same seed gives the same bytes, but new files would be copied again.
        subprocess.run([sys.executable, str(EXAMPLES / "data" / "make_dataset.py"), str(source)], check=True,
                       stdout=subprocess.DEVNULL)
    synced = sync(str(source), str(data))
    say(f"synced {synced.copied} files ({synced.bytes_copied / 1e6:.2f} MB) from {source} to {data}, "
        f"{synced.skipped} already there")
    run_logs = next_run_dir(logs)
    server, base = serve_directory(EXAMPLES)
    try:
        say(f"training: 1 ps + 2 workers + chief, code from {base}tf-ps/ (the container's own fetch script), "
            f"logs in {run_logs}")
        result = train_tf(JOB, backend="local", local_dir=str(workdir), local_data_dir=str(data),
                          local_log_dir=str(run_logs), run_id=f"quickstart-{int(time.time())}",
                          progress=LineProgress(sys.stderr), **job_arguments(base + "tf-ps/"))
    finally:
        server.shutdown()
    if not result.succeeded:
        say(f"training failed: {result.message}")
        if result.failure and result.failure.get("log_tail"):
            say(f"last log lines of {result.failure['pod']}:\n{result.failure['log_tail']}")
        return 1
    metrics = json.loads((run_logs / "metrics.json").read_text())
    tensorboard = TensorBoard(logs)
    try:
        tensorboard.wait_ready()
        say(f"TensorBoard: {tensorboard.url}")
        predicted = subprocess.run([sys.executable, "-c", PREDICT, metrics["export"], str(data)], check=True,
                                   capture_output=True, text=True, env={**os.environ, **QUIET_TF})
        prediction = json.loads(predicted.stdout.strip().splitlines()[-1])
        if as_json:
            print(json.dumps({
                "dataset": {"source": str(source), "destination": str(data), "files": synced.files_selected,
                            "copied": synced.copied, "skipped": synced.skipped, "bytes_copied": synced.bytes_copied},
                "job": result.to_dict(),
                "trained": {"steps": metrics["global_step"], "logs": str(run_logs), "accuracy": metrics["accuracy"],
                            "initial_loss": metrics["initial_loss"], "final_loss": metrics["final_loss"]},
                "model": {"export": metrics["export"], "version": int(Path(metrics["export"]).name)},
                "prediction": prediction,
                "tensorboard": {"url": tensorboard.url, "logs": str(logs), "kept": keep_tensorboard},
                "seconds": round(time.monotonic() - started, 1),
            }, indent=2, sort_keys=True), flush=True)
        else:
            print("\n".join(summary_lines(synced, data, result, metrics, run_logs, prediction, tensorboard.url, logs,
                                           keep_tensorboard, time.monotonic() - started)), flush=True)
        if keep_tensorboard:
            say("TensorBoard keeps running; Ctrl-C stops it")
            try:
                tensorboard.proc.wait()
            except KeyboardInterrupt:  # the documented way to stop it: not an error
                say("TensorBoard stopped")
    finally:
        tensorboard.stop()
    return 0


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The quickstart's flags, on `parser` when given (`vpipe quickstart` adds them to its own)."""
    if parser is None:
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="vpipe-quickstart", help="where data, logs and job files go")
    parser.add_argument("--render", action="store_true", help="print the job as a Volcano Job and stop")
    parser.add_argument("--kubeconfig", help="submit the job to this cluster instead of running it here")
    parser.add_argument("--code-url", default="http://files.example/tf-ps/",
                        help="where a cluster's pods fetch examples/tf-ps/ (with --render / --kubeconfig)")
    parser.add_argument("--keep-tensorboard", action="store_true", help="keep TensorBoard running at the end")
    parser.add_argument("--json", action="store_true",
                        help="print JSON: with --render the job, with --kubeconfig the training result, here the "
                             "summary (dataset, job result, metrics, model, prediction, TensorBoard)")
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:

    def stop(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    # SIGTERM unwinds like Ctrl-C, so TensorBoard and the job are stopped on the way out.
    signal.signal(signal.SIGTERM, stop)
    try:
        if args.render:
            job = render_tf(JOB, **job_arguments(args.code_url))
            sys.stdout.write(json.dumps(job, indent=2, sort_keys=True) + "\n" if args.json else to_yaml(job))
            sys.stdout.flush()
            return 0
        if args.kubeconfig:
            result = train_tf(JOB, connection=Connection(args.kubeconfig), **job_arguments(args.code_url))
            print(json.dumps(result.to_dict(), indent=2))
            return 0 if result.succeeded else 1
        return run_locally(Path(args.workdir).absolute(), args.keep_tensorboard, args.json)
    except VpipeError as err:
        print(f"quickstart: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("quickstart: interrupted", file=sys.stderr)
        return 130
    except Stopped as err:
        print(f"quickstart: stopped by {err}", file=sys.stderr)
        return 128 + err.signum
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error. Nothing more can be written there.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
