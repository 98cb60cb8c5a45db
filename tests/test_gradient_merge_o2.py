"""gradient_merge.merged_backward under AMP O2 on several ranks with gradient merge: DataParallel's reducer must
never see the fp32 gradients that master_grad leaves after a micro-batch.

EagerReducer (paddle/fluid/distributed/collective/reducer.cc) types each bucket by its parameters' dtype when it
is built, points the bucket at each gradient as it arrives (ShareDataWith, no dtype check) and concatenates the
bucket as that dtype (ConcatTensorsForAllReduce<float16> reads every gradient with data<float16>()). Under O2 the
parameters are float16 while decorate's master_grad hook makes every gradient fp32 at the end of each backward,
so a synced backward onto the gradients an earlier micro-batch left behind stops in that concat. The stand-in
DataParallel below enforces exactly that rule, which the two-rank gloo test shows in Paddle's own reducer (a
float16 bucket given an fp32 gradient). Run as a script under paddle.distributed.launch this module is the
worker of the two-rank gloo tests.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import paddle
import pytest

from fine_tuning_runs import run_script
from training.gradient_merge import merged_backward


class ReducerRuleDataParallel(paddle.nn.Layer):
    """A DataParallel stand-in for 2 ranks with identical data: a forward outside no_sync is the start of a synced
    backward, which fails (as the reducer's concat would on a GPU) when gradients from an earlier backward of the
    step are there already (under master_grad they are fp32, the buckets float16)."""

    def __init__(self, layer: paddle.nn.Layer):
        super().__init__()
        self.layer = layer
        self.syncing = True
        self.synced_backwards = 0

    @contextlib.contextmanager
    def no_sync(self):
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True

    def forward(self, x):
        if self.syncing:
            if any(p.grad is not None for p in self.layer.parameters()):
                raise RuntimeError("reducer: the bucket is float16 but the gradient is float32")
            self.synced_backwards += 1
        return self.layer(x)


def micro_batches():
    rng = np.random.default_rng(0)
    return [rng.normal(size=(rows, 3)).astype(np.float32) for rows in (2, 3, 1)]


def counts(batch):
    return (len(batch),)


def loss_terms(network, batch):
    return [(network(paddle.to_tensor(batch)).square().mean(), 0)]


def gradients(world_size: int, master_gradients: bool, network_class=None) -> dict[str, np.ndarray]:
    paddle.seed(0)
    layer = paddle.nn.Linear(3, 2)
    network = network_class(layer) if network_class else layer
    # Two ranks with identical micro-batches: every all_reduce sums two equal tensors.
    merged_backward(network, micro_batches(), counts, loss_terms, world_size, all_reduce=lambda t: t.scale_(2.0),
                    master_gradients=master_gradients)
    return {name: p.grad.numpy() for name, p in layer.named_parameters()}


def test_o2_gradient_merge_on_two_ranks_keeps_the_reducer_away_from_fp32_gradients():
    with pytest.raises(RuntimeError, match="bucket is float16"):  # what the reducer did at the last micro-batch
        gradients(2, master_gradients=False, network_class=ReducerRuleDataParallel)
    actual = gradients(2, master_gradients=True, network_class=ReducerRuleDataParallel)
    # The same gradients as one process on the same micro-batches: the mean over all 6 rows of one batch.
    expected = gradients(1, master_gradients=False)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-6, err_msg=name)


def test_single_micro_batch_or_single_rank_keeps_the_overlapped_all_reduce():
    network = ReducerRuleDataParallel(paddle.nn.Linear(3, 2))
    merged_backward(network, micro_batches()[:1], counts, loss_terms, 2, all_reduce=lambda t: t.scale_(2.0),
                    master_gradients=True)
    assert network.synced_backwards == 1  # one backward, before any gradient turned fp32: the reducer's own path


def launched_logs(tmp_path, worker: str) -> list[str]:
    result = run_script("tests/test_gradient_merge_o2.py", [worker], launch_ranks=2, log_dir=tmp_path / "logs")
    logs = [(tmp_path / "logs" / f"workerlog.{rank}").read_text() for rank in range(2)]
    assert result.returncode == 0, logs
    return logs


def test_averaging_afterwards_equals_the_reducers_all_reduce_on_two_gloo_ranks(tmp_path):
    """The path taken under O2, on real DataParallel ranks (fp32 here): the same gradients, bit for bit."""
    logs = launched_logs(tmp_path, "same-gradients")
    assert all("gradients equal: True" in log for log in logs), logs


def test_paddles_reducer_refuses_an_fp32_gradient_in_a_float16_bucket(tmp_path):
    """The rule of the stand-in above, in Paddle 3.3.1's EagerReducer over gloo: a float16 parameter whose
    gradient master_grad made fp32 (here it reaches the reducer as an unused parameter's gradient, since the
    CPU cannot add a float16 gradient onto an fp32 one as a GPU does) stops the synced backward."""
    logs = launched_logs(tmp_path, "reducer-rule")
    assert all("reducer: The type of data we are trying to retrieve (float16) does not match the type of data "
               "(float32)" in log for log in logs), logs


def _reducer_rule_worker() -> None:
    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.w = self.create_parameter([4], dtype="float32")
            self.u = self.create_parameter([4], dtype="float16")  # a bucket of its own: float16
            self.use_u = True

        def forward(self, x):
            y = (self.w * x).sum()
            return y + (self.u.astype("float32") * x).sum() if self.use_u else y

    net = Net()
    network = paddle.DataParallel(net, find_unused_parameters=True)
    x = paddle.to_tensor(np.arange(4, dtype=np.float32))
    with network.no_sync():
        network(x).backward()
    paddle.base.core.eager.set_master_grads([net.u])  # decorate's master_grad hook at the end of a backward
    net.use_u = False
    try:
        network(x).backward()
        print("reducer: accepted", flush=True)
    except ValueError as error:
        print("reducer:", str(error).splitlines()[0].removeprefix("(InvalidArgument) "), flush=True)


def _same_gradients_worker() -> None:
    rng = np.random.default_rng(paddle.distributed.get_rank())  # each rank its own micro-batches
    batches = [rng.normal(size=(rows, 3)).astype(np.float32) for rows in (2, 3)]
    grads = []
    for master_gradients in (False, True):
        paddle.seed(0)
        layer = paddle.nn.Linear(3, 2)
        merged_backward(paddle.DataParallel(layer), batches, counts, loss_terms, 2, master_gradients=master_gradients)
        grads.append([p.grad.numpy().copy() for p in layer.parameters()])
    print("gradients equal:", all(np.array_equal(a, b) for a, b in zip(*grads, strict=True)), flush=True)


if __name__ == "__main__":
    paddle.distributed.init_parallel_env()
    {"same-gradients": _same_gradients_worker, "reducer-rule": _reducer_rule_worker}[sys.argv[1]]()
