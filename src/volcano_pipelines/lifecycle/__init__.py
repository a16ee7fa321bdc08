"""Pure decisions and readers behind the lifecycle steps (reap, tensorboard, serve): dicts the
API returned (or a directory listing) in, a decision or a parsed status out. No I/O here."""
