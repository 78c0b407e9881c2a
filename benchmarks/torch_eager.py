#!/usr/bin/env python3
"""PyTorch eager's side of bench_torch_gpu: the same two modules (benchmarks/resnet18.hpp and
examples/09_torch_resnet/resnet.hpp written in Python), batch, optimizer (SGD, 0.01), precision
(float32 with PyTorch's defaults, cuDNN's autotuner on) and loop (each batch copied from page-locked
host memory without waiting, the loss read each step) on one GPU. Best of --repeats runs.

Run: python3 benchmarks/torch_eager.py [--repeats N] [--quick] [--out PATH]
--out writes "eager <key> <images/s>" lines, which bench_torch_gpu --eager PATH reads.
"""
import argparse
import sys
import time

import torch
from torch import nn
import torch.nn.functional as F


class ResidualBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class FashionResNet(nn.Module):  # examples/09_torch_resnet/resnet.hpp
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.stage1 = ResidualBlock(16, 16, 1)
        self.stage2 = ResidualBlock(16, 32, 2)
        self.stage3 = ResidualBlock(32, 64, 2)
        self.classifier = nn.Linear(64, 10)

    def forward(self, x):
        x = self.stage3(self.stage2(self.stage1(self.stem(x))))
        return self.classifier(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ResNet18(nn.Module):  # benchmarks/resnet18.hpp
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
                                  nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        widths = [(64, 64, 1), (64, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2),
                  (256, 256, 1), (256, 512, 2), (512, 512, 1)]
        self.stages = nn.Sequential(*[ResidualBlock(*w) for w in widths])
        self.classifier = nn.Linear(512, 10)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.classifier(F.adaptive_avg_pool2d(x, 1).flatten(1))


def images_per_second(make, row_shape, batch, warmup, steps):
    torch.manual_seed(1)
    generator = torch.Generator().manual_seed(1)
    features = [torch.randn((batch, *row_shape), generator=generator).pin_memory()
                for _ in range(4)]
    labels = [torch.randint(0, 10, (batch,), generator=generator, dtype=torch.int32).pin_memory()
              for _ in range(4)]
    net = make().cuda().train()
    sgd = torch.optim.SGD(net.parameters(), lr=0.01)

    def step(k):
        x = features[k % 4].to("cuda", non_blocking=True)
        y = labels[k % 4].to("cuda", dtype=torch.long, non_blocking=True)
        sgd.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        sgd.step()
        return loss.item()

    for k in range(warmup):
        step(k)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for k in range(steps):
        step(warmup + k)
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_eager.py: no CUDA device; nothing to measure")
        return 77
    torch.backends.cudnn.benchmark = True
    repeats = 1 if args.quick else args.repeats
    workloads = [("resnet18", ResNet18, (3, 224, 224), 64, 2 if args.quick else 10,
                  3 if args.quick else 40),
                 ("fmnist_resnet", FashionResNet, (1, 28, 28), 64, 2 if args.quick else 20,
                  5 if args.quick else 300)]
    print(f"torch_eager.py: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}")
    lines = []
    for key, make, shape, batch, warmup, steps in workloads:
        best = max(images_per_second(make, shape, batch, warmup, steps) for _ in range(repeats))
        print(f"{key}: batch {batch}, {steps} steps after {warmup}, best of {repeats}: "
              f"{best:.0f} images/s")
        lines.append(f"eager {key} {best:.3f}\n")
    if args.out:
        with open(args.out, "w") as out:
            out.writelines(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
