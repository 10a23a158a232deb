#include "explain_command.h"

#include <cstdio>

#include "../../core/error.h"

namespace ember::app {

int run_explain(ExplainCli cli) {
  train::TrainConfig& cfg = cli.cfg;
  EMBER_CHECK(cli.channels >= 1, "--channels must be at least 1, got ", cli.channels);
  EMBER_CHECK(cli.classes >= 2, "--classes must be at least 2, got ", cli.classes);
  EMBER_CHECK(cfg.batch_size >= 1, "--batch-size must be at least 1, got ", cfg.batch_size);
  EMBER_CHECK(cfg.image_size >= 1, "--image-size must be at least 1, got ", cfg.image_size);
  for (int w : cli.options.world_sizes) EMBER_CHECK(w >= 1, "--world-size must be at least 1, got ", w);
  (void)train::gpu_spec(cli.options.gpu);  // an unknown GPU is named before anything is built
  train::prepare_emulator_for_explain(cli.options.gpu);
  cfg.quiet = true;
  std::fputs(train::explain_model(cfg, cli.channels, cli.classes, cli.options).text.c_str(), stdout);
  return 0;
}

}  // namespace ember::app
