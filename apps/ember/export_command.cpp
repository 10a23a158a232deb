#include "export_command.h"

#include <ember/core/error.h>

#ifdef EMBER_WITH_ONNX

#include <onnx/checker.h>
#include <onnx/onnx-ml.pb.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ember/core/build_info.h>
#include <ember/io/atomic_file.h>
#include <ember/layers/modules.h>
#include <ember/models/zoo.h>
#include <ember/train/run_dir.h>
#include <ember/train/inference.h>
#include <ember/train/trainer.h>

namespace ember::app {

namespace fs = std::filesystem;

// Note [ONNX export]
// `ember export` writes the network as an ONNX ModelProto through protobuf and ONNX's own schema
// (Debian's libonnx-dev: onnx/onnx-ml.pb.h), opset 13, IR version 7. The graph is the model's
// forward, written node by node from the zoo's module structure:
//   Conv2d            Conv (weight, bias when the layer has one; strides, pads, dilations, group)
//   BatchNorm2d       BatchNormalization in its inference form (scale, bias, running mean and
//                     variance, epsilon); not folded into the convolution, so the file's tensors are
//                     the checkpoint's, under the same names
//   ReLU              Relu
//   MaxPool2d         MaxPool (kernel_shape, strides, pads, dilations, ceil_mode)
//   AdaptiveAvgPool2d GlobalAveragePool (output size 1, what the ResNets use)
//   flatten(1)        Flatten (axis 1)
//   Linear            Gemm (transB = 1)
//   residual sums     Add
//   Dropout           nothing: the identity at inference
// Initializers carry the state_dict's names ("layer1.0.conv1.weight"). The input "input" is
// (batch, C, H, W) float32 with a symbolic batch dimension; the output "logits" is (batch,
// classes). The model expects what ember's eval transform gives (decode, Resize, CenterCrop, to
// [0, 1], Normalize): the metadata_props say how, with the same keys as a weights file's
// metadata: ember.model, ember.in_channels, ember.image_size, ember.resize (0: no Resize),
// ember.mean and ember.std (JSON lists), ember.classes (a JSON list of the class names, in
// logit order). ONNX's C++ checker (onnx::checker::check_model) validates the model before the
// file is written atomically (io/atomic_file.h): an error leaves nothing at the output path.

namespace {

// Builds the graph: initializers from tensors, nodes with fresh output names.
class GraphWriter {
 public:
  explicit GraphWriter(onnx::GraphProto& graph) : g_(graph) {}

  // A float32 initializer named `name` holding `t`.
  std::string initializer(const std::string& name, const Tensor& t) {
    const Tensor c = t.detach().to(Device::cpu()).to(DType::f32).contiguous();
    onnx::TensorProto* p = g_.add_initializer();
    p->set_name(name);
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : c.shape()) p->add_dims(d);
    p->set_raw_data(c.data(), static_cast<size_t>(c.numel()) * sizeof(float));  // little-endian, as ONNX stores it
    return name;
  }

  struct Attr {
    std::string name;
    std::vector<int64_t> ints;
    std::optional<int64_t> i;
    std::optional<float> f;
  };
  // One node; returns its output's name (`out`, or a fresh one from the op type).
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<Attr>& attrs = {},
                   std::string out = "") {
    if (out.empty()) out = op + "_" + std::to_string(++count_[op]);
    onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(out);
    for (const Attr& a : attrs) {
      onnx::AttributeProto* p = n->add_attribute();
      p->set_name(a.name);
      if (a.f) {
        p->set_type(onnx::AttributeProto::FLOAT);
        p->set_f(*a.f);
      } else if (a.i) {
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(*a.i);
      } else {
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : a.ints) p->add_ints(v);
      }
    }
    return out;
  }

 private:
  onnx::GraphProto& g_;
  std::map<std::string, int> count_;
};

// Writes module `m` (named `prefix` in the state_dict) applied to `x`; returns the output's name.
class ModelWriter {
 public:
  explicit ModelWriter(GraphWriter& w) : w_(w) {}

  std::string conv(nn::Conv2d& c, const std::string& prefix, const std::string& x) {
    std::vector<std::string> in{x, w_.initializer(prefix + "weight", c.weight)};
    if (c.bias.defined()) in.push_back(w_.initializer(prefix + "bias", c.bias));
    const int64_t k = c.kernel_size, s = c.options.stride, p = c.options.padding, d = c.options.dilation;
    return w_.node("Conv", in,
                   {{.name = "kernel_shape", .ints = {k, k}}, {.name = "strides", .ints = {s, s}},
                    {.name = "pads", .ints = {p, p, p, p}}, {.name = "dilations", .ints = {d, d}},
                    {.name = "group", .i = c.options.groups}});
  }

