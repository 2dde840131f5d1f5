"""A worker for tests/integration/test_distributed.py whose initial parameters differ from rank 0's (as on a
machine whose random generator differs): prints whether its first summed gradient is the one of rank 0's
parameters.

    python tests/dist_init_worker.py with|without   (with or without WorkerGroup.init_trainer)
"""
import sys
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from nmt.workers import WorkerGroup

kv = mx.kv.create("dist_sync")
group = WorkerGroup(kv)
mx.random.seed(1 + kv.rank)        # another machine: other initial parameters
net = gluon.nn.Dense(3, in_units=4)
net.initialize(mx.init.Xavier())
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.0}, kvstore=kv, update_on_kvstore=False)
if sys.argv[1] == "with":
    group.init_trainer(trainer)
x = mx.nd.array(np.arange(8).reshape(2, 4) / 8.0)


def grads():
    with autograd.record():
        loss = (net(x) ** 2).sum()
    loss.backward()
    return [p.grad().asnumpy().copy() for p in net.collect_params().values()]


grads()
trainer.allreduce_grads()
summed = [p.grad().asnumpy().copy() for p in net.collect_params().values()]
local = grads()        # at the parameters every worker holds now: rank 0's
ok = all(np.allclose(s, 2 * g, rtol=1e-6) for s, g in zip(summed, local))
# one write of a whole line: the launcher gathers both workers' output in one file
sys.stdout.write(f"rank {kv.rank}: {'same' if ok else 'different'}\n")
sys.stdout.flush()
group.finished()
