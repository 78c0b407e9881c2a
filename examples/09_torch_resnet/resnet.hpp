// ResNet: the third source text's residual network, written in plain LibTorch, for Fashion-MNIST's
// 1x28x28 images: a stem, three stages of one residual block each (16, 32 and 64 channels), global
// average pooling and a dense classifier. convoy appears nowhere in it.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace examples {

namespace nn = torch::nn;

// example-begin resnet
// conv3x3-BatchNorm-ReLU, conv3x3-BatchNorm, plus the input (or its 1x1 projection when the block
// changes the width or the resolution), then ReLU.
struct ResidualBlockImpl : nn::Module {
  ResidualBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1(register_module(
            "conv1",
            nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2",
                              nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut = register_module(
          "shortcut",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(ResidualBlock);

struct ResNetImpl : nn::Module {
  ResNetImpl()
      : stem(register_module(
            "stem", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)),
                                   nn::BatchNorm2d(16), nn::ReLU()))),
        stage1(register_module("stage1", ResidualBlock(16, 16, 1))),
        stage2(register_module("stage2", ResidualBlock(16, 32, 2))),
        stage3(register_module("stage3", ResidualBlock(32, 64, 2))),
        classifier(register_module("classifier", nn::Linear(64, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = stage3(stage2(stage1(stem->forward(x))));
    return classifier(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  nn::Sequential stem;
  ResidualBlock stage1, stage2, stage3;
  nn::Linear classifier;
};
TORCH_MODULE(ResNet);
// example-end resnet

}  // namespace examples
