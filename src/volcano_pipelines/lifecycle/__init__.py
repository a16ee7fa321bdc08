"""The lifecycle steps' components (reap, tensorboard, serve). reap.py and tfserving.py are
pure decisions and readers: dicts the API returned (or a directory listing) in, a decision or
a parsed status out, no I/O. sweep.py is the one component that talks to the cluster: the
reap sweeper, which watches, asks reap.py, and acts."""
