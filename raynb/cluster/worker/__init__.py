"""A warm worker: its task loop, its link to the head, rendezvous of process groups, and the rank's output."""
