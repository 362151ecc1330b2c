// gpucloud — the command line client. All logic lives in the other src/cli files.
#include <string>
#include <vector>

#include "cli/app.h"

int main(int argc, char** argv) {
  gpucloud::cli::Deps deps = gpucloud::cli::system_deps();
  return gpucloud::cli::run_cli(std::vector<std::string>(argv, argv + argc), deps);
}
