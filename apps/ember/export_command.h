#pragma once
// `ember export SOURCE OUT.onnx`: a trained network as an ONNX model (Note [ONNX export] in
// apps/ember/export_command.cpp). Built with protobuf and Debian's ONNX schema library when CMake
// finds them (EMBER_WITH_ONNX); otherwise the command says so. Errors are ember::Error.

#include <cstdint>
#include <string>

namespace ember::app {

struct ExportOptions {
  std::string source;  // a checkpoint directory (ember train --save), an ember weights file, or
                       // with `model` a PyTorch state_dict saved with safetensors
  std::string output;  // the .onnx file, written atomically
  std::string model;   // the zoo model of a PyTorch state_dict ("" for ember's files)
  int64_t image_size = 224;  // with `model`: the input size (as ember predict --image-size)
  bool image_size_given = false;
};

// Whether this build can export (protobuf and libonnx were found at configure time).
bool onnx_export_built();
// Writes options.output, or throws leaving nothing at that path.
void run_export(const ExportOptions& options);

}  // namespace ember::app
