"""Tune's result keys (``ray.tune.result``): the names of the entries every trial result
carries, and those a result may set to ask something of Tune.

``SHOULD_CHECKPOINT``: a class trainable's ``step()`` result with ``"should_checkpoint": True``
is checkpointed (``save_checkpoint``) with that result, as in Ray. A driver-side
``Callback.on_trial_result`` that sets it cannot reach the trial, which runs on a worker:
raynb says so once and the trial checkpoints as its ``CheckpointConfig`` says.
"""

TRAINING_ITERATION = "training_iteration"
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
TIMESTAMP = "timestamp"
DONE = "done"
SHOULD_CHECKPOINT = "should_checkpoint"
HOSTNAME = "hostname"
TRIAL_ID = "trial_id"
EXPERIMENT_TAG = "experiment_tag"
NODE_IP = "node_ip"
PID = "pid"
DEFAULT_METRIC = "_metric"
EPISODE_REWARD_MEAN = "episode_reward_mean"
MEAN_LOSS = "mean_loss"
MEAN_ACCURACY = "mean_accuracy"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"
TIME_TOTAL_S = "time_total_s"
CONFIG_PREFIX = "config"
DEFAULT_EXPERIMENT_NAME = "default"
EXPR_PARAM_FILE = "params.json"
EXPR_PARAM_PICKLE_FILE = "params.pkl"
EXPR_PROGRESS_FILE = "progress.csv"
EXPR_RESULT_FILE = "result.json"
EXPR_ERROR_FILE = "error.txt"

#: Keys shown by default in the trial table, as Ray's.
DEFAULT_RESULT_KEYS = (TRAINING_ITERATION, TIME_TOTAL_S, MEAN_ACCURACY, MEAN_LOSS)
#: Keys Tune adds to every result.
AUTO_RESULT_KEYS = (
    TRAINING_ITERATION,
    TIME_TOTAL_S,
    EPISODES_TOTAL,
    TIMESTEPS_TOTAL,
    NODE_IP,
    HOSTNAME,
    PID,
    TIME_TOTAL_S,
    TIME_THIS_ITER_S,
    TIMESTAMP,
    "date",
    "time_since_restore",
    "timesteps_since_restore",
    "iterations_since_restore",
    "config",
)
