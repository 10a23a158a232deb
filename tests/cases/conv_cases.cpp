// Gradcheck cases for conv2d: every option (stride, padding, dilation, groups), no bias,
// non-square kernels and images, and the 1x1 path that skips im2col.

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;

// conv2d(x[0], x[1], x[2] if present, opt)
std::function<Tensor(const V&)> conv(Conv2dOptions opt) {
  return [opt](const V& x) { return conv2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), opt); };
}
}  // namespace

void add_conv_cases(std::vector<OpCase>& c) {
  // Channels-last input, weight or both: the output is channels-last, values and gradients as NCHW.
  c.push_back({.name = "conv2d/channels_last_input", .inputs = {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}},
               .fn = [](const V& x) {
                 return expect_channels_last(conv2d(channels_last(x[0]), x[1], x[2], {.padding = {1, 1}}), "conv2d");
               }});
  c.push_back({.name = "conv2d/channels_last_weight", .inputs = {{1, 2, 6, 5}, {3, 2, 3, 2}},
               .fn = [](const V& x) {
                 return expect_channels_last(conv2d(x[0], channels_last(x[1]), Tensor(), {.stride = {2, 1}}),
                                             "conv2d");
               }});
  c.push_back({.name = "conv2d/channels_last_groups", .inputs = {{2, 4, 5, 5}, {6, 2, 3, 3}, {6}},
               .fn = [](const V& x) {
                 return expect_channels_last(
                     conv2d(channels_last(x[0]), channels_last(x[1]), x[2], {.padding = {1, 1}, .groups = 2}),
                     "conv2d");
               }});
  // A residual block in channels-last: conv, batch norm, ReLU, conv, the residual add, average
  // pooling; every intermediate keeps the format.
  c.push_back({.name = "conv2d/channels_last_block", .inputs = {{2, 3, 6, 6}, {3, 3, 3, 3}, {3}, {3}, {3, 3, 3, 3}},
               .fn = [](const V& x) {
                 const Tensor in = channels_last(x[0]);
                 Tensor h = expect_channels_last(conv2d(in, channels_last(x[1]), Tensor(), {.padding = {1, 1}}), "conv2d");
                 h = expect_channels_last(batch_norm(h, Tensor(), Tensor(), x[2], x[3], true), "batch_norm");
                 h = expect_channels_last(relu(h), "relu");
                 h = expect_channels_last(conv2d(h, channels_last(x[4]), Tensor(), {.padding = {1, 1}}), "conv2d");
                 h = expect_channels_last(add(h, in), "add");
                 return expect_channels_last(avg_pool2d(h, {.kernel = {2, 2}}), "avg_pool2d");
               },
               .tol = 1e-5});
  c.push_back({.name = "conv2d/basic", .inputs = {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}, .fn = conv({})});
  c.push_back({.name = "conv2d/no_bias", .inputs = {{2, 2, 4, 4}, {3, 2, 2, 2}}, .fn = conv({})});
  c.push_back({.name = "conv2d/stride2_pad1", .inputs = {{1, 2, 7, 6}, {3, 2, 3, 3}, {3}},
               .fn = conv({.stride = {2, 2}, .padding = {1, 1}})});
  c.push_back({.name = "conv2d/stride_wider_than_kernel", .inputs = {{1, 2, 8, 8}, {2, 2, 2, 2}, {2}},
               .fn = conv({.stride = {3, 3}})});
  c.push_back({.name = "conv2d/dilation2_pad2", .inputs = {{1, 2, 7, 7}, {2, 2, 3, 3}, {2}},
               .fn = conv({.padding = {2, 2}, .dilation = {2, 2}})});
  c.push_back({.name = "conv2d/groups2", .inputs = {{2, 4, 5, 5}, {6, 2, 3, 3}, {6}},
               .fn = conv({.padding = {1, 1}, .groups = 2})});
  c.push_back({.name = "conv2d/depthwise", .inputs = {{1, 3, 5, 5}, {3, 1, 3, 3}},
               .fn = conv({.stride = {2, 2}, .padding = {1, 1}, .groups = 3})});
  c.push_back({.name = "conv2d/non_square", .inputs = {{1, 2, 5, 7}, {3, 2, 2, 3}, {3}},
               .fn = conv({.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}})});
  c.push_back({.name = "conv2d/pointwise", .inputs = {{2, 4, 3, 3}, {5, 4, 1, 1}, {5}}, .fn = conv({})});
  c.push_back({.name = "conv2d/pointwise_groups", .inputs = {{2, 4, 3, 2}, {4, 2, 1, 1}},
               .fn = conv({.groups = 2})});
  c.push_back({.name = "conv2d/pointwise_strided", .inputs = {{1, 3, 5, 5}, {2, 3, 1, 1}, {2}},
               .fn = conv({.stride = {2, 2}})});
  c.push_back({.name = "conv2d/kernel_as_large_as_padded_input", .inputs = {{1, 1, 3, 3}, {2, 1, 5, 5}, {2}},
               .fn = conv({.padding = {1, 1}})});
  c.push_back({.name = "conv2d/conv_tanh_conv", .inputs = {{1, 2, 6, 6}, {3, 2, 3, 3}, {3, 3, 3, 3}},
               .fn = [](const V& x) {
                 return conv2d(tanh(conv2d(x[0], x[1], Tensor(), {.padding = {1, 1}})), x[2], Tensor(),
                               {.stride = {2, 2}});
               }});
}

}  // namespace ember::testing
