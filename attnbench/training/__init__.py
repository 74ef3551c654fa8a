"""Training a task model: the loop (trainer), where it starts, a step, its state and record, its speed, checkpoints, and many processes."""