  std::string batch_norm(nn::BatchNorm2d& b, const std::string& prefix, const std::string& x) {
    EMBER_CHECK(b.weight.defined() && b.running_mean.defined(), "ONNX export: the BatchNorm2d '", prefix,
                "' has no affine parameters or no running statistics");
    return w_.node("BatchNormalization",
                   {x, w_.initializer(prefix + "weight", b.weight), w_.initializer(prefix + "bias", b.bias),
                    w_.initializer(prefix + "running_mean", b.running_mean),
                    w_.initializer(prefix + "running_var", b.running_var)},
                   {{.name = "epsilon", .f = static_cast<float>(b.options.eps)}});
  }

  std::string max_pool(nn::MaxPool2d& m, const std::string& x) {
    const Pool2dOptions& o = m.options;
    const auto stride = o.stride.first == 0 ? o.kernel : o.stride;
    return w_.node("MaxPool", {x},
                   {{.name = "kernel_shape", .ints = {o.kernel.first, o.kernel.second}},
                    {.name = "strides", .ints = {stride.first, stride.second}},
                    {.name = "pads", .ints = {o.padding.first, o.padding.second, o.padding.first, o.padding.second}},
                    {.name = "dilations", .ints = {o.dilation.first, o.dilation.second}},
                    {.name = "ceil_mode", .i = o.ceil_mode ? 1 : 0}});
  }

  std::string linear(nn::Linear& l, const std::string& prefix, const std::string& x) {
    std::vector<std::string> in{x, w_.initializer(prefix + "weight", l.weight)};
    if (l.bias.defined()) in.push_back(w_.initializer(prefix + "bias", l.bias));
    return w_.node("Gemm", in, {{.name = "transB", .i = 1}});
  }

  std::string relu(const std::string& x) { return w_.node("Relu", {x}); }
  std::string flatten(const std::string& x) { return w_.node("Flatten", {x}, {{.name = "axis", .i = 1}}); }

  // Any module the zoo uses, by its type; `prefix` is its state_dict prefix ("" or "layer1.0.").
  std::string module(nn::Module& m, const std::string& prefix, const std::string& x) {
    if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) return conv(*c, prefix, x);
    if (auto* b = dynamic_cast<nn::BatchNorm2d*>(&m)) return batch_norm(*b, prefix, x);
    if (auto* p = dynamic_cast<nn::MaxPool2d*>(&m)) return max_pool(*p, x);
    if (auto* l = dynamic_cast<nn::Linear*>(&m)) return linear(*l, prefix, x);
    if (dynamic_cast<nn::ReLU*>(&m)) return relu(x);
    if (dynamic_cast<nn::Dropout*>(&m) || dynamic_cast<nn::Identity*>(&m)) return x;  // inference
    if (auto* a = dynamic_cast<nn::AdaptiveAvgPool2d*>(&m)) {
      EMBER_CHECK(a->output_size.first == 1 && a->output_size.second == 1, "ONNX export: AdaptiveAvgPool2d '",
                  prefix, "' has output size (", a->output_size.first, ", ", a->output_size.second,
                  "); only 1 (GlobalAveragePool) is exported");
      return w_.node("GlobalAveragePool", {x});
    }
    if (auto* f = dynamic_cast<nn::Flatten*>(&m)) {
      EMBER_CHECK(f->start_dim == 1 && f->end_dim == -1, "ONNX export: only Flatten(1, -1) is exported");
      return flatten(x);
    }
    if (auto* s = dynamic_cast<nn::Sequential*>(&m)) {
      std::string h = x;
      for (auto& [name, child] : s->named_children()) h = module(*child, prefix + name + ".", h);
      return h;
    }
    if (auto* b = dynamic_cast<models::BasicBlock*>(&m)) {
      std::string out = relu(batch_norm(b->bn1, prefix + "bn1.", conv(b->conv1, prefix + "conv1.", x)));
      out = batch_norm(b->bn2, prefix + "bn2.", conv(b->conv2, prefix + "conv2.", out));
      const std::string shortcut = b->downsample ? module(*b->downsample, prefix + "downsample.", x) : x;
      return relu(w_.node("Add", {out, shortcut}));
    }
    if (auto* b = dynamic_cast<models::Bottleneck*>(&m)) {
      std::string out = relu(batch_norm(b->bn1, prefix + "bn1.", conv(b->conv1, prefix + "conv1.", x)));
      out = relu(batch_norm(b->bn2, prefix + "bn2.", conv(b->conv2, prefix + "conv2.", out)));
      out = batch_norm(b->bn3, prefix + "bn3.", conv(b->conv3, prefix + "conv3.", out));
      const std::string shortcut = b->downsample ? module(*b->downsample, prefix + "downsample.", x) : x;
      return relu(w_.node("Add", {out, shortcut}));
    }
    if (auto* r = dynamic_cast<models::ResNet*>(&m)) {
      std::string h = relu(batch_norm(r->bn1, "bn1.", conv(r->conv1, "conv1.", x)));
      if (r->config.stem == models::ResNetStem::ImageNet) h = max_pool(r->maxpool, h);
      for (size_t i = 0; i < r->layers.size(); ++i) h = module(*r->layers[i], "layer" + std::to_string(i + 1) + ".", h);
      return linear(r->fc, "fc.", flatten(module(r->avgpool, "avgpool.", h)));
    }
    if (auto* s = dynamic_cast<models::SimpleCNN*>(&m))
      return linear(s->fc, "fc.", flatten(max_pool(s->pool, relu(conv(s->conv1, "conv1.", x)))));
    if (auto* c = dynamic_cast<models::CNN*>(&m)) {
      std::string h = max_pool(c->pool, relu(conv(c->conv1, "conv1.", x)));
      h = max_pool(c->pool, relu(conv(c->conv2, "conv2.", h)));
      return linear(c->fc2, "fc2.", relu(linear(c->fc1, "fc1.", flatten(h))));
    }
    EMBER_THROW("ONNX export: no ONNX form for the module '", prefix, "' (", m.type_name(), ")");
  }

 private:
  GraphWriter& w_;
};

