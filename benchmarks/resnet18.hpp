// The third source text's ResNet (tf.distribute's article): a 7x7 stem with max pooling, four
// stages of two residual blocks from 64 to 512 channels, global average pooling and 10 classes,
// on 224x224x3 images; ResNet-18's layout, built of examples/09_torch_resnet's residual block.
// benchmarks/torch_eager.py writes the same module in Python.
#pragma once

#include <torch/torch.h>

#include "../examples/09_torch_resnet/resnet.hpp"

namespace zoo {

struct ResNet18Impl : torch::nn::Module {
  ResNet18Impl()
      : stem(register_module(
            "stem",
            torch::nn::Sequential(
                torch::nn::Conv2d(
                    torch::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)),
                torch::nn::BatchNorm2d(64), torch::nn::ReLU(),
                torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1))))),
        stages(register_module(
            "stages",
            torch::nn::Sequential(
                examples::ResidualBlock(64, 64, 1), examples::ResidualBlock(64, 64, 1),
                examples::ResidualBlock(64, 128, 2), examples::ResidualBlock(128, 128, 1),
                examples::ResidualBlock(128, 256, 2), examples::ResidualBlock(256, 256, 1),
                examples::ResidualBlock(256, 512, 2), examples::ResidualBlock(512, 512, 1)))),
        classifier(register_module("classifier", torch::nn::Linear(512, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = stages->forward(stem->forward(x));
    return classifier(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  torch::nn::Sequential stem, stages;
  torch::nn::Linear classifier;
};
TORCH_MODULE(ResNet18);

}  // namespace zoo
