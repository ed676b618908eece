"""The node agent (one per machine): its zygote, forks, GPU stats, data server and the node's shared-memory segments."""