void set_value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
  v->set_name(name);
  onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* shape = t->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

}  // namespace

bool onnx_export_built() { return true; }

void run_export(const ExportOptions& o) {
  EMBER_CHECK(!o.output.empty(), "export: name the output file, e.g. model.onnx");
  EMBER_CHECK(!fs::is_directory(o.output), "export: '", o.output, "' is a directory; name a file in it, e.g. '",
              (fs::path(o.output) / "model.onnx").string(), "'");
  EMBER_CHECK(o.model.empty() ? !o.image_size_given : true,
              "export: --image-size applies with --model only (a checkpoint knows its input size)");
  EMBER_CHECK(fs::exists(o.source), "export: '", o.source, "' does not exist (give a checkpoint directory written "
              "by ember train --save, or a weights file)");
  // Before any work: never a run's own file, never a target ember may not write (io/atomic_file.h).
  train::check_output_path("export: the output", o.output, {fs::is_directory(o.source) ? o.source : ""});
  try {
    io::inspect_output(o.output);
  } catch (const Error& e) {
    EMBER_THROW("export: ", e.what());
  }
  const train::LoadedModel m =
      o.model.empty() ? train::load_model(o.source) : train::load_pytorch_model(o.source, o.model, o.image_size);
  m.model->eval();

  onnx::ModelProto model;
  model.set_ir_version(7);  // the IR version of opset 13
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  model.set_producer_name("ember");
  model.set_producer_version(build_info().version);
  model.set_doc_string("ember " + m.model_name + ": input (batch, " + std::to_string(m.in_channels) + ", " +
                       std::to_string(m.image_size) + ", " + std::to_string(m.image_size) +
                       ") float32, normalized as metadata ember.mean / ember.std say; output logits (batch, " +
                       std::to_string(m.classes.size()) + ") in the order of ember.classes");
  const std::pair<const char*, std::string> meta[] = {
      {"ember.model", m.model_name},
      {"ember.in_channels", std::to_string(m.in_channels)},
      {"ember.image_size", std::to_string(m.image_size)},
      {"ember.resize", std::to_string(m.resize)},
      {"ember.mean", nlohmann::json(m.mean).dump()},
      {"ember.std", nlohmann::json(m.std).dump()},
      {"ember.classes", nlohmann::json(m.classes).dump()},
  };
  for (const auto& [key, value] : meta) {
    onnx::StringStringEntryProto* p = model.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  }
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name(m.model_name);
  set_value_info(graph->add_input(), "input", {m.in_channels, m.image_size, m.image_size});
  GraphWriter writer(*graph);
  ModelWriter models(writer);
  const std::string logits = models.module(*m.model, "", "input");
  // The last node's output is renamed "logits".
  onnx::NodeProto* last = graph->mutable_node(graph->node_size() - 1);
  EMBER_CHECK(last->output(0) == logits, "ONNX export: the model's output is not its last node's");
  last->set_output(0, "logits");
  set_value_info(graph->add_output(), "logits", {static_cast<int64_t>(m.classes.size())});

  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    EMBER_THROW("ONNX export: the ONNX checker refuses the model of ", o.source, ": ", e.what());
  }
  std::string bytes;
  EMBER_CHECK(model.SerializeToString(&bytes), "ONNX export: protobuf could not serialize the model");
  io::write_file_atomic(o.output, std::string_view(bytes));
}

}  // namespace ember::app

#else  // no ONNX support in this build

namespace ember::app {

bool onnx_export_built() { return false; }

void run_export(const ExportOptions&) {
  EMBER_THROW("export: this ember was built without ONNX support (CMake did not find protobuf and ONNX: "
              "install libprotobuf-dev and libonnx-dev, e.g. with scripts/install-deps.sh, and configure again)");
}

}  // namespace ember::app

#endif
