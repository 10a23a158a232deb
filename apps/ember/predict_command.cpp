#include "predict_command.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ember/data/image_folder.h>

namespace ember::app {

namespace fs = std::filesystem;

std::vector<std::string> expand_image_dirs(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (!fs::is_directory(in, ec)) {
      out.push_back(in);
      continue;
    }
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(in))
      if (e.is_regular_file(ec) && data::has_extension(e.path().filename().string(), data::image_extensions()))
        files.push_back(e.path().string());
    EMBER_CHECK(!files.empty(), "predict: the directory '", in, "' holds no image files");
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

std::string predictions_json(const train::LoadedModel& m, const std::vector<std::string>& inputs,
                             const std::vector<train::Prediction>& predictions) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < predictions.size(); ++i) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [name, p] : predictions[i].top) top.push_back({name, p});
    list.push_back({{"input", inputs[i]}, {"logits", predictions[i].logits}, {"top", top}});
  }
  return nlohmann::json{{"model", m.model_name}, {"classes", m.classes}, {"predictions", list}}.dump();
}

}  // namespace ember::app
