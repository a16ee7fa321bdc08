"""TF1-style between-graph asynchronous training (`tf.compat.v1`), driven by the classic
flags: every task starts a `tf.train.Server` for `--job_name` / `--task_index` in the
cluster of `--ps_hosts` / `--worker_hosts`; parameter servers join it (they never exit: the
job ends on the workers' TaskCompleted -> CompleteJob); each worker builds its own graph with
the variables placed on the parameter servers and trains on its shard of the files
(`--shard_index` / `--num_shards`) until the shared global step reaches `--steps`. Worker 0
is the chief: it initializes the variables, writes checkpoints, TensorBoard events, the
SavedModel export and metrics.json."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import common


def run(args: argparse.Namespace) -> int:
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    ps_hosts, worker_hosts = common.hosts(args.ps_hosts), common.hosts(args.worker_hosts)
    if args.job_name not in ("ps", "worker"):
        raise SystemExit(f"--job_name={args.job_name}: the tf1 variant runs ps and worker tasks only (no chief or evaluator)")
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})
    config = tf1.ConfigProto(
        intra_op_parallelism_threads=args.threads,
        inter_op_parallelism_threads=args.threads,
        # A worker talks to the parameter servers and itself, never waits for other workers.
        device_filters=["/job:ps", f"/job:{args.job_name}/task:{args.task_index}"],
    )
    server = tf1.train.Server(cluster, job_name=args.job_name, task_index=args.task_index, config=config)
    if args.job_name == "ps":
        common.log(f"ps {args.task_index}: serving {server.target}")
        return common.serve_until_stopped("ps", args.task_index)
    return work(tf, tf1, server, cluster, config, args)


def work(tf, tf1, server, cluster, config, args: argparse.Namespace) -> int:
    is_chief = args.task_index == 0
    features = common.feature_count(args.data_dir)
    files = common.shard_files(common.train_files(args.data_dir), args.shard_index, args.num_shards)
    common.log(f"worker {args.task_index}: shard {args.shard_index}/{args.num_shards}: {[os.path.basename(f) for f in files]}")

    worker_device = f"/job:worker/task:{args.task_index}"
    with tf1.device(tf1.train.replica_device_setter(worker_device=worker_device, cluster=cluster)):
        global_step = tf1.train.get_or_create_global_step()
        w = tf1.get_variable("w", [features, 1], initializer=tf1.zeros_initializer())
        b = tf1.get_variable("b", [1], initializer=tf1.zeros_initializer())
        feature_spec = {
            common.FEATURES_KEY: tf.io.FixedLenFeature([features], tf.float32),
            common.LABEL_KEY: tf.io.FixedLenFeature([1], tf.int64),
        }

        def parse(record):
            ex = tf.io.parse_single_example(record, feature_spec)
            return ex[common.FEATURES_KEY], tf.cast(tf.squeeze(ex[common.LABEL_KEY], 0), tf.float32)

        dataset = (
            tf.data.TFRecordDataset(files).map(parse).shuffle(1024, seed=args.seed + args.task_index)
            .repeat().batch(args.batch_size)
        )
        x, y = tf1.data.make_one_shot_iterator(dataset).get_next()
        logits = tf.squeeze(tf.matmul(x, w), axis=1) + b
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        train_op = tf1.train.GradientDescentOptimizer(args.learning_rate).minimize(loss, global_step=global_step)
        summary_op = tf1.summary.scalar("loss", loss)

    saver = tf1.train.Saver(max_to_keep=3)
    stop = common.StopRequest()
    # Short recovery wait: a non-chief polls for the chief's initialization every half second
    # instead of TensorFlow's default 30 s.
    manager = tf1.train.SessionManager(ready_op=tf1.report_uninitialized_variables(), recovery_wait_secs=0.5)
    checkpoint_dir = os.path.join(args.log_dir, "checkpoints")
    if is_chief:
        os.makedirs(checkpoint_dir, exist_ok=True)
        sess = manager.prepare_session(server.target, init_op=tf1.global_variables_initializer(), saver=saver,
                                       checkpoint_dir=checkpoint_dir, config=config)
        writer = tf1.summary.FileWriter(os.path.join(args.log_dir, "train"), sess.graph)
    else:
        sess = manager.wait_for_session(server.target, config=config, max_wait_secs=600)
        writer = None
    step = int(sess.run(global_step))
    common.log(f"worker {args.task_index}: training from global step {step} to {args.steps}")
    if is_chief and step > 0:
        common.report("resumed", step=step, path=tf1.train.latest_checkpoint(checkpoint_dir))
    local_steps = 0
    batch_loss = None
    last_logged, logged_at = step, time.monotonic()
    while step < args.steps and not stop.requested:
        _, batch_loss, summary, step = sess.run([train_op, loss, summary_op, global_step])
        step = int(step)
        local_steps += 1
        if is_chief and step - last_logged >= args.log_every:
            writer.add_summary(summary, step)
            common.log(f"step {step}: batch loss {batch_loss:.4f}")
            # The global step counts every worker's batches: this is the whole job's rate.
            rate = (step - last_logged) * args.batch_size / max(time.monotonic() - logged_at, 1e-6)
            common.report("progress", step=step, total=args.steps, loss=f"{batch_loss:.4f}",
                          examples_per_second=f"{rate:.1f}")
            last_logged, logged_at = step, time.monotonic()
        if is_chief and local_steps % args.checkpoint_every == 0:
            path = saver.save(sess, os.path.join(checkpoint_dir, "model.ckpt"), global_step=step)
            common.report("checkpoint", step=step, path=path)
    common.log(f"worker {args.task_index}: {local_steps} local steps, global step {step}")
    if stop.requested:
        if is_chief:
            path = saver.save(sess, os.path.join(checkpoint_dir, "model.ckpt"), global_step=step)
            common.report("checkpoint", step=step, path=path)
            writer.flush()
        common.log(f"worker {args.task_index}: SIGTERM at global step {step}, exiting")
        return common.EXIT_SIGTERM
    if is_chief:
        path = saver.save(sess, os.path.join(checkpoint_dir, "model.ckpt"), global_step=step)
        common.report("progress", step=step, total=args.steps,
                      loss=None if batch_loss is None else f"{batch_loss:.4f}")
        common.report("checkpoint", step=step, path=path)
        writer.flush()
        weights, bias = sess.run([w, b])
        final = common.export_dir(args.log_dir, args.model_name, step)
        export(tf1, weights, bias, final)
        eval_x, eval_y = common.load_eval(args.data_dir)
        metrics = common.evaluate(weights, float(bias[0]), eval_x, eval_y)
        common.write_metrics(args.log_dir, {
            "api": "tf1",
            "steps": args.steps,
            "global_step": step,
            "chief_local_steps": local_steps,
            "initial_loss": common.initial_loss(),
            "final_loss": metrics["loss"],
            "accuracy": metrics["accuracy"],
            "export": final,
            "workers": args.num_shards,
        })
        common.log(f"chief: done; exported {final}")
    sess.close()
    return 0


def export(tf1, weights, bias, final_dir: str) -> None:
    """A SavedModel (serving_default: x -> probability) built in a graph of its own, with
    local copies of the trained values: it must not depend on the parameter servers."""
    os.makedirs(os.path.dirname(final_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export-", dir=os.path.dirname(final_dir))
    os.rmdir(tmp)  # the builder wants to create it
    import tensorflow as tf

    with tf.Graph().as_default(), tf1.Session() as sess:
        x = tf1.placeholder(tf.float32, [None, weights.shape[0]], name="x")
        w = tf1.Variable(weights, name="w")
        b = tf1.Variable(bias, name="b")
        probability = tf.sigmoid(tf.squeeze(tf.matmul(x, w), axis=1) + b, name="probability")
        sess.run(tf1.global_variables_initializer())
        builder = tf1.saved_model.Builder(tmp)
        signature = tf1.saved_model.predict_signature_def(inputs={"x": x}, outputs={"probability": probability})
        builder.add_meta_graph_and_variables(
            sess, [tf1.saved_model.tag_constants.SERVING], signature_def_map={"serving_default": signature}
        )
        builder.save()
    common.publish_export(tmp, final_dir)
