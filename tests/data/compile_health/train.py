"""A small training loop with one compile problem planted (argv[1]), for the compile-health lab tests:

  steady       nothing: only the first compile
  recompile    a Python float that changes each step (dynamic=False): a recompile each step, then the
               recompile limit (8) and the function runs eagerly
  graph-break  from step 4 an evaluation function with an explicit torch._dynamo.graph_break()
  suppressed   from step 4 a function whose compile fails, swallowed by suppress_errors: it runs eagerly

Prints `step N | X Ktok/s` each step (the first step includes the compile).
"""

import sys
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
plant = sys.argv[1] if len(sys.argv) > 1 else "steady"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 12
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
SCALE = 1.0


def loss_fn(x):
    return (model(x) * SCALE).square().mean()


def evaluate(x):
    y = model(x)
    torch._dynamo.graph_break()
    return y.abs().mean()


def failing_backend(gm, example_inputs):
    raise RuntimeError("planted compile failure")


step = torch.compile(loss_fn, backend="aot_eager", dynamic=False)
check = torch.compile(evaluate, backend="aot_eager")
if plant == "suppressed":
    torch._dynamo.config.suppress_errors = True
broken = torch.compile(lambda x: x.sin().sum(), backend=failing_backend)

x = torch.randn(64, 16)
for i in range(steps):
    t0 = time.time()
    if plant == "recompile":
        SCALE = 1.0 + i / 10
    loss = step(x)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if i >= 4 and plant == "graph-break":
        check(x)
    if i >= 4 and plant == "suppressed":
        broken(x)
    time.sleep(1.2)  # a step long enough that the run's watch times each throughput line apart
    print(f"step {i} | {64 * 16 / (time.time() - t0) / 1000:.2f} Ktok/s", flush=True)
