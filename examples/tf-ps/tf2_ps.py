"""TF2 parameter-server training: `ps` and `worker` tasks run a `tf.distribute.Server` and
join it (they never exit: the job ends on the chief's TaskCompleted -> CompleteJob); the
`chief` is the coordinator: it creates the variables on the parameter servers through
`ParameterServerStrategy`, schedules training steps on the workers with a
`ClusterCoordinator`, and writes checkpoints, TensorBoard events, the SavedModel export
and metrics.json. The cluster comes from TF_CONFIG."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import common


def run(args: argparse.Namespace) -> int:
    import tensorflow as tf

    if tf.get_logger().handlers:
        # TensorFlow's logger prints through its own handler; a handler that the distributed
        # runtime adds to the root logger later printed every warning a second time.
        tf.get_logger().propagate = False
    common.set_threads(tf, args.threads)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    role, index = resolver.task_type, resolver.task_id
    if role in ("ps", "worker"):
        server = tf.distribute.Server(
            resolver.cluster_spec(), job_name=role, task_index=index, protocol=resolver.rpc_layer or "grpc", start=True
        )
        common.log(f"{role} {index}: serving {server.target}; waiting for the coordinator")
        return common.serve_until_stopped(role, index)
    if role == "evaluator":
        common.log("this example has no evaluator; metrics.json holds the chief's evaluation")
        return 0
    if role != "chief":
        raise SystemExit(f"TF_CONFIG task type {role!r}: the tf2 variant needs a chief (render with --chief)")
    return coordinate(tf, common.whole_cluster_resolver(tf), args)


class Linear:
    """y = sigmoid(x . w + b): small enough to train in seconds on a CPU."""

    def __init__(self, tf, features: int) -> None:
        self.w = tf.Variable(tf.zeros([features, 1]), name="w")
        self.b = tf.Variable(tf.zeros([1]), name="b")

    def __call__(self, tf, x):
        return tf.squeeze(tf.matmul(x, self.w), axis=1) + self.b

    @property
    def variables(self) -> list:
        return [self.w, self.b]


def coordinate(tf, resolver, args: argparse.Namespace) -> int:
    stop = common.StopRequest()  # first: a SIGTERM while it starts up is not lost
    cluster = resolver.cluster_spec().as_dict()
    common.wait_for_hosts(list(cluster.get("ps", [])) + list(cluster.get("worker", [])))
    features = common.feature_count(args.data_dir)
    files = common.train_files(args.data_dir)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = Linear(tf, features)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    checkpoint = tf.train.Checkpoint(w=model.w, b=model.b, global_step=global_step)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(args.log_dir, "checkpoints"), max_to_keep=3)
    restored = manager.restore_or_initialize()
    if restored:
        common.log(f"resumed from {restored} at step {int(global_step.numpy())}")
        common.report("resumed", step=int(global_step.numpy()), path=restored)

    feature_spec = {
        common.FEATURES_KEY: tf.io.FixedLenFeature([features], tf.float32),
        common.LABEL_KEY: tf.io.FixedLenFeature([1], tf.int64),
    }

    def parse(record):
        ex = tf.io.parse_single_example(record, feature_spec)
        return ex[common.FEATURES_KEY], tf.cast(tf.squeeze(ex[common.LABEL_KEY], 0), tf.float32)

    def dataset_fn(_context: tf.distribute.InputContext):
        # The coordinator builds one input pipeline and places a copy on every worker (the
        # context says pipeline 0 of 1), so workers cannot take distinct shards here: each
        # reads every file, in its own random order (no fixed seed).
        # --shard_index / --num_shards are for the tf1 variant, where each worker reads itself.
        return (
            tf.data.Dataset.from_tensor_slices(files)
            .shuffle(len(files))
            .interleave(tf.data.TFRecordDataset, cycle_length=2)
            .map(parse)
            .shuffle(1024)
            .repeat()
            .batch(args.batch_size)
        )

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
    learning_rate = args.learning_rate

    @tf.function
    def train_step(it):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=model(tf, x)))
            for variable, grad in zip(model.variables, tape.gradient(loss, model.variables), strict=True):
                variable.assign_sub(learning_rate * grad)
            global_step.assign_add(1)
            return loss

        losses = strategy.run(replica_fn, args=(next(it),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    writer = tf.summary.create_file_writer(os.path.join(args.log_dir, "train"))
    eval_x, eval_y = common.load_eval(args.data_dir)
    start = int(global_step.numpy())
    common.log(f"chief: training steps {start + 1}..{args.steps} on {len(cluster.get('worker', []))} workers")
    step = start
    if stop.requested:  # stopped before the first step: nothing new to save
        return common.EXIT_SIGTERM
    while step < args.steps:
        # Schedule a block of steps, then wait for them: the workers run them asynchronously.
        block = min(args.log_every, args.steps - step)
        began = time.monotonic()
        results = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(block)]
        coordinator.join()
        step += block
        loss = float(results[-1].fetch())
        with writer.as_default():
            tf.summary.scalar("loss", loss, step=step)
        common.log(f"step {step}: batch loss {loss:.4f}")
        throughput = block * args.batch_size / max(time.monotonic() - began, 1e-6)
        common.report("progress", step=step, total=args.steps, loss=f"{loss:.4f}",
                      examples_per_second=f"{throughput:.1f}")
        if step % args.checkpoint_every == 0 or step >= args.steps or stop.requested:
            path = manager.save(checkpoint_number=step)
            common.report("checkpoint", step=step, path=path)
        if stop.requested:
            writer.flush()
            common.log(f"chief: SIGTERM; checkpoint written at step {step}, exiting")
            return common.EXIT_SIGTERM
        if args.max_steps_per_second > 0:
            # Paced: the block takes at least block / max_steps_per_second seconds.
            time.sleep(max(0.0, block / args.max_steps_per_second - (time.monotonic() - began)))
    writer.flush()

    weights, bias = model.w.numpy(), model.b.numpy()
    version = int(global_step.numpy())
    final = common.export_dir(args.log_dir, args.model_name, version)
    export(tf, weights, bias, final)
    metrics = common.evaluate(weights, float(bias[0]), eval_x, eval_y)
    common.write_metrics(args.log_dir, {
        "api": "tf2",
        "steps": args.steps,
        "global_step": version,
        "initial_loss": common.initial_loss(),
        "final_loss": metrics["loss"],
        "accuracy": metrics["accuracy"],
        "export": final,
        "workers": len(cluster.get("worker", [])),
    })
    common.log(f"chief: done; exported {final}")
    return 0


def export(tf, weights, bias, final_dir: str) -> None:
    """A SavedModel with a `serving_default` signature: x [batch, features] -> probability."""

    class Exported(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            # Local copies: the export must not depend on the parameter servers.
            self.w = tf.Variable(weights, name="w")
            self.b = tf.Variable(bias, name="b")

        @tf.function(input_signature=[tf.TensorSpec([None, weights.shape[0]], tf.float32, name="x")])
        def serve(self, x):
            return {"probability": tf.sigmoid(tf.squeeze(tf.matmul(x, self.w), axis=1) + self.b)}

    module = Exported()
    os.makedirs(os.path.dirname(final_dir), exist_ok=True)
    # Written next to its final place (same file system, so the move is a rename); a model
    # server ignores a directory whose name is not a number.
    tmp = tempfile.mkdtemp(prefix=".export-", dir=os.path.dirname(final_dir))
    tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
    common.publish_export(tmp, final_dir)
