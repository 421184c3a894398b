"""CPU vs CUDA, step by step: the largest |Δθ| and |Δg| (task gradient) over all parameters
after steps 1–30 of the engine's MLP step (hand-written backward, penalty, plasticlab's Adam),
for methods with and without L2 Init's decay folded into Adam. The diagnostic behind
``fold_cpu_vs_cuda.txt``, run at commit 6804370 (since 3541af3 ``fold_decay`` refuses to fold
off the CPU, so ``fold=True`` no longer folds on CUDA)."""

import sys

import torch

from plasticlab.engine import member_hyperparameters
from plasticlab.experiments.config import resolve_config
from plasticlab.fast import mlp_backprop as manual  # plasticlab.nets.backprop at 6804370
from plasticlab.methods import MethodContext, get_method
from plasticlab.nets import build_network
from plasticlab.optim import make_optimizer
from plasticlab.problems import get_problem
from plasticlab.rng import torch_generator

data = sys.argv[1]
torch.backends.cuda.matmul.allow_tf32 = False

def run(device, method, steps, fold=True, seeds=(0, 1, 2)):
    config = resolve_config({"problem": "permuted_mnist", "tasks": 1, "steps_per_task": steps,
                             "problem_params": {"examples_per_task": 480}, "method": method})
    cls = get_method(method)
    hp = member_hyperparameters(cls.hyperparameters, [dict(config.params)] * len(seeds), device, method)
    problem = get_problem("permuted_mnist")(list(seeds), tasks=1, steps_per_task=steps, data_dir=data,
                                            device=device, examples_per_task=480)
    plain = {"arch": "mlp", "input_shape": (784,), "num_outputs": 10, "width": config.width,
             "extra_layers": config.extra_layers}
    net = build_network(members=len(seeds), init=config.init,
                        generators=[torch_generator(s, "init") for s in seeds], **plain,
                        **cls.architecture(hp, plain)).to(device)
    opt = make_optimizer(config.optimizer, list(net.parameters()), config.lr)
    m = cls(net, opt, hp, MethodContext(list(seeds), torch.device(device)))
    if not fold and getattr(m, "folded", False):
        m.folded, opt.weight_decay = False, 0.0
    hand = manual.ManualBackprop(net)
    problem.start_task(0)
    out = []
    for step in range(steps):
        x, y = problem.batch(step)
        hand.step(x, y)
        grads = [p.grad.detach().cpu().clone() for p in net.parameters()]
        m.add_penalty_grad()
        opt.step()
        out.append(([p.detach().cpu().clone() for p in net.parameters()], grads))
    return out

for method, fold in (("baseline", True), ("l2", True), ("l2_init", True), ("l2_init", False),
                     ("l2_init_resample", True)):
    a, b = run("cpu", method, 30, fold), run("cuda", method, 30, fold)
    rows = []
    for s in (0, 1, 2, 4, 9, 19, 29):
        dp = max((p - q).abs().max().item() for p, q in zip(a[s][0], b[s][0], strict=True))
        dg = max((p - q).abs().max().item() for p, q in zip(a[s][1], b[s][1], strict=True))
        rows.append(f"s{s + 1}: dθ {dp:.1e} dg {dg:.1e}")
    print(f"{method:<18} fold={fold!s:<5} " + " | ".join(rows), flush=True)
